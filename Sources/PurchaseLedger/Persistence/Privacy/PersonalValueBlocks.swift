import Foundation
import GRDB
import GRDBSQLite

/// Personal values other than user ids, sealed into LZ4-compressed blocks of
/// ``rowsPerBlock`` rows (migration 0010; docs/format.md, "Personal values"; docs/storage.md,
/// "Erasure"). The rows of `personal_values` are then only the user ids and the open tail.
///
/// Stored one row each, the 1,000,000-event workload's 324,610 values took 21.6 MB of the file;
/// sealed, the 314,242 that are not user ids take 4.5 MB (4.8 MB of SQLite pages). An erasure
/// rewrites each block holding one of the erased refs without it (``erase(_:_:)``): the values
/// are deleted, not hidden.
///
/// A block's records, in ref order, one after another (decompressed):
///
///     varint   ref minus the previous record's ref (the first: minus first_ref - 1)
///     varint   owner: the ref of the user id it belongs to, 0 for no user
///     byte     1: a salt of 16 bytes follows (a value of no user), 0: none
///     varint   length, then the value's bytes (as `personal_values.value` holds them)
enum PersonalValueBlocks {
    /// Rows per block. On the 1,000,000-event workload (LZ4 level 6): 512 rows 4.84 MB,
    /// 1,024 rows 4.56 MB, 2,048 rows 4.35 MB; an erasure rewrites whole blocks, and a state
    /// loaded from a snapshot decodes the blocks its events reach, so not larger.
    static let rowsPerBlock = 1024

    /// One stored block, compressed.
    struct Stored {
        var first: Int64
        var last: Int64
        var rawSize: Int
        var data: [UInt8]

        var what: String { "the block of personal values \(first)...\(last)" }

        /// Whether any of `refs` (sorted) lies in this block's range.
        func covers(any refs: [Int64]) -> Bool {
            var low = 0
            var high = refs.count
            while low < high {
                let middle = (low + high) / 2
                if refs[middle] < first { low = middle + 1 } else { high = middle }
            }
            return low < refs.count && refs[low] <= last
        }
    }

