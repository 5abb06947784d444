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
    /// The refs of each sealed block that did not decode (``damaged``), and its name.
    private let damagedBlocks: [(refs: ClosedRange<Int64>, what: String)]
    /// The commitments `forget` kept of the values it erased (``erasedCommitments(_:)``): an
    /// erased value introduced by an elided frame (``ElidedCommitments``) reads as its marker
    /// from here.
    private let erased: [Int64: [UInt8]]
    /// Whether this was read from a ledger file (``current(_:)``, ``since(_:upTo:_:)``), not
    /// made of rows in memory (a pull's, an ingest's).
    private let readFromFile: Bool

    private init(
        bytes: [UInt8] = [], starts: [UInt32] = [0], lengths: [Int32] = [absent], assigned: Int64, generation: Int64, resolving: Bool = true,
        erasingAll: Bool = false, headers: SigningHeaders = .none, damagedBlocks: [(refs: ClosedRange<Int64>, what: String)] = [],
        erased: [Int64: [UInt8]]? = nil
    ) {
        self.erased = erased ?? [:]
        self.readFromFile = erased != nil
        self.headers = headers
        self.damagedBlocks = damagedBlocks
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
            if length == PersonalValues.damaged {
                let block = damagedBlocks.first(where: { $0.refs.contains(Int64(ref)) })?.what ?? "a block of personal values"
                throw BinaryReader.Failure(message: "refers to personal value \(ref), in \(block), which does not decode")
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
    /// `lengths` of a ref in the range of a sealed block that does not decode: an event that
    /// asks for it does not decode either (damage the load reports with its seq), the others do.
    private static let damaged: Int32 = -3

    /// How every erased value begins: what an erased user id (``erased(_:)``) and any other erased
    /// value (``erasedMarker(ref:commitment:)``) read as.
    package static let erasedPrefix = "[erased "

    /// What an erased user id reads as everywhere (state, projections, reports, export).
    package static func erased(_ ref: UInt64) -> String { erasedPrefix + "\(ref)]" }

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
        var table: Table
        var from: Int64 = 0
        if let cached, cached.generation == generation, cached.assigned < assigned {
            table = Table(extending: cached, through: assigned)
            from = cached.assigned
        } else {
            table = Table(through: assigned, missing: absent)
        }
        try table.read(
            db.cachedStatement(sql: "SELECT ref, value FROM personal_values WHERE ref > ? AND ref <= ?"), [from, assigned], db)
        try table.readBlocks(above: from, through: assigned, db)
        let loaded = PersonalValues(
            bytes: table.bytes, starts: table.starts, lengths: table.lengths, assigned: assigned, generation: generation,
            headers: try SigningHeaders.read(db), damagedBlocks: table.damagedBlocks, erased: try erasedCommitments(db))
        // Not what a write transaction sees before its commit (an erasure's, which may still roll
        // back: a later read would take its table for the file's).
        if sqlite3_txn_state(db.sqliteConnection, nil) != SQLITE_TXN_WRITE {
            cache.withLock { cache in
                if cache.count >= 8, cache[file] == nil { cache.removeAll() }
                cache[file] = loaded
            }
        }
        return loaded
    }

    /// What the events after a snapshot taken when `refs` refs were assigned can ask for: the
    /// user ids' rows and the values assigned since (any other value has a ref of its own at
    /// each event holding it, so none older). A cold state at a seq of the 1,000,000-event
    /// workload reads a few thousand values instead of 324,610. The whole table when it is
    /// cached already. `upTo`: no event the caller reads uses a ref above it (the refs of the
    /// next snapshot, for a state before it).
    static func since(_ refs: Int64, upTo limit: Int64? = nil, _ db: Database) throws -> PersonalValues {
        guard let (assigned, generation, file) = try header(db) else { return .empty }
        if let cached = cache.withLock({ $0[file] }), cached.generation == generation, cached.assigned == assigned { return cached }
        // (A `personal_refs` edited out of range reads as the nearest bound.)
        let refs = min(max(0, refs), assigned)
        let through = min(limit ?? assigned, assigned)
        // Refs up to `refs` that are not user ids were left out; those above it that no row or
        // block holds were erased, and so were the user ids an erasure listed (a snapshot taken
        // again by an erasure is followed by events that name them).
        var table = Table(through: assigned, missing: notRead)
        if through > refs { table.mark(refs + 1...through, absent) }
        for ref in try erasedUserIDs(db) where ref <= refs { table.mark(ref...ref, absent) }
        // The user ids through their partial index: left to itself, the planner reads every row
        // below `refs` by rowid instead.
        try table.read(
            db.cachedStatement(
                sql: """
                    SELECT ref, value FROM personal_values INDEXED BY personal_values_users WHERE owner = ref AND ref <= ?1
                    UNION ALL SELECT ref, value FROM personal_values WHERE ref > ?1 AND ref <= ?2
                    """), [refs, through], db)
        try table.readBlocks(above: refs, through: through, db)
        return PersonalValues(
            bytes: table.bytes, starts: table.starts, lengths: table.lengths, assigned: assigned, generation: generation,
            headers: try SigningHeaders.read(db), damagedBlocks: table.damagedBlocks, erased: try erasedCommitments(db))
    }

    /// The arrays a read fills: every ref up to the highest assigned has its entry from the
    /// start, so rows and blocks fill them in any order.
    private struct Table {
        var bytes: [UInt8] = []
        var starts: [UInt32]
        var lengths: [Int32]
        var damagedBlocks: [(refs: ClosedRange<Int64>, what: String)] = []

        /// Every ref through `assigned` as `missing` until read.
        init(through assigned: Int64, missing: Int32) {
            starts = Array(repeating: 0, count: Int(assigned) + 1)
            lengths = Array(repeating: missing, count: Int(assigned) + 1)
            lengths[0] = absent
        }

        /// `cached`'s entries, and the refs after them through `assigned` as erased until read.
        init(extending cached: PersonalValues, through assigned: Int64) {
            bytes = cached.bytes
            starts = cached.starts
            lengths = cached.lengths
            damagedBlocks = cached.damagedBlocks
            let more = Int(assigned) + 1 - lengths.count
            if more > 0 {
                starts.append(contentsOf: repeatElement(0, count: more))
                lengths.append(contentsOf: repeatElement(absent, count: more))
            }
        }

        mutating func mark(_ refs: ClosedRange<Int64>, _ length: Int32) {
            guard lengths.count > 1 else { return }
            for ref in refs.clamped(to: 1...Int64(lengths.count - 1)) { lengths[Int(ref)] = length }
        }

        @inline(__always) mutating func set(_ ref: Int64, _ value: UnsafeRawBufferPointer) {
            guard ref >= 1, ref < Int64(lengths.count) else { return }
            starts[Int(ref)] = UInt32(truncatingIfNeeded: bytes.count)
            lengths[Int(ref)] = Int32(value.count)
            bytes.append(contentsOf: value)
        }

        /// Adds the rows `statement` gives (ref, value). Through SQLite's C API: no row object,
        /// no `Data`.
        mutating func read(_ statement: Statement, _ arguments: [Int64], _ db: Database) throws {
            try statement.forEachRow(arguments, db) { handle in
                let count = Int(sqlite3_column_bytes(handle, 1))
                set(sqlite3_column_int64(handle, 0), UnsafeRawBufferPointer(start: count > 0 ? sqlite3_column_blob(handle, 1) : nil, count: count))
            }
            try checkSize()
        }

        /// Adds the sealed values of refs `above + 1 ... through`.
        mutating func readBlocks(above: Int64, through: Int64, _ db: Database) throws {
            guard through > above else { return }
            let blocks = try PersonalValueBlocks.blocks(above: above, through: through, db)
            for (index, block) in blocks.enumerated() {
                do {
                    let raw = try PersonalValueBlocks.decompress(block)
                    try raw.withUnsafeBytes { raw in
                        try PersonalValueBlocks.forEachRecord(raw, of: block) { ref, _, _, value in
                            guard ref > above && ref <= through else { return }
                            set(ref, UnsafeRawBufferPointer(rebasing: raw[value]))
                        }
                    }
                } catch is LedgerError {
                    // The refs that no row holds and no record before the damage gave, from its
                    // first ref to the next block's (its own last may be what was damaged).
                    let first = max(block.first, above + 1, 1)
                    let last = min(index + 1 < blocks.count ? blocks[index + 1].first - 1 : through, through, Int64(lengths.count - 1))
                    guard first <= last else { continue }
                    damagedBlocks.append((first...last, block.what))
                    // (A ref a record before the damage gave has its length set.)
                    for ref in first...last where lengths[Int(ref)] < 0 {
                        lengths[Int(ref)] = damaged
                    }
                }
            }
            try checkSize()
        }

        private func checkSize() throws {
            guard bytes.count < Int(UInt32.max) else {
                throw LedgerError(.storage, "the ledger's personal values take more than 4 GiB")
            }
        }
    }

    /// The refs of the user ids erased from this file (`ledger_info.erased_user_refs`, which
    /// `forget` extends): a state loaded from a snapshot reads the user ids' rows only, and would
    /// otherwise take an erased one for a value left out.
    static func erasedUserIDs(_ db: Database) throws -> [Int64] {
        let list = try String.fetchOne(db.cachedStatement(sql: "SELECT value FROM ledger_info WHERE key = 'erased_user_refs'")) ?? ""
        return list.split(separator: ",").compactMap { Int64($0) }
    }

    /// The commitments of the erased values whose events' frames may hold them elided
    /// (`erased_commitments`, migration 0011; none in a ledger before it), by ref.
    static func erasedCommitments(_ db: Database) throws -> [Int64: [UInt8]] {
        guard try db.tableExists("erased_commitments") else { return [:] }
        var found: [Int64: [UInt8]] = [:]
        // As stored, whatever the type of the cell: a commitment edited into a number is then
        // the wrong bytes, and the chain breaks where it is used.
        for row in try Row.fetchAll(db.cachedStatement(sql: "SELECT ref, CAST(commitment AS BLOB) FROM erased_commitments")) {
            found[row[0]] = [UInt8]((row[1] as Data?) ?? Data())
        }
        return found
    }

    /// The commitments `forget` kept, as this read them; nil when it read no values
    /// (``unresolved``, ``allErased``, ``empty``).
    var keptCommitments: [Int64: [UInt8]]? { readFromFile ? erased : nil }

    /// The commitment `forget` kept for `ref` when it erased it, if any.
    func erasedCommitment(_ ref: UInt64) -> [UInt8]? {
        erased.isEmpty || ref > UInt64(Int64.max) ? nil : erased[Int64(ref)]
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

    /// ``commitment(salt:value:)`` of a text given as its UTF-8 bytes.
    static func commitment(salt: [UInt8], utf8: [UInt8]) -> [UInt8] {
        var hasher = commitmentBase
        hasher.update(data: salt)
        hasher.update(data: utf8)
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
        return erasedPrefix + Hex.encode(Array(commitment.prefix(6))) + "]"
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
    /// Values other than user ids this append assigned and has not sealed into a block yet
    /// (fewer than a block's worth): stored as rows at the append's end, unless more come.
    private var unsealed: [PersonalValueRow] = []
    /// How many such rows the table holds (the open tail, ``PersonalValueBlocks``).
    private var tailCount = 0
    /// Rows per sealed block (``LedgerConfiguration/personalValuesPerBlock``).
    private var rowsPerBlock = PersonalValueBlocks.rowsPerBlock
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

    /// Makes the encoder agree with the table in `db` (inside the append's transaction), sealing
    /// values into blocks of `rowsPerBlock`.
    mutating func sync(_ db: Database, rowsPerBlock: Int = PersonalValueBlocks.rowsPerBlock) throws {
        self = PersonalEncoder()
        self.rowsPerBlock = max(1, rowsPerBlock)
        assigned = try PersonalValues.assignedRefs(db)
        // An empty table (a new ledger) is known whole; otherwise user ids are looked up as needed.
        complete = try Int64.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM personal_values")) == 0
        tailCount = try PersonalValueBlocks.tailCount(db)
    }

    /// Looks up (or assigns) the ref of every personal value of `body`, owned by the user id
    /// its transaction has in `state`, so that encoding it needs no query. Returns false, doing
    /// nothing, for an event that holds no personal value (most events).
    mutating func prepare(_ body: EventBody, in state: LedgerState, _ db: Database) throws -> Bool {
        introduced.removeAll(keepingCapacity: true)
        eventValues.removeAll(keepingCapacity: true)
        var holdsValues = false
        PersonalData.forEachValue(in: body) { _, _ in holdsValues = true }
        // The owner is looked up once, and only for an event that holds a value; here, not in
        // the closure below, which would copy the state it captured (every field retained) at
        // each event: 0.12 s of a 1,000,000-event import.
        if holdsValues { owner = try PersonalData.owner(of: body, in: state).map { try userRef($0, db) } ?? 0 }
        try PersonalData.forEachValue(in: body) { value, isUser in
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
        // Rows go to the table (sealed in blocks) as they accumulate, in the append's
        // transaction: a long import does not hold them all.
        if pending.count >= 4096 { try write(db, final: false) }
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

    /// Stores the rows assigned so far: user ids as rows; the other values sealed into blocks
    /// of `rowsPerBlock` (with the table's open tail), and the rest kept
    /// for the next call or, when `final` (the append's end), stored as rows.
    mutating func write(_ db: Database, final: Bool = true) throws {
        for (digest, header) in pendingHeaders {
            // Another append (or an erased user's purchase) may have stored it already.
            try db.execute(
                sql: "INSERT INTO signing_headers (digest, header) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING",
                arguments: [Data(digest), String(header)])
        }
        pendingHeaders.removeAll()
        // (A ledger written before migration 0010 holds its values as rows: its next append
        // seals them, whether it adds any or not.)
        guard !pending.isEmpty || (final && !unsealed.isEmpty) || tailCount >= rowsPerBlock else { return }
        // Bound through SQLite's C API: no boxing, no copy of the value into a `Data`.
        let insert = try db.cachedStatement(sql: "INSERT INTO personal_values (ref, owner, salt, value) VALUES (?, ?, ?, ?)")
        for (ref, owner, salt, value) in pending {
            var value = value
            // A signed transaction's body (nothing else is two parts of base64url) is packed.
            let stored = (value.utf8.count > 64 ? SignedParts.pack(value) : nil) ?? value.withUTF8 { Array($0) }
            if owner == ref {
                try PersonalEncoder.insert(PersonalValueRow(ref: ref, owner: owner, salt: salt, value: stored), insert, db)
            } else {
                unsealed.append(PersonalValueRow(ref: ref, owner: owner, salt: salt, value: stored))
            }
        }
        pending.removeAll(keepingCapacity: true)
        if tailCount + unsealed.count >= rowsPerBlock {
            unsealed = try PersonalValueBlocks.seal(unsealed, tailCount: &tailCount, rowsPerBlock: rowsPerBlock, db)
        }
        if final {
            for row in unsealed { try PersonalEncoder.insert(row, insert, db) }
            tailCount += unsealed.count
            unsealed.removeAll(keepingCapacity: true)
        }
    }

    /// Inserts one row of `personal_values`.
    static func insert(_ row: PersonalValueRow, _ insert: Statement, _ db: Database) throws {
        let statement = insert.sqliteStatement
        let code = row.value.withUnsafeBytes { value in
            sqlite3_reset(statement)
            sqlite3_bind_int64(statement, 1, row.ref)
            sqlite3_bind_int64(statement, 2, row.owner)
            if let salt = row.salt {
                salt.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 3, $0.baseAddress, Int32($0.count), SQLITE_TRANSIENT) }
            } else {
                sqlite3_bind_null(statement, 3)
            }
            if let base = value.baseAddress, !value.isEmpty {
                sqlite3_bind_blob(statement, 4, base, Int32(value.count), SQLITE_TRANSIENT)
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
