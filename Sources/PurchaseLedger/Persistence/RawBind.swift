import Foundation
import GRDB
import GRDBSQLite

extension Statement {
    /// Runs this statement with `values` bound straight through SQLite's C API: no
    /// `StatementArguments`, no boxing of each value on the projection and rebuild paths.
    func execute(values: [ColumnValue], _ db: Database) throws {
        let statement = sqliteStatement
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let code: Int32
            switch value {
            case .null: code = sqlite3_bind_null(statement, index)
            case .int64(let n): code = sqlite3_bind_int64(statement, index, n)
            case .double(let d): code = sqlite3_bind_double(statement, index, d)
            case .string(let text):
                code =
                    text.utf8.withContiguousStorageIfAvailable { bytes in
                        sqlite3_bind_text(statement, index, bytes.baseAddress, Int32(bytes.count), SQLITE_TRANSIENT)
                    }
                    ?? {
                        var copy = text
                        return copy.withUTF8 { sqlite3_bind_text(statement, index, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
                    }()
            case .blob(let data):
                code = data.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
            }
            guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code), message: db.lastErrorMessage, sql: sql) }
        }
        let step = sqlite3_step(statement)
        sqlite3_reset(statement)
        guard step == SQLITE_DONE else { throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: sql) }
    }
}

/// SQLite copies bound text and blobs before the bind returns.
let SQLITE_TRANSIENT = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)

/// A statement's SQL, known by identity: the append path's statements are `static let`s of
/// this, found in ``PreparedStatements`` by their object identifier.
final class PreparedSQL: Sendable {
    let text: String
    init(_ text: String) { self.text = text }
}

/// The write connection's statements that every append runs, each prepared once. GRDB's
/// `cachedStatement(sql:)` would find them too, but hashes the whole SQL text on every call,
/// and a projection upsert's is over a kilobyte: on a one-event append that was about a tenth
/// of the time outside SQLite.
final class PreparedStatements: @unchecked Sendable {  // unchecked: used only under the writer's lock
    private var connection: OpaquePointer?
    private var statements: [ObjectIdentifier: Statement] = [:]
    /// The codes of `projection_texts` the writes through these statements read or made.
    private(set) var texts = Projector.ProjectionTexts()

    /// Forgets the codes of `projection_texts` read so far: another connection may have changed
    /// the table since.
    func forgetTexts() { texts = Projector.ProjectionTexts() }

    func callAsFunction(_ sql: PreparedSQL, _ db: Database) throws -> Statement {
        if connection != db.sqliteConnection {
            statements = [:]
            texts = Projector.ProjectionTexts()
            connection = db.sqliteConnection
        }
        if let statement = statements[ObjectIdentifier(sql)] { return statement }
        let statement = try db.makeStatement(sql: sql.text)
        statements[ObjectIdentifier(sql)] = statement
        return statement
    }
}

extension Statement {
    /// Binds `arguments` (integers, from parameter 1) and calls `row` with the SQLite statement
    /// at each row: read through SQLite's C API, with no row object and no `Data`.
    func forEachRow(_ arguments: [Int64], _ db: Database, _ row: (OpaquePointer) throws -> Void) throws {
        let handle = sqliteStatement
        sqlite3_reset(handle)
        for (i, value) in arguments.enumerated() { sqlite3_bind_int64(handle, Int32(i + 1), value) }
        defer { sqlite3_reset(handle) }
        while true {
            let step = sqlite3_step(handle)
            if step == SQLITE_DONE { return }
            guard step == SQLITE_ROW else {
                throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: sql)
            }
            try row(handle)
        }
    }

    /// Runs this statement, which takes no arguments, straight through SQLite's C API: for
    /// `BEGIN` and `COMMIT` on the append path, where GRDB's bookkeeping around every statement
    /// (transaction observers this library does not use) showed in the profile.
    func executeWithoutArguments(_ db: Database) throws {
        let statement = sqliteStatement
        sqlite3_reset(statement)
        let step = sqlite3_step(statement)
        sqlite3_reset(statement)
        guard step == SQLITE_DONE else { throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: sql) }
    }

    /// Runs this statement with an event row's values bound straight through SQLite's C API.
    func executeEventRow(_ f: EventStore.Frame, _ db: Database) throws {
        let statement = sqliteStatement
        sqlite3_reset(statement)
        func check(_ code: Int32) throws {
            guard code == SQLITE_OK else { throw DatabaseError(resultCode: ResultCode(rawValue: code), message: db.lastErrorMessage, sql: sql) }
        }
        func blob(_ index: Int32, _ bytes: [UInt8]) -> Int32 {
            // An empty array may have no address, and binding none would bind NULL.
            bytes.isEmpty
                ? sqlite3_bind_zeroblob(statement, index, 0)
                : bytes.withUnsafeBytes { sqlite3_bind_blob(statement, index, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
        }
        var stream = f.stream
        try check(sqlite3_bind_int64(statement, 1, f.seq))
        try check(stream.withUTF8 { sqlite3_bind_text(statement, 2, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) })
        try check(sqlite3_bind_int64(statement, 3, f.version))
        try check(sqlite3_bind_int64(statement, 4, f.type))
        try check(sqlite3_bind_int64(statement, 5, f.at))
        try check(sqlite3_bind_int64(statement, 6, f.recorded))
        try check(sqlite3_bind_int64(statement, 7, f.flags))
        try check(blob(8, f.payload))
        try check(blob(9, f.link))
        let step = sqlite3_step(statement)
        sqlite3_reset(statement)
        guard step == SQLITE_DONE else { throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: sql) }
    }
}

extension Statement {
    /// The first column of the first row this statement gives with `key` bound as its one blob
    /// argument, copied once into an array (nil: no row, or NULL). Through SQLite's C API: GRDB's
    /// `Data.fetchOne` made a `Data` and the caller an array from it, two copies of every
    /// snapshot page a state load reads.
    func fetchBlob(key: [UInt8]) throws -> [UInt8]? {
        let statement = sqliteStatement
        sqlite3_reset(statement)
        let bound = key.withUnsafeBytes { sqlite3_bind_blob(statement, 1, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
        func failure(_ code: Int32) -> DatabaseError {
            DatabaseError(resultCode: ResultCode(rawValue: code), message: sqlite3_errmsg(sqlite3_db_handle(statement)).map { String(cString: $0) }, sql: sql)
        }
        guard bound == SQLITE_OK else { throw failure(bound) }
        defer { sqlite3_reset(statement) }
        switch sqlite3_step(statement) {
        case SQLITE_ROW:
            guard sqlite3_column_type(statement, 0) != SQLITE_NULL else { return nil }
            let count = Int(sqlite3_column_bytes(statement, 0))
            guard count > 0, let bytes = sqlite3_column_blob(statement, 0) else { return [] }
            return [UInt8](UnsafeRawBufferPointer(start: bytes, count: count))
        case SQLITE_DONE:
            return nil
        case let code:
            throw failure(code)
        }
    }
}
