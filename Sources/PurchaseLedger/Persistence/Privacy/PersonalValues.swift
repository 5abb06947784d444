import Crypto
import Foundation
import GRDB
import GRDBSQLite

/// The ledger's personal values as one read saw them: what each ref an event holds stands for
/// (migration 0007, docs/storage.md "Erasure"). Immutable, so the threads that decode sealed
/// blocks share one.
package final class PersonalValues: Sendable {
    /// No values: a ledger whose events hold none (or one opened before migration 0007).
    package static let empty = PersonalValues(assigned: 0, generation: 0)

    /// Reads every ref as an empty value, loading nothing: for scans that want only the
    /// stored bytes (a chain link), not what the personal fields say.
    static let unresolved = PersonalValues(assigned: 0, generation: 0, resolving: false)

    /// Reads every ref as erased: a user id as `[erased <ref>]`, any other value as the marker
    /// of its commitment. For a replay with no personal values at hand (a fleet store holds
    /// none), where equal markers still mean equal values: a user id has one ref, and the
    /// values of one user share a salt, so two equal values give one commitment.
    package static let allErased = PersonalValues(assigned: 0, generation: 0, resolving: true, erasingAll: true)

    /// The values' UTF-8, one after another; a value is made a `String` when an event asks for
    /// it (a replay made one per field before, from the payload). Held as bytes, the 324,610
    /// values of the 1,000,000-event workload take 16 MB and load in a few tens of ms; as
    /// strings they took 36 MB.
    private let bytes: [UInt8]
    /// By ref: where its value starts in `bytes`, and its length (``absent``: erased or never
    /// held; ``notRead``: left out of a partial read).
    /// Index 0 is never a ref.
    private let starts: [UInt32]
    private let lengths: [Int32]
    private let resolving: Bool
    private let erasingAll: Bool
    /// Refs assigned so far (the highest ever given, erased or not).
    let assigned: Int64
    /// How many erasures the ledger had recorded when this was read.
    let generation: Int64
    /// The signed transactions' headers (``SignedParts``), which payloads name by digest.
    private let headers: SigningHeaders

    private init(
        bytes: [UInt8] = [], starts: [UInt32] = [0], lengths: [Int32] = [absent], assigned: Int64, generation: Int64, resolving: Bool = true,
        erasingAll: Bool = false, headers: SigningHeaders = .none
    ) {
        self.headers = headers
        self.erasingAll = erasingAll
        self.bytes = bytes
        self.starts = starts
        self.lengths = lengths
        self.resolving = resolving
        self.assigned = assigned
        self.generation = generation
    }

    /// The value `ref` stands for, or nil when `forget` erased it.
    @inline(__always)
    func value(_ ref: UInt64) throws(BinaryReader.Failure) -> String? {
        guard resolving else { return "" }
        guard ref >= 1, ref < UInt64(lengths.count) else {
            // `allErased` holds no row, so every ref lands here, off the path a replay takes.
            if erasingAll && ref >= 1 { return nil }
            throw BinaryReader.Failure(message: "refers to personal value \(ref), which the ledger never recorded")
        }
        let length = Int(lengths[Int(ref)])
        guard length >= 0 else {
            if length == PersonalValues.notRead {
                throw BinaryReader.Failure(message: "refers to personal value \(ref), older than the snapshot it follows and not a user id")
            }
            return nil
        }
        let start = Int(starts[Int(ref)])
        // A signed transaction's body is packed (``SignedParts``): 0xFF starts no UTF-8 text.
        if length > 0, bytes[start] == SignedParts.packedMarker {
            let unpacked: Result<String, BinaryReader.Failure> = bytes.withUnsafeBytes { all in
                Result { () throws(BinaryReader.Failure) in try SignedParts.text(ofStored: UnsafeRawBufferPointer(rebasing: all[start..<(start + length)])) }
            }
            return try unpacked.get()
        }
        return bytes.withUnsafeBufferPointer { String(decoding: UnsafeBufferPointer(rebasing: $0[start..<(start + length)]), as: UTF8.self) }
    }

    /// The header of a signed transaction whose payload names `digest`: nil when this holds no
    /// headers (``allErased``: a fleet store's replay); an error when the ledger lost it.
    func header(_ digest: [UInt8]) throws(BinaryReader.Failure) -> String? {
        guard resolving else { return "" }
        if let header = headers.byDigest[digest] { return header }
        if erasingAll { return nil }
        throw BinaryReader.Failure(
            message: "refers to signing header \(Hex.encode(Array(digest.prefix(8)))), which signing_headers does not hold as written: a row deleted or edited")
    }

    /// `lengths` of a ref whose row was erased (or never held), and of one a partial read left out.
    private static let absent: Int32 = -1
    private static let notRead: Int32 = -2

    /// What an erased user id reads as everywhere (state, projections, reports, export).
    package static func erased(_ ref: UInt64) -> String { "[erased \(ref)]" }

    // MARK: - Reading, with a cache per file

    /// Refs assigned so far in `db`'s file.
    static func assignedRefs(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT seq FROM sqlite_sequence WHERE name = 'personal_values'")) ?? 0
    }

    /// The refs assigned and erasures recorded in `db`'s file, and the file's name (nil: the
    /// file has no personal values).
    private static func header(_ db: Database) throws -> (assigned: Int64, generation: Int64, file: String)? {
        // A ledger opened read-only before migration 0007 has no such table (and no refs).
        guard try Bool.fetchOne(db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'personal_values')")) == true
        else { return nil }
        let generation = try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM ledger_info WHERE key = 'personal_erasures'")) ?? 0
        let assigned = try assignedRefs(db)
        guard assigned > 0, assigned < Int64(Int32.max) else { return nil }
        return (assigned, generation, String(cString: sqlite3_db_filename(db.sqliteConnection, "main")))
    }

    /// The values as `db` sees them. Kept per file between reads, and extended by the refs
    /// assigned since (refs only grow; an erasure changes the generation and reloads).
    static func current(_ db: Database) throws -> PersonalValues {
        guard let (assigned, generation, file) = try header(db) else { return .empty }
        let cached = cache.withLock { $0[file] }
        if let cached, cached.generation == generation, cached.assigned == assigned { return cached }
        var table = Table()
        var from: Int64 = 0
        if let cached, cached.generation == generation, cached.assigned < assigned {
            table = Table(bytes: cached.bytes, starts: cached.starts, lengths: cached.lengths)
            from = cached.assigned
        }
        try table.read(
            db.cachedStatement(sql: "SELECT ref, value FROM personal_values WHERE ref > ? AND ref <= ? ORDER BY ref"), [from, assigned],
            through: assigned, missing: absent, db)
        let loaded = PersonalValues(
            bytes: table.bytes, starts: table.starts, lengths: table.lengths, assigned: assigned, generation: generation,
            headers: try SigningHeaders.read(db))
        cache.withLock { cache in
            if cache.count >= 8, cache[file] == nil { cache.removeAll() }
            cache[file] = loaded
        }
        return loaded
    }

    /// What the events after a snapshot taken when `refs` refs were assigned can ask for: the
    /// user ids' rows and the rows assigned since (any other value has a row of its own at each
    /// event holding it, so none older). A cold state at a seq of the 1,000,000-event workload
    /// reads a few thousand rows instead of 324,610. The whole table when it is cached already.
    /// `upTo`: no event the caller reads uses a ref above it (the refs of the next snapshot, for
    /// a state before it).
    static func since(_ refs: Int64, upTo limit: Int64? = nil, _ db: Database) throws -> PersonalValues {
        guard let (assigned, generation, file) = try header(db) else { return .empty }
        if let cached = cache.withLock({ $0[file] }), cached.generation == generation, cached.assigned == assigned { return cached }
        var table = Table()
        // The user ids through their partial index: left to itself, the planner reads every row
        // below `refs` by rowid instead.
        try table.read(
            db.cachedStatement(
                sql: """
                    SELECT ref, value FROM personal_values INDEXED BY personal_values_users WHERE owner = ref AND ref <= ?1
                    UNION ALL SELECT ref, value FROM personal_values WHERE ref > ?1 AND ref <= ?2 ORDER BY ref
                    """), [refs, min(limit ?? assigned, assigned)], through: assigned, missing: notRead, db)
        return PersonalValues(
            bytes: table.bytes, starts: table.starts, lengths: table.lengths, assigned: assigned, generation: generation,
            headers: try SigningHeaders.read(db))
    }

    /// The arrays a read fills, rows in ref order.
    private struct Table {
        var bytes: [UInt8] = []
        var starts: [UInt32] = [0]
        var lengths: [Int32] = [absent]

        /// Adds the rows `statement` gives (ref, value, in ref order), the refs between them as
        /// `missing`, and up to `assigned`. Through SQLite's C API: no row object, no `Data`.
        mutating func read(_ statement: Statement, _ arguments: [Int64], through assigned: Int64, missing: Int32, _ db: Database) throws {
            starts.reserveCapacity(Int(assigned) + 1)
            lengths.reserveCapacity(Int(assigned) + 1)
            let handle = statement.sqliteStatement
            sqlite3_reset(handle)
            for (i, value) in arguments.enumerated() { sqlite3_bind_int64(handle, Int32(i + 1), value) }
            defer { sqlite3_reset(handle) }
            while true {
                let step = sqlite3_step(handle)
                if step == SQLITE_DONE { break }
                guard step == SQLITE_ROW else {
                    throw DatabaseError(resultCode: ResultCode(rawValue: step), message: db.lastErrorMessage, sql: statement.sql)
                }
                let ref = sqlite3_column_int64(handle, 0)
                guard ref >= Int64(lengths.count), ref <= assigned else { continue }
                while Int64(lengths.count) < ref {
                    starts.append(0)
                    lengths.append(missing)
                }
                let count = Int(sqlite3_column_bytes(handle, 1))
                starts.append(UInt32(truncatingIfNeeded: bytes.count))
                lengths.append(Int32(count))
                if count > 0, let blob = sqlite3_column_blob(handle, 1) {
                    bytes.append(contentsOf: UnsafeRawBufferPointer(start: blob, count: count))
                }
            }
            while Int64(lengths.count) <= assigned {
                starts.append(0)
                lengths.append(missing)
            }
            guard bytes.count < Int(UInt32.max) else {
                throw LedgerError(.storage, "the ledger's personal values take more than 4 GiB")
            }
        }
    }

    /// Forgets what was cached for `db`'s file (after an erasure there).
    static func invalidate(_ db: Database) {
        let file = String(cString: sqlite3_db_filename(db.sqliteConnection, "main"))
        _ = cache.withLock { $0.removeValue(forKey: file) }
    }

    private static let cache = Locked<[String: PersonalValues]>([:])

    // MARK: - Commitments

    /// The commitment an event stores for a value it introduces: the first 16 bytes of
    /// SHA-256("purchase-ledger personal value v1" || 0x00 || salt || value), with the salt of the
    /// value's owner (a value of no user: its own). With the user id's row erased, its salt goes
    /// too, and no commitment of the user's can be checked against a guess of the value.
    static func commitment(salt: [UInt8], value: String) -> [UInt8] {
        var hasher = commitmentBase
        hasher.update(data: salt)
        var value = value
        value.withUTF8 { hasher.update(bufferPointer: UnsafeRawBufferPointer($0)) }
        return hasher.finalize().withUnsafeBytes { Array($0.prefix(commitmentSize)) }
    }

    static let commitmentSize = 16
    static let saltSize = 16
    /// SHA-256 with the domain already hashed in, copied for each commitment. Crypto does not
    /// mark it Sendable; it is only ever copied, never changed in place.
    nonisolated(unsafe) private static let commitmentBase: SHA256 = {
        var hasher = SHA256()
        hasher.update(data: Array("purchase-ledger personal value v1".utf8) + [0])
        return hasher
    }()

    /// The ref of user id `user`'s own row, if the ledger holds it (through the partial index
    /// over user ids' rows).
    static func userRef(_ user: String, _ db: Database) throws -> Int64? {
        try Int64.fetchOne(
            db.cachedStatement(sql: "SELECT ref FROM personal_values WHERE value = ? AND owner = ref"), arguments: [Data(user.utf8)])
    }

    /// What an erased value reads as: a user id, `[erased <ref>]` (one row per user id); any
    /// other value, `[erased <first 6 bytes of its commitment, hex>]`, the same for the same
    /// value of the same user (its salt is the user's), so the rules still see which values were
    /// equal, and nothing of the value.
    static func erasedMarker(ref: UInt64, commitment: [UInt8]?) -> String {
        guard let commitment else { return erased(ref) }
        return "[erased " + Hex.encode(Array(commitment.prefix(6))) + "]"
    }

}

