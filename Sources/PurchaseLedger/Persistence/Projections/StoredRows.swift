import Foundation
import GRDB
import GRDBSQLite

extension Projector {
    /// A hash of a row's values past its key, the same whether taken from the values a rebuild
    /// would write or from the row as stored: numbers by value (a float holding an integer as
    /// that integer, as a REAL column stores one), text and blobs by their bytes.
    struct RowHash {
        // A multiply-rotate hash over 8-byte words (as `RecordKey`'s), finished with a full
        // avalanche: Hasher's SipHash cost more than building the rows.
        private var h: UInt64 = 0x243F_6A88_85A3_08D3

        init() {}

        init(_ row: [ColumnValue], from start: Int) {
            for value in row[start...] { add(value) }
        }

        mutating func add(_ value: ColumnValue) {
            switch value {
            case .null: mix(0)
            case .int64(let n): integer(n)
            case .double(let d): double(d)
            case .string(var text): text.withUTF8 { bytes(3, UnsafeRawBufferPointer($0)) }
            case .blob(let data): data.withUnsafeBytes { bytes(4, $0) }
            }
        }

        /// Adds column `column` of the statement's current row.
        mutating func add(_ statement: SQLiteStatement, _ column: Int32) {
            switch sqlite3_column_type(statement, column) {
            case SQLITE_INTEGER: integer(sqlite3_column_int64(statement, column))
            case SQLITE_FLOAT: double(sqlite3_column_double(statement, column))
            case SQLITE_TEXT:
                let text = sqlite3_column_text(statement, column)  // before the byte count, as SQLite asks
                bytes(3, UnsafeRawBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column))))
            case SQLITE_BLOB:
                let blob = sqlite3_column_blob(statement, column)
                bytes(4, UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(statement, column))))
            default: mix(0)
            }
        }

        @inline(__always) private mutating func mix(_ word: UInt64) {
            h = (h ^ word) &* 0x9E37_79B9_7F4A_7C15
            h = (h << 29) | (h >> 35)
        }

        private mutating func integer(_ n: Int64) {
            mix(1)
            mix(UInt64(bitPattern: n))
        }

        private mutating func double(_ d: Double) {
            if let n = Int64(exactly: d) { return integer(n) }
            mix(2)
            mix(d.bitPattern)
        }

        private mutating func bytes(_ tag: UInt64, _ buffer: UnsafeRawBufferPointer) {
            mix(tag | UInt64(buffer.count) << 8)
            var i = 0
            while i + 8 <= buffer.count {
                mix(buffer.loadUnaligned(fromByteOffset: i, as: UInt64.self))
                i += 8
            }
            var last: UInt64 = 0
            while i < buffer.count {
                last = last << 8 | UInt64(buffer[i])
                i += 1
            }
            mix(last)
        }

        func finalize() -> Int { Int(truncatingIfNeeded: RecordKey.finish(h)) }
    }

    /// The rows of `table` as stored, each key with a ``RowHash`` of the rest of its row. A
    /// rebuild reads them on a read connection while it replays the log, then compares the rows
    /// the log gives against them and writes only those that differ.
    ///
    /// A hash, not the values: 64 bits per row instead of the whole table in memory. Two different
    /// rows hash alike with a chance of about one in 2^64; `rebuild --full` rewrites every row
    /// without comparing.
    static func storedRowHashes(_ table: Table, _ db: Database) throws -> RowsByKey<Int> {
        let columns = Int32(table.columns.count), keyColumns = Int32(table.keyColumns)
        var hashes = RowsByKey<Int>()
        try scan(table, db) { statement in
            var hash = RowHash()
            for column in keyColumns..<columns { hash.add(statement, column) }
            hashes[(0..<keyColumns).map { value(statement, $0) }[...]] = hash.finalize()
        }
        return hashes
    }

    /// Steps through every row of `table`, every column of it, in storage order.
    /// A table a ledger waiting for its migration lacks (0009's `product_views`, on a read-only
    /// open) reads as empty: that ledger holds no event that would fill it.
    private static func scan(_ table: Table, _ db: Database, _ row: (SQLiteStatement) -> Void) throws {
        if table.name == Table.productViews.name, try !db.tableExists(table.name) { return }
        let select = try db.makeStatement(sql: "SELECT \(table.columns.joined(separator: ", ")) FROM \(table.name)")
        let statement = select.sqliteStatement
        defer { sqlite3_reset(statement) }
        while true {
            let step = sqlite3_step(statement)
            if step == SQLITE_DONE { return }
            guard step == SQLITE_ROW else { throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: select.sql) }
            row(statement)
        }
    }

    /// Column `column` of the statement's current row.
    private static func value(_ statement: SQLiteStatement, _ column: Int32) -> ColumnValue {
        switch sqlite3_column_type(statement, column) {
        case SQLITE_INTEGER: return sqlite3_column_int64(statement, column).columnValue
        case SQLITE_FLOAT: return sqlite3_column_double(statement, column).columnValue
        case SQLITE_TEXT:
            let text = sqlite3_column_text(statement, column)
            return String(decoding: UnsafeBufferPointer(start: text, count: Int(sqlite3_column_bytes(statement, column))), as: UTF8.self).columnValue
        case SQLITE_BLOB:
            let blob = sqlite3_column_blob(statement, column)
            return Data(UnsafeRawBufferPointer(start: blob, count: Int(sqlite3_column_bytes(statement, column)))).columnValue
        default: return .null
        }
    }

    /// A row's key as SQLite tells keys apart: text byte for byte. (Swift's `String` takes
    /// canonically equivalent texts as equal, the Kelvin sign `\u{212A}` and `K` say: a stored
    /// row keyed by one was taken for the row of the other, and a rebuild never deleted it.)
    struct ExactKey: Hashable, Sendable {
        let columns: [ColumnValue]

        init<C: Collection<ColumnValue>>(_ columns: C) {
            self.columns = Array(columns)
        }

        static func == (a: ExactKey, b: ExactKey) -> Bool {
            a.columns.count == b.columns.count && zip(a.columns, b.columns).allSatisfy(ExactText.same)
        }

        // Equal exactly, equal as values: the values' hash serves.
        func hash(into hasher: inout Hasher) { hasher.combine(columns) }
    }

    /// A one-column text key as SQLite tells it apart (byte for byte), hashed as a ``RecordKey``.
    struct ExactText: Hashable, Sendable {
        let id: String

        static func == (a: ExactText, b: ExactText) -> Bool {
            let contiguous = a.id.utf8.withContiguousStorageIfAvailable { x in b.id.utf8.withContiguousStorageIfAvailable { y in x.elementsEqual(y) } }
            return (contiguous ?? nil) ?? a.id.utf8.elementsEqual(b.id.utf8)
        }

        /// Whether two values are the same, text byte for byte.
        static func same(_ x: ColumnValue, _ y: ColumnValue) -> Bool {
            if case .string(let s) = x, case .string(let t) = y { return ExactText(id: s) == ExactText(id: t) }
            return x == y
        }

        func hash(into hasher: inout Hasher) { RecordKey(id).hash(into: &hasher) }
        func _rawHashValue(seed: Int) -> Int { RecordKey(id)._rawHashValue(seed: seed) }
    }

    /// Values by a projection row's key (its first values), told apart as SQLite does: a
    /// one-column text key hashed as a ``RecordKey`` and a one-column integer key as it is (every
    /// large table has one or the other), any other key as its values.
    struct RowsByKey<Value: Sendable>: Sendable {
        private var text: [ExactText: Value] = [:]
        private var integer: [Int64: Value] = [:]
        private var other: [ExactKey: Value] = [:]

        init() {}

        var count: Int { text.count + integer.count + other.count }

        var keys: [[ColumnValue]] {
            text.keys.map { [$0.id.columnValue] } + integer.keys.map { [$0.columnValue] } + other.keys.map(\.columns)
        }

        subscript(key: ArraySlice<ColumnValue>) -> Value? {
            get {
                if key.count == 1 {
                    switch key[key.startIndex] {
                    case .string(let id): return text[ExactText(id: id)]
                    case .int64(let n): return integer[n]
                    case .null, .double, .blob: break
                    }
                }
                return other[ExactKey(key)]
            }
            set {
                if key.count == 1 {
                    switch key[key.startIndex] {
                    case .string(let id): text[ExactText(id: id)] = newValue; return
                    case .int64(let n): integer[n] = newValue; return
                    case .null, .double, .blob: break
                    }
                }
                other[ExactKey(key)] = newValue
            }
        }

        /// The value under `key`, taken out.
        mutating func take(_ key: ArraySlice<ColumnValue>) -> Value? {
            defer { self[key] = nil }
            return self[key]
        }
    }
}

