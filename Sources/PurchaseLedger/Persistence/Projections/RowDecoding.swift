package import GRDB
import GRDBSQLite

/// A GRDB row's columns, decoded as GRDB decodes them.
struct RowColumns: ProjectionColumns {
    private let row: Row
    private let positions: ColumnPositions

    init(_ row: Row) {
        self.row = row
        positions = ColumnPositions(names: row.columnNames)
    }

    func position(_ column: String) -> Int? { positions[column] }
    func string(at i: Int) -> String? { row[i] }
    func int64(at i: Int) -> Int64? { row[i] }
    func double(at i: Int) -> Double? { row[i] }
    var positionCache: PositionCache? { nil }
}

/// The current row of a prepared statement, read through SQLite's C API by positions found once
/// per statement. Through GRDB's rows, a 100,000-row history report spent about a fifth of its
/// time finding the generic metadata of each `Optional<String>` read and copying rows.
struct StatementColumns: ProjectionColumns {
    private let statement: SQLiteStatement
    private let positions: ColumnPositions
    let positionCache: PositionCache? = PositionCache()

    init(_ statement: Statement) {
        self.statement = statement.sqliteStatement
        positions = ColumnPositions(names: statement.columnNames)
    }

    func position(_ column: String) -> Int? { positions[column] }

    func string(at i: Int) -> String? {
        let i = Int32(i)
        guard sqlite3_column_type(statement, i) != SQLITE_NULL, let text = sqlite3_column_text(statement, i) else { return nil }
        return String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, i))), as: UTF8.self)
    }

    func int64(at i: Int) -> Int64? {
        let i = Int32(i)
        guard sqlite3_column_type(statement, i) != SQLITE_NULL else { return nil }
        return sqlite3_column_int64(statement, i)
    }

    func double(at i: Int) -> Double? {
        let i = Int32(i)
        guard sqlite3_column_type(statement, i) != SQLITE_NULL else { return nil }
        return sqlite3_column_double(statement, i)
    }

    /// Runs `sql` (prepared once per connection) and decodes each row it gives.
    static func fetchAll<T>(
        _ db: Database, sql: String, arguments: StatementArguments = StatementArguments(), _ decode: (StatementColumns) throws -> T
    ) throws -> [T] {
        let statement = try db.cachedStatement(sql: sql)
        try statement.setArguments(arguments)
        let columns = StatementColumns(statement)
        let cursor = try Row.fetchCursor(statement)
        var decoded: [T] = []
        while try cursor.next() != nil {
            decoded.append(try decode(columns))
        }
        return decoded
    }
}

extension TransactionRecord {
    /// A `transactions` projection row (SQLite's, or the fleet store's as a GRDB row).
    package init(row: Row) {
        self.init(columns: RowColumns(row))
    }

    /// The fields its declaration (``TransactionRecord/schema``) reads back, set on a plain
    /// value and then boxed once; `downloads` from the `downloads` rows.
    package init(columns c: some ProjectionColumns, downloads: [String] = []) {
        var f = TransactionRecord.fields(columns: c)
        f.downloads = downloads
        self.init(fields: f)
    }
}

extension DownloadRecord {
    /// A `downloads` projection row (SQLite's, or the fleet store's as a GRDB row).
    package init(row: Row) {
        self.init(columns: RowColumns(row))
    }

    /// As ``TransactionRecord/init(columns:downloads:)``, by ``DownloadRecord/schema``.
    package init(columns c: some ProjectionColumns) {
        self.init(fields: DownloadRecord.fields(columns: c))
    }
}

extension Timestamp {
    init?(ms: Int64?) {
        guard let ms else { return nil }
        self.init(millisecondsSinceEpoch: ms)
    }
}

extension ColumnType {
    /// The type a SQLite migration declares (`PRAGMA table_info`'s `type`).
    package var sqlite: String {
        switch self {
        case .text: "TEXT"
        case .integer, .boolean: "INTEGER"
        case .real: "REAL"
        }
    }
}

extension ColumnValue {
    /// The value as GRDB holds it.
    package var databaseValue: DatabaseValue {
        switch self {
        case .null: .null
        case .int64(let n): n.databaseValue
        case .double(let d): d.databaseValue
        case .string(let text): text.databaseValue
        case .blob(let data): data.databaseValue
        }
    }
}

extension ProductViewRecord {
    /// A `product_views` projection row (SQLite's, or the fleet store's), by ``ProductViewRecord/schema``.
    package init(columns c: some ProjectionColumns) {
        self.init(fields: ProductViewRecord.fields(columns: c))
    }
}