/// The append side: turns each personal value of an event into a ref. A user id has one row,
/// found again whenever it recurs; any other value gets a row of its own at each event that holds
/// it (nearly all are unique anyway: store ids, URLs), so the encoder keeps only the user ids in
/// memory. Kept by the writer between appends; ``sync(_:)`` at the start of an append session
/// that another process (or an erasure) may have preceded starts it from the table.
struct PersonalEncoder {
    /// User ids and their refs.
    private var users: [String: Int64] = [:]
    /// The salt of each user id seen, by its ref.
    private var userSalts: [Int64: [UInt8]] = [:]
    /// The last ref assigned (in the table or pending).
    private var assigned: Int64 = 0
    /// Whether `users` holds every user id of the table: one it lacks is then new, with no query.
    private var complete = false
    /// Rows to insert: ref, owner, salt (a user id's, or a value of no user's), value.
    private var pending: [(Int64, Int64, [UInt8]?, String)] = []
    /// Refs assigned for the event being encoded, with their commitments.
    private var introduced: [(Int64, [UInt8])] = []
    /// The other values of the event being encoded and their refs (a value given twice in one
    /// event has one ref).
    private var eventValues: [(String, Int64)] = []
    /// The owner of the event being encoded: its user id's ref, 0 for none.
    private var owner: Int64 = 0
    /// Signing headers this encoder wrote or found (by digest), those to write, and the digest
    /// of the current event's (``SignedParts``).
    private var knownHeaders: Set<[UInt8]> = []
    private var pendingHeaders: [([UInt8], Substring)] = []
    private(set) var signingHeader: [UInt8]?