    /// Whether `db` has the table (a ledger opened read-only before migration 0010 does not).
    static func exist(_ db: Database) throws -> Bool {
        try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'personal_value_blocks')")) == true
    }

    /// The highest ref any block covers (0: none).
    static func sealedThrough(_ db: Database) throws -> Int64 {
        guard try exist(db) else { return 0 }
        return try Int64.fetchOne(db.cachedStatement(sql: "SELECT last_ref FROM personal_value_blocks ORDER BY first_ref DESC LIMIT 1")) ?? 0
    }

    // MARK: - Records

    /// The records of `rows` (in ref order, none a user id's), from `first`.
    static func encode(_ rows: ArraySlice<PersonalValueRow>, first: Int64) -> [UInt8] {
        var w = BinaryWriter(capacity: rows.count * 72)
        var previous = first - 1
        for row in rows {
            w.varint(UInt64(row.ref - previous))
            previous = row.ref
            w.varint(UInt64(row.owner))
            if let salt = row.salt {
                w.bytes.append(1)
                w.bytes.append(contentsOf: salt)
            } else {
                w.bytes.append(0)
            }
            w.lengthPrefixed(row.value)
        }
        return w.bytes
    }

    /// Calls `visit` with each record of the decompressed block `raw` (ref, owner, the salt's
    /// range or nil, the value's range), checking each ref lies in the block and grows.
    static func forEachRecord(
        _ raw: UnsafeRawBufferPointer, of block: Stored, _ visit: (Int64, Int64, Range<Int>?, Range<Int>) throws -> Void
    ) throws {
        var r = BinaryReader(raw)
        do {
            // A range edited to nothing, or to refs no writer gives (a ref is at least 1).
            guard block.first >= 1, block.last >= block.first else {
                throw BinaryReader.Failure(message: "its range \(block.first)...\(block.last) holds no ref")
            }
            var ref = block.first - 1
            while !r.isAtEnd {
                let step = try r.varint()
                guard step >= 1, step <= UInt64(block.last - ref) else {
                    throw BinaryReader.Failure(message: "a ref outside \(block.first)...\(block.last), or out of order")
                }
                ref += Int64(step)
                let owner = try r.varint()
                guard owner <= UInt64(Int64.max) else { throw BinaryReader.Failure(message: "an owner out of range") }
                let salt: Range<Int>?
                switch try r.byte() {
                case 0: salt = nil
                case 1: salt = try r.fixed(PersonalValues.saltSize)
                case let flag: throw BinaryReader.Failure(message: "a salt flag of \(flag)")
                }
                try visit(ref, Int64(owner), salt, try r.span())
            }
        } catch let failure as BinaryReader.Failure {
            throw LedgerError.make(.corruptData, "\(block.what) does not decode (\(failure.message)): it was edited or damaged")
        }
    }

    /// The rows of `block`, in ref order.
    static func rows(of block: Stored) throws -> [PersonalValueRow] {
        let raw = try decompress(block)
        var rows: [PersonalValueRow] = []
        rows.reserveCapacity(rowsPerBlock)
        try raw.withUnsafeBytes { raw in
            try forEachRecord(raw, of: block) { ref, owner, salt, value in
                rows.append(PersonalValueRow(ref: ref, owner: owner, salt: salt.map { Array(raw[$0]) }, value: Array(raw[value])))
            }
        }
        return rows
    }

    static func decompress(_ block: Stored) throws(LedgerError) -> [UInt8] {
        guard block.first >= 1, block.last >= block.first else {
            throw LedgerError.make(.corruptData, "\(block.what) does not decode (its range holds no ref): it was edited or damaged")
        }
        guard block.rawSize >= 0, block.rawSize <= LZ4.maxInputSize else {
            throw LedgerError.make(.corruptData, "\(block.what) claims \(block.rawSize) bytes decompressed: it was edited or damaged")
        }
        return try LZ4.decompressStored(block.data, originalSize: block.rawSize, block.what)
    }

    // MARK: - Reading and writing

    /// The stored blocks holding any ref in `above + 1 ... through`, in ref order, and any whose
    /// range was edited to nothing (which then does not decode, rather than go unread).
    static func blocks(above: Int64 = 0, through: Int64 = .max, _ db: Database) throws -> [Stored] {
        guard try exist(db) else { return [] }
        let statement = try db.cachedStatement(
            sql: """
                SELECT first_ref, last_ref, raw_size, data FROM personal_value_blocks
                WHERE first_ref <= ?2 AND (last_ref > ?1 OR last_ref < first_ref) ORDER BY first_ref
                """)
        var blocks: [Stored] = []
        try statement.forEachRow([above, through], db) { handle in
            let count = Int(sqlite3_column_bytes(handle, 3))
            let data = count > 0 ? [UInt8](UnsafeRawBufferPointer(start: sqlite3_column_blob(handle, 3), count: count)) : []
            blocks.append(
                Stored(
                    first: sqlite3_column_int64(handle, 0), last: sqlite3_column_int64(handle, 1),
                    rawSize: Int(clamping: sqlite3_column_int64(handle, 2)), data: data))
        }
        return blocks
    }

    /// Stores `rows` (in ref order, none a user id's) as one block.
    static func write(_ rows: ArraySlice<PersonalValueRow>, _ db: Database) throws {
        guard let first = rows.first?.ref, let last = rows.last?.ref else { return }
        try insert(rows, first: first, last: last, db)
        // The refs assigned are counted by `personal_values`' AUTOINCREMENT (sqlite_sequence),
        // which rows sealed without ever being rows do not move.
        try db.execute(
            sql: """
                INSERT INTO sqlite_sequence (name, seq) SELECT 'personal_values', 0
                    WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'personal_values');
                UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'personal_values'
                """, arguments: [last])
    }

    /// Compresses `rows` into the block of range `first...last`.
    private static func insert(_ rows: ArraySlice<PersonalValueRow>, first: Int64, last: Int64, _ db: Database) throws {
        let raw = encode(rows, first: first)
        let data = try LZ4.compressForStorage(raw, "personal values \(first)...\(last)")
        try db.execute(
            sql: "INSERT INTO personal_value_blocks (first_ref, last_ref, raw_size, data) VALUES (?, ?, ?, ?)",
            arguments: [first, last, raw.count, Data(data)])
    }

    /// The open tail: the rows of `personal_values` that are not user ids, above `above`, in ref order.
    static func tail(above: Int64, _ db: Database) throws -> [PersonalValueRow] {
        try Row.fetchAll(
            db.cachedStatement(sql: "SELECT ref, owner, salt, value FROM personal_values WHERE ref > ? AND owner <> ref ORDER BY ref"),
            arguments: [above]
        ).map { row in
            PersonalValueRow(ref: row[0], owner: row[1], salt: (row[2] as Data?).map { [UInt8]($0) }, value: [UInt8]((row[3] as Data?) ?? Data()))
        }
    }

    /// Seals the open tail with `more` (rows not stored yet, in ref order, after the tail's, none
    /// a user id's) into blocks of `rowsPerBlock` rows, and returns the rows left over (fewer
    /// than a block), not stored. `tailCount`: how many rows the table's tail holds (the caller
    /// keeps count); 0 once they are sealed. Inside the caller's write transaction.
    static func seal(
        _ more: [PersonalValueRow], tailCount: inout Int, rowsPerBlock: Int = rowsPerBlock, _ db: Database
    ) throws -> [PersonalValueRow] {
        guard tailCount + more.count >= rowsPerBlock, try exist(db) else { return more }
        var rows: [PersonalValueRow] = []
        if tailCount > 0 {
            let sealed = try sealedThrough(db)
            rows = try tail(above: sealed, db)
            if let last = rows.last?.ref {
                // Deleted as rows (their cells zeroed: secure_delete), kept in the blocks.
                try db.execute(sql: "DELETE FROM personal_values WHERE ref > ? AND ref <= ? AND owner <> ref", arguments: [sealed, last])
            }
            tailCount = 0
        }
        rows += more
        var start = 0
        while rows.count - start >= rowsPerBlock {
            try write(rows[start..<(start + rowsPerBlock)], db)
            start += rowsPerBlock
        }
        return Array(rows[start...])
    }

    /// How many rows the open tail holds.
    static func tailCount(_ db: Database) throws -> Int {
        try Int.fetchOne(
            db.cachedStatement(sql: "SELECT count(*) FROM personal_values WHERE ref > ? AND owner <> ref"), arguments: [try sealedThrough(db)]) ?? 0
    }

    /// The sealed values' refs and owners (only those among `refs`, when given).
    static func owners(among refs: Set<Int64>? = nil, _ db: Database) throws -> [(ref: Int64, owner: Int64)] {
        var found: [(ref: Int64, owner: Int64)] = []
        let sorted = refs?.sorted()
        for block in try blocks(above: (sorted?.first ?? 1) - 1, through: sorted?.last ?? .max, db) {
            if let sorted, !block.covers(any: sorted) { continue }
            let raw = try decompress(block)
            try raw.withUnsafeBytes { raw in
                try forEachRecord(raw, of: block) { ref, owner, _, _ in
                    if refs?.contains(ref) ?? true { found.append((ref, owner)) }
                }
            }
        }
        return found
    }

    /// Rewrites every block holding one of `refs` without it (a block left empty is deleted).
    /// The old bytes are zeroed by `secure_delete`, which every connection sets. Returns how
    /// many blocks it rewrote.
    @discardableResult
    static func erase(_ refs: Set<Int64>, _ db: Database) throws -> Int {
        guard let lowest = refs.min(), let highest = refs.max() else { return 0 }
        var rewritten = 0
        let sorted = refs.sorted()
        for block in try blocks(above: lowest - 1, through: highest, db) where block.covers(any: sorted) {
            let rows = try rows(of: block)
            let kept = rows.filter { !refs.contains($0.ref) }
            guard kept.count < rows.count else { continue }
            rewritten += 1
            try db.execute(sql: "DELETE FROM personal_value_blocks WHERE first_ref = ?", arguments: [block.first])
            if kept.isEmpty { continue }
            // Keeps its range, so that the tail (refs above the last block) is unchanged.
            try insert(kept[...], first: block.first, last: block.last, db)
        }
        return rewritten
    }
}
