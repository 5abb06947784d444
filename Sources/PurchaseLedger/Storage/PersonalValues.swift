import Crypto
import Foundation
import GRDB
import GRDBSQLite

/// The ledger's personal values as one read saw them: what each ref an event holds stands for
/// (migration 0007, docs/storage.md "Erasure"). Immutable, so the threads that decode sealed
/// blocks share one.
package final class PersonalValues: Sendable {
    /// No values: a ledger whose events hold none (or one opened before migration 0007).
    package static let empty = PersonalValues(values: [nil], assigned: 0, generation: 0)

    /// Index: the ref; nil where the value was erased. Index 0 is never a ref.
    private let values: [String?]
    /// Refs assigned so far (the highest ever given, erased or not).
    let assigned: Int64
    /// How many erasures the ledger had recorded when this was read.
    let generation: Int64

    init(values: [String?], assigned: Int64, generation: Int64) {
        self.values = values
        self.assigned = assigned
        self.generation = generation
    }

    /// The value `ref` stands for, or the erased marker when `forget` erased it.
    @inline(__always)
    func resolve(_ ref: UInt64) throws(BinaryReader.Failure) -> String {
        guard ref >= 1, ref < UInt64(values.count) else {
            throw BinaryReader.Failure(message: "refers to personal value \(ref), which the ledger never recorded")
        }
        return values[Int(ref)] ?? PersonalValues.erased(ref)
    }

    /// Whether `ref` was recorded and is still held (not erased).
    func holds(_ ref: Int64) -> Bool {
        ref >= 1 && ref < Int64(values.count) && values[Int(ref)] != nil
    }

    /// What an erased value reads as everywhere (state, projections, reports, export): the same
    /// marker for the same value, so the rules still see which values were equal, and nothing of
    /// the value itself.
    package static func erased(_ ref: UInt64) -> String { "[erased \(ref)]" }

    // MARK: - Reading, with a cache per file

    /// The values as `db` sees them. Kept per file between reads, and extended by the refs
    /// assigned since (refs only grow; an erasure changes the generation and reloads).
    static func current(_ db: Database) throws -> PersonalValues {
        // A ledger opened read-only before migration 0007 has no such table (and no refs).
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'personal_values')")) == true
        else { return .empty }
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(
                    sql: """
                        SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'personal_values'),
                               (SELECT value FROM ledger_info WHERE key = 'personal_erasures')
                        """))
        else { return .empty }
        let assigned: Int64 = row[0] ?? 0
        let generation: Int64 = row[1] ?? 0
        if assigned == 0 { return .empty }
        let file = String(cString: sqlite3_db_filename(db.sqliteConnection, "main"))
        let cached = cache.withLock { $0[file] }
        if let cached, cached.generation == generation, cached.assigned == assigned { return cached }
        var values: [String?]
        let from: Int64
        if let cached, cached.generation == generation, cached.assigned < assigned {
            values = cached.values
            from = cached.assigned
        } else {
            values = [nil]
            from = 0
        }
        values.reserveCapacity(Int(assigned) + 1)
        let rows = try Row.fetchCursor(
            db.cachedStatement(sql: "SELECT ref, value FROM personal_values WHERE ref > ? AND ref <= ? ORDER BY ref"),
            arguments: [from, assigned])
        while let row = try rows.next() {
            let ref: Int64 = row[0]
            guard ref < Int64(Int.max / 2) else { break }
            while Int64(values.count) < ref { values.append(nil) }
            values.append(try row.withUnsafeData(atIndex: 1) { $0.map { String(decoding: $0, as: UTF8.self) } } ?? "")
        }
        while Int64(values.count) <= assigned { values.append(nil) }
        let loaded = PersonalValues(values: values, assigned: assigned, generation: generation)
        cache.withLock { cache in
            if cache.count >= 8, cache[file] == nil { cache.removeAll() }
            cache[file] = loaded
        }
        return loaded
    }

    /// Forgets what was cached for `db`'s file (after an erasure there).
    static func invalidate(_ db: Database) {
        let file = String(cString: sqlite3_db_filename(db.sqliteConnection, "main"))
        _ = cache.withLock { $0.removeValue(forKey: file) }
    }

    private static let cache = Locked<[String: PersonalValues]>([:])

    // MARK: - Commitments

    /// The commitment an event stores for a value it introduces: the first 16 bytes of
    /// SHA-256("purchase-ledger personal value v1" || 0x00 || salt || value). With the salt
    /// erased, it cannot be checked against a guess of the value.
    static func commitment(salt: [UInt8], value: String) -> [UInt8] {
        var hasher = SHA256()
        hasher.update(data: commitmentDomain)
        hasher.update(data: salt)
        var value = value
        value.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        return hasher.finalize().withUnsafeBytes { Array($0.prefix(commitmentSize)) }
    }

    static let commitmentSize = 16
    static let saltSize = 16
    private static let commitmentDomain = Array("purchase-ledger personal value v1".utf8) + [0]

    /// The field of a payload that lists the refs it introduces: a message of (ref, commitment)
    /// pairs, each a varint and 16 bytes.
    static let introductionsField: UInt64 = 15
}