    /// Makes the encoder agree with the table in `db` (inside the append's transaction).
    mutating func sync(_ db: Database) throws {
        self = PersonalEncoder()
        assigned = try PersonalValues.assignedRefs(db)
        // An empty table (a new ledger) is known whole; otherwise user ids are looked up as needed.
        complete = try Int64.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM personal_values")) == 0
    }

    /// Looks up (or assigns) the ref of every personal value of `body`, owned by the user id
    /// its transaction has in `state`, so that encoding it needs no query. Returns false, doing
    /// nothing, for an event that holds no personal value (most events).
    mutating func prepare(_ body: EventBody, in state: LedgerState, _ db: Database) throws -> Bool {
        introduced.removeAll(keepingCapacity: true)
        eventValues.removeAll(keepingCapacity: true)
        var holdsValues = false
        try PersonalData.forEachValue(in: body) { value, isUser in
            if !holdsValues {
                // The owner is looked up once, and only for an event that holds a value.
                holdsValues = true
                owner = try PersonalData.owner(of: body, in: state).map { try userRef($0, db) } ?? 0
            }
            if isUser {
                _ = try userRef(value, db)
            } else if !eventValues.contains(where: { $0.0 == value }) {
                eventValues.append((value, try newValue(value, db)))
            }
        }
        signingHeader = nil
        if let jws = body.signedDocument, let header = SignedTransaction.split(jws: jws).header {
            let digest = SignedParts.digest(ofHeader: header)
            if knownHeaders.insert(digest).inserted { pendingHeaders.append((digest, header)) }
            signingHeader = digest
        }
        // Rows go to the table as they accumulate (in the append's transaction): a long import
        // does not hold them all.
        if pending.count >= 4096 { try write(db) }
        return holdsValues
    }