extension Projector {
    /// The rows of `table` that differ from `expected`, compared value by value (numbers by
    /// value, text and blobs by their bytes): the keys of rows missing, different or extra, in
    /// key order, and how many rows are stored. The table is read once, in storage order, each
    /// stored row found among the expected ones by its key; nothing is copied into memory but
    /// the keys of the expected rows. `verify` runs this on every table.
    static func differences(_ table: Table, expected: [[ColumnValue]], _ db: Database) throws -> (stored: Int, keys: [[ColumnValue]]) {
        let keyColumns = table.keyColumns
        var index = RowsByKey<Int>()
        for (i, row) in expected.enumerated() { index[row[..<keyColumns]] = i }
        var matched = [Bool](repeating: false, count: expected.count)
        var keys: [[ColumnValue]] = []
        var stored = 0
        let columns = Int32(table.columns.count)
        try scan(table, db) { statement in
            stored += 1
            let key = (0..<Int32(keyColumns)).map { value(statement, $0) }
            guard let i = index[key[...]], !matched[i] else {
                keys.append(key)
                return
            }
            matched[i] = true
            let row = expected[i]
            if !(Int32(keyColumns)..<columns).allSatisfy({ column(statement, $0, equals: row[Int($0)]) }) { keys.append(key) }
        }
        for (i, found) in matched.enumerated() where !found { keys.append(Array(expected[i].prefix(keyColumns))) }
        return (stored, keys.sorted(by: table.keyLess))
    }

