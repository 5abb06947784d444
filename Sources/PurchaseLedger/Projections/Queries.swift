import GRDB
import GRDBSQLite

/// Reads of the current state, from the projection tables: they never wait for a writer and
/// always see the last commit of any process.
extension Ledger {
    /// Current transactions, sorted by id; only `user`'s when given.
    public func transactions(user: String? = nil) throws -> [TransactionRecord] {
        let user = Identifier.normalize(user)
        return try readProjections { db in
            var records = try StatementColumns.fetchAll(
                db,
                sql: user == nil
                    ? "SELECT * FROM transactions ORDER BY transaction_id"
                    : "SELECT * FROM transactions WHERE user_id = ? ORDER BY transaction_id", arguments: user.map { [$0] } ?? []
            ) { TransactionRecord(columns: $0) }
            for i in records.indices {
                records[i].downloads = try Ledger.downloadIDs(transaction: records[i].transaction, db)
            }
            return records
        }
    }

    /// One transaction, or nil.
    public func transaction(_ id: String) throws -> TransactionRecord? {
        let id = Identifier.normalize(id)
        return try readProjections { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM transactions WHERE transaction_id = ?", arguments: [id]) else { return nil }
            var record = TransactionRecord(row: row)
            record.downloads = try Ledger.downloadIDs(transaction: id, db)
            return record
        }
    }

    /// A transaction's download ids, in delivery order, through a statement prepared once.
    static func downloadIDs(transaction: String, _ db: Database) throws -> [String] {
        try String.fetchAll(
            db.cachedStatement(sql: "SELECT download_id FROM downloads WHERE transaction_id = ? ORDER BY position"), arguments: [transaction])
    }

    /// Current downloads, sorted by id; only `transaction`'s (in delivery order) when given.
    public func downloads(transaction: String? = nil) throws -> [DownloadRecord] {
        let transaction = Identifier.normalize(transaction)
        return try readProjections { db in
            return try StatementColumns.fetchAll(
                db,
                sql: transaction == nil
                    ? "SELECT * FROM downloads ORDER BY download_id"
                    : "SELECT * FROM downloads WHERE transaction_id = ? ORDER BY position", arguments: transaction.map { [$0] } ?? []
            ) { DownloadRecord(columns: $0) }
        }
    }

    /// Whether a purchased or restored, not revoked transaction grants `product`, itself or
    /// through a related product (declared on either side).
    public func owns(product: String) throws -> Bool {
        try readProjections { db in try Ledger.owns(Identifier.normalize(product), db) }
    }

    static func owns(_ product: String, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                SELECT EXISTS (SELECT 1 FROM transactions
                    WHERE state IN ('purchased', 'restored') AND revoked = 0
                      AND (product = :p
                           OR product IN (SELECT related_product FROM related_products WHERE product = :p)
                           OR product IN (SELECT product FROM related_products WHERE related_product = :p)))
                """, arguments: ["p": product]) ?? false
    }

    /// The owned content versions: the latest copy-out of each product the user owns, sorted by
    /// product and content.
    public func ownedContent() throws -> [OwnedContent] {
        try readProjections { db in
            let rows = try StatementColumns.fetchAll(db, sql: "SELECT * FROM owned_content ORDER BY product, content") { c in
                var o = OwnedContent.blank
                OwnedContent.schema.read(&o, from: c)
                return o
            }
            var owned: [OwnedContent] = []
            var owns: [String: Bool] = [:]
            for o in rows {
                if owns[o.product] == nil { owns[o.product] = try Ledger.owns(o.product, db) }
                if owns[o.product] == true { owned.append(o) }
            }
            return owned
        }
    }

    /// The content URL of a finished download whose transaction is not finished; nil otherwise,
    /// and always nil after the finish.
    public func contentURL(for download: String) throws -> String? {
        let download = Identifier.normalize(download)
        return try readProjections { db in
            try String.fetchOne(db, sql: "SELECT content_url FROM downloads WHERE download_id = ? AND state = 'finished'", arguments: [download])
        }
    }

    /// Whether a version newer than the owned one was published for that product and content.
    public func updateAvailable(product: String, content: String) throws -> Bool {
        let (product, content) = (Identifier.normalize(product), Identifier.normalize(content))
        return try readProjections { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT o.content_version, c.latest_version FROM owned_content o
                        JOIN product_contents c ON c.product = o.product AND c.content = o.content
                        WHERE o.product = ? AND o.content = ?
                        """, arguments: [product, content]),
                let owned = ContentVersion(row[0]), let latest = ContentVersion(row[1])
            else { return false }
            return latest.isNewer(than: owned)
        }
    }

    /// The download registered for a content URL (`contentRegistered`); throws
    /// ``LedgerError/Code/unregisteredURL`` when there is none.
    public func download(forURL url: String) throws -> String {
        let url = Identifier.normalize(url)
        guard let id = try read({ db in try String.fetchOne(db, sql: "SELECT download_id FROM downloads WHERE url = ?", arguments: [url]) }) else {
            throw LedgerError(.unregisteredURL, "no download is registered for this URL")
        }
        return id
    }

    /// One step of a transaction's life: the event and the state right after it.
    public struct TimelineEntry: Sendable {
        public var event: RecordedEvent
        public var transaction: TransactionRecord?
        /// The transaction's downloads after the event, in delivery order.
        public var downloads: [DownloadRecord]
    }

    /// Every event of a transaction and its downloads, each with the state after it.
    public func timeline(transaction id: String) throws -> [TimelineEntry] {
        let id = Identifier.normalize(id)
        guard let entries = try timelines(transactions: [id])[id], !entries.isEmpty else {
            throw LedgerError.malformed("transaction \(id) is not in this ledger")
        }
        return entries
    }
}