    /// Refs assigned so far, this append's included.
    var assignedRefs: Int64 { assigned }

    /// The ref ``prepare(_:in:_:)`` gave `value` in the current event. Nil only if the event
    /// codec and ``PersonalData/forEachValue(in:_:)`` disagree about a field; the codec then
    /// writes the text (a test checks that no event type does).
    func known(_ value: String, isUser: Bool) -> Int64? {
        isUser ? users[value] : eventValues.first(where: { $0.0 == value })?.1
    }

    private mutating func userRef(_ user: String, _ db: Database) throws -> Int64 {
        if let known = users[user] { return known }
        if !complete, let found = try PersonalValues.userRef(user, db) {
            users[user] = found
            return found
        }
        assigned += 1
        let ref = assigned
        let salt = PersonalEncoder.newSalt()
        users[user] = ref
        userSalts[ref] = salt
        pending.append((ref, ref, salt, user))
        introduced.append((ref, PersonalValues.commitment(salt: salt, value: user)))
        return ref
    }

    /// A new row for a value of the current event's owner: salted with the owner's salt, or, a
    /// value of no user, with one of its own.
    private mutating func newValue(_ value: String, _ db: Database) throws -> Int64 {
        assigned += 1
        let ref = assigned
        let salt: [UInt8]
        if owner == 0 {
            salt = PersonalEncoder.newSalt()
            pending.append((ref, 0, salt, value))
        } else {
            salt = try userSalt(owner, db)
            pending.append((ref, owner, nil, value))
        }
        introduced.append((ref, PersonalValues.commitment(salt: salt, value: value)))
        return ref
    }

