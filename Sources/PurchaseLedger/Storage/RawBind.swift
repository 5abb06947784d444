import Foundation
import GRDB
import GRDBSQLite

extension Statement {
    /// Runs this statement with `values` bound straight through SQLite's C API: no
    /// `StatementArguments`, no boxing of each value on the projection and rebuild paths.
    func execute(values: [DatabaseValue], _ db: Database) throws {
        let statement = sqliteStatement
        sqlite3_reset(statement)
        sqlite3_clear_bindings(statement)
        for (i, value) in values.enumerated() {
            let index = Int32(i + 1)
            let code: Int32
            switch value.storage {
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
private let SQLITE_TRANSIENT = unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self)