/// Where the columns of one query's rows are, found by name once.
///
/// GRDB finds a column by name again at every read, lowercasing the name and every column's
/// name to compare them: decoding the transactions and downloads of a 100,000-row history report
/// by name spent about 1 s there. ``StatementColumns`` resolves the positions once per statement
/// and reads every row by position.
struct ColumnPositions: Sendable {
    private let positions: [String: Int]

    /// The positions of the columns `names` (by lowercase name; the first of a repeated name, as
    /// GRDB reads it).
    init(names: some Sequence<String>) {
        var positions: [String: Int] = [:]
        for (i, name) in names.enumerated() {
            let name = name.lowercased()
            if positions[name] == nil { positions[name] = i }
        }
        self.positions = positions
    }

    subscript(_ columnName: String) -> Int? { positions[columnName] }
}

/// The columns of one projection row, read by name (lowercase) or by position: a GRDB row (the
/// fleet store's), or the current row of a SQLite statement (``StatementColumns``). The record
/// decoders are generic over it, so each reader's calls are specialized, not dispatched.
package protocol ProjectionColumns {
    /// Where `column` is in the result (nil: it is not).
    func position(_ column: String) -> Int?
    func string(at position: Int) -> String?
    func int64(at position: Int) -> Int64?
    func double(at position: Int) -> Double?
    /// Where a declaration's columns were found in this result, kept for its next rows (nil:
    /// found again for each row).
    var positionCache: PositionCache? { get }
}

extension ProjectionColumns {
    package func string(_ column: String) -> String? { position(column).flatMap { string(at: $0) } }
    package func int64(_ column: String) -> Int64? { position(column).flatMap { int64(at: $0) } }
    package func double(_ column: String) -> Double? { position(column).flatMap { double(at: $0) } }
    package func bool(_ column: String) -> Bool { (int64(column) ?? 0) != 0 }
    package func int(_ column: String) -> Int? { int64(column).map { Int(truncatingIfNeeded: $0) } }

    /// The positions of `columns` (a declaration's, named by `key`), found once per result.
    func positions(_ key: ObjectIdentifier, of columns: [ProjectionColumn]) -> [Int?] {
        if let known = positionCache?.lists[key] { return known }
        let found = columns.map { position($0.name) }
        positionCache?.lists[key] = found
        return found
    }
}

/// Where declarations' columns are in one result, found at its first row and kept for the rest.
package final class PositionCache: @unchecked Sendable {  // unchecked: used by the one task that reads its result
    var lists: [ObjectIdentifier: [Int?]] = [:]

    package init() {}
}

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