    private static func newSalt() -> [UInt8] {
        SymmetricKey(size: .bits128).withUnsafeBytes { Array($0) }
    }

    private mutating func userSalt(_ ref: Int64, _ db: Database) throws -> [UInt8] {
        if let known = userSalts[ref] { return known }
        let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT salt FROM personal_values WHERE ref = ?"), arguments: [ref])
        guard let stored, stored.count == PersonalValues.saltSize else {
            throw LedgerError.make(.corruptData, "personal value \(ref), a user id, has no salt: personal_values was edited")
        }
        userSalts[ref] = [UInt8](stored)
        return [UInt8](stored)
    }

    /// The introductions of the current event, as a payload field (nothing when it has none).
    func writeIntroductions(_ w: inout BinaryWriter) {
        guard !introduced.isEmpty else { return }
        w.message(PayloadField.introductions) { m in
            for (ref, commitment) in introduced {
                m.varint(UInt64(ref))
                m.bytes.append(contentsOf: commitment)
            }
        }
    }

    /// Inserts the rows assigned so far.
    mutating func write(_ db: Database) throws {
        for (digest, header) in pendingHeaders {
            // Another append (or an erased user's purchase) may have stored it already.
            try db.execute(
                sql: "INSERT INTO signing_headers (digest, header) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING",
                arguments: [Data(digest), String(header)])
        }
        pendingHeaders.removeAll()
        guard !pending.isEmpty else { return }
        // Bound through SQLite's C API: no boxing, no copy of the value into a `Data`.
        let insert = try db.cachedStatement(sql: "INSERT INTO personal_values (ref, owner, salt, value) VALUES (?, ?, ?, ?)")
        let statement = insert.sqliteStatement
        for (ref, owner, salt, value) in pending {
            var value = value
            // A signed transaction's body (nothing else is two parts of base64url) is packed.
            let packed = value.utf8.count > 64 ? SignedParts.pack(value) : nil
            let code = value.withUTF8 { utf8 in
                sqlite3_reset(statement)
                sqlite3_bind_int64(statement, 1, ref)
                sqlite3_bind_int64(statement, 2, owner)
                if let salt {
                    salt.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 3, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
                } else {
                    sqlite3_bind_null(statement, 3)
                }
                if let packed {
                    packed.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 4, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
                } else if let base = utf8.baseAddress, !utf8.isEmpty {
                    sqlite3_bind_blob(statement, 4, base, Int32(utf8.count), SQLITE_TRANSIENT)
                } else {
                    // An empty value: a zero-length blob, not NULL.
                    sqlite3_bind_zeroblob(statement, 4, 0)
                }
                let step = sqlite3_step(statement)
                sqlite3_reset(statement)
                return step
            }
            guard code == SQLITE_DONE else {
                throw DatabaseError(resultCode: ResultCode(rawValue: code), message: db.lastErrorMessage, sql: insert.sql)
            }
        }
        pending.removeAll(keepingCapacity: true)
    }
}

extension PersonalValues {
    /// The values of `rows` (any order; a ref without a row, up to `assigned`, reads as erased),
    /// with the signed transactions' `headers`: a ledger's values as a fleet store holds them.
    /// `assigned`: the highest ref the events introduce (an erased user's may be above every row).
    package convenience init(rows: [PersonalValueRow], assigned: Int64 = 0, headers: [[UInt8]: String]) {
        let sorted = rows.sorted { $0.ref < $1.ref }
        let assigned = max(assigned, sorted.last?.ref ?? 0)
        var bytes: [UInt8] = []
        var starts: [UInt32] = [0]
        var lengths: [Int32] = [-1]
        for row in sorted where row.ref >= Int64(lengths.count) {
            while Int64(lengths.count) < row.ref {
                starts.append(0)
                lengths.append(-1)
            }
            starts.append(UInt32(truncatingIfNeeded: bytes.count))
            lengths.append(Int32(row.value.count))
            bytes += row.value
        }
        while Int64(lengths.count) <= assigned {
            starts.append(0)
            lengths.append(-1)
        }
        self.init(bytes: bytes, starts: starts, lengths: lengths, assigned: assigned, generation: 0, headers: SigningHeaders(byDigest: headers))
    }
}