/// The append side: turns each personal value of an event into its ref, assigning new refs (and
/// their salts and commitments) for values not seen before. Kept by the writer between appends;
/// ``sync(_:)`` at the start of each append session drops it when another process (or an
/// erasure) changed the table since.
struct PersonalEncoder {
    /// A value's row: a user id is its own owner (`owner` -1 here), every other value belongs to
    /// the user id of its transaction (0: none).
    struct Key: Hashable {
        var owner: Int64
        var value: String
    }

    private var refs: [Key: Int64] = [:]
    /// The last ref assigned (in the table or pending).
    private var assigned: Int64 = 0
    private var generation: Int64 = -1
    /// Whether `refs` holds every row of the table: a value it lacks is then new, with no query.
    private var complete = false
    /// Rows to insert at the end of the append: ref, owner, salt, value.
    private var pending: [(Int64, Int64, [UInt8], String)] = []
    /// Refs assigned for the event being encoded, with their commitments.
    private(set) var introduced: [(Int64, [UInt8])] = []
    /// The owner of the event being encoded.
    private var owner: Int64 = 0
    // Salts come from a keyed hash of the ref with a random key of this encoder: one system
    // random call per encoder, not two per value.
    nonisolated(unsafe) private var saltKey = SymmetricKey(size: .bits256)

    /// Makes the encoder agree with the table in `db` (inside the append's transaction).
    mutating func sync(_ db: Database) throws {
        pending.removeAll()
        introduced.removeAll()
        let row = try Row.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT (SELECT seq FROM sqlite_sequence WHERE name = 'personal_values'),
                           (SELECT value FROM ledger_info WHERE key = 'personal_erasures')
                    """))
        let tableAssigned: Int64 = row?[0] ?? 0
        let tableGeneration: Int64 = row?[1] ?? 0
        if tableAssigned == assigned && tableGeneration == generation { return }
        refs.removeAll()
        assigned = tableAssigned
        generation = tableGeneration
        // An empty table (a new ledger) is known whole; otherwise rows are looked up as needed.
        complete = try Int64.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM personal_values")) == 0
        saltKey = SymmetricKey(size: .bits256)
    }

    /// The ref of `value` in the current event (a user id when `isUser`).
    private mutating func ref(_ value: String, isUser: Bool, _ db: Database) throws -> Int64 {
        let key = Key(owner: isUser ? -1 : owner, value: value)
        if let known = refs[key] { return known }
        if !complete {
            let found =
                isUser
                ? try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT ref FROM personal_values WHERE value = ? AND owner = ref"), arguments: [Data(value.utf8)])
                : try Int64.fetchOne(
                    db.cachedStatement(sql: "SELECT ref FROM personal_values WHERE value = ? AND owner = ?"), arguments: [Data(value.utf8), owner])
            if let found {
                refs[key] = found
                return found
            }
        }
        assigned += 1
        let ref = assigned
        let salt = HMAC<SHA256>.authenticationCode(for: withUnsafeBytes(of: ref.littleEndian) { Array($0) }, using: saltKey)
            .withUnsafeBytes { Array($0.prefix(PersonalValues.saltSize)) }
        pending.append((ref, isUser ? ref : owner, salt, value))
        introduced.append((ref, PersonalValues.commitment(salt: salt, value: value)))
        refs[key] = ref
        return ref
    }

    /// Looks up (or assigns) the ref of every personal value of `body`, whose values belong to
    /// user id `owner`, so that encoding it needs no query.
    mutating func prepare(_ body: EventBody, owner user: String?, _ db: Database) throws {
        introduced.removeAll(keepingCapacity: true)
        owner = 0
        if let user { owner = try ref(user, isUser: true, db) }
        try PersonalData.forEachValue(in: body) { value, isUser in _ = try ref(value, isUser: isUser, db) }
    }

    /// The ref ``prepare(_:owner:_:)`` gave `value` in the current event. Nil only if the event
    /// codec and ``PersonalData/forEachValue(in:_:)`` disagree about a field; the codec then
    /// writes the text (a test checks that no event type does).
    func known(_ value: String, isUser: Bool) -> Int64? {
        refs[Key(owner: isUser ? -1 : owner, value: value)]
    }

    /// The introductions of the current event, as a payload field (nothing when it has none).
    func writeIntroductions(_ w: inout BinaryWriter) {
        guard !introduced.isEmpty else { return }
        w.message(PersonalValues.introductionsField) { m in
            for (ref, commitment) in introduced {
                m.varint(UInt64(ref))
                m.bytes.append(contentsOf: commitment)
            }
        }
    }

    /// Inserts the rows assigned since ``sync(_:)``.
    mutating func write(_ db: Database) throws {
        guard !pending.isEmpty else { return }
        let insert = try db.cachedStatement(sql: "INSERT INTO personal_values (ref, owner, salt, value) VALUES (?, ?, ?, ?)")
        for (ref, owner, salt, value) in pending {
            try insert.execute(arguments: [ref, owner, Data(salt), Data(value.utf8)])
        }
        pending.removeAll()
    }

    /// Drops everything cached (the append rolled back, or an erasure changed the table).
    mutating func reset() {
        self = PersonalEncoder()
    }
}