    /// Whether column `column` of the statement's current row holds `value`.
    private static func column(_ statement: SQLiteStatement, _ column: Int32, equals value: ColumnValue) -> Bool {
        let type = sqlite3_column_type(statement, column)
        switch value {
        case .null:
            return type == SQLITE_NULL
        case .int64(let n):
            if type == SQLITE_INTEGER { return sqlite3_column_int64(statement, column) == n }
            return type == SQLITE_FLOAT && sqlite3_column_double(statement, column) == Double(n)
        case .double(let d):
            if type == SQLITE_FLOAT { return sqlite3_column_double(statement, column) == d }
            return type == SQLITE_INTEGER && Double(sqlite3_column_int64(statement, column)) == d
        case .string(var text):
            guard type == SQLITE_TEXT else { return false }
            let stored = sqlite3_column_text(statement, column)
            let count = Int(sqlite3_column_bytes(statement, column))
            return text.withUTF8 { $0.count == count && (count == 0 || memcmp($0.baseAddress!, stored!, count) == 0) }
        case .blob(let data):
            guard type == SQLITE_BLOB else { return false }
            let stored = sqlite3_column_blob(statement, column)
            let count = Int(sqlite3_column_bytes(statement, column))
            return data.count == count && (count == 0 || data.withUnsafeBytes { memcmp($0.baseAddress!, stored!, count) == 0 })
        }
    }
}
