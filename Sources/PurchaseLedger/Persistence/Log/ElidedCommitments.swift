import Foundation
import GRDB

/// Commitments kept out of sealed blocks (``BlockLayout/elidedCommitments``; docs/format.md).
///
/// The event that introduces a personal value carries its commitment (payload field 15: pairs
/// of a ref and 16 bytes of SHA-256 over the owner's salt and the value), and the chain hashes
/// it. Stored in a block, those 16 random bytes do not compress; but the salt and the value are
/// kept beside the log, so the commitment can be made again from them. A block of this layout
/// therefore stores such a frame's field 15 as field 14, holding the refs alone, and a reader
/// that needs the canonical payload (the chain, a checkpoint, an upload) puts field 15 back
/// with each commitment made again (``CommitmentSource``): from the value and its owner's salt
/// while they are held, and, once `forget` erased them, from `erased_commitments`, where the
/// erasure keeps each erased ref's commitment (migration 0011).
///
/// What it changes about trust: a value edited beside the log now changes the link of the event
/// that introduced it, so the chain (a plain chain recomputed by `verify`, a checkpoint, a fleet
/// store's copy) catches the edit, where before only the commitment check did.
enum ElidedCommitments {
    /// The field that holds the elided refs, in a frame of a block of this layout only.
    static let field: UInt64 = 14

    /// What sealing can do with one frame's payload in a block of this layout.
    enum Stored {
        /// Its field 15, bytes `range` of the payload, stored as `field` (field 14 with the
        /// refs alone) in its place.
        case elided(range: Range<Int>, field: [UInt8])
        /// Stored as it is: no field 15 to elide, or one that is not to be (not checked
        /// against the stored values, or not written as a writer writes it).
        case asIs
        /// It holds a field 14 of its own, which a block of this layout would read as elided
        /// refs: the block is sealed in the older layout instead.
        case conflicting
    }

    /// How `payload` is stored in a block of this layout. `checked`: whether its field 15 was
    /// made (or checked) from the values and salts the ledger stores for its refs, so that a
    /// reader makes the same commitments again.
    static func stored(_ payload: [UInt8], checked: Bool) -> Stored {
        payload.withUnsafeBytes { buffer -> Stored in
            var r = BinaryReader(buffer)
            var found: Stored = .asIs
            // Whether field 15 can still be elided; the scan goes on to the end either way, for
            // a field 14 of the payload's own.
            var elidable = checked
            do throws(BinaryReader.Failure) {
                while !r.isAtEnd {
                    let start = r.offset
                    let (number, wire) = try r.key()
                    if number == field { return .conflicting }
                    guard number == PayloadField.introductions, elidable, wire == 2, case .asIs = found else {
                        if number == PayloadField.introductions { elidable = false }
                        try r.skip(wire: wire)
                        continue
                    }
                    let message = try r.message()
                    guard let pairs = try? PayloadCodec.commitments(in: message), !pairs.isEmpty,
                        write(PayloadField.introductions, pairs).elementsEqual(buffer[start..<r.offset])
                    else {
                        elidable = false
                        continue
                    }
                    var w = BinaryWriter(capacity: pairs.count * 4 + 4)
                    w.message(field) { m in for (ref, _) in pairs { m.varint(ref) } }
                    found = .elided(range: start..<r.offset, field: w.bytes)
                }
            } catch {
                // Bytes that do not parse are stored as they are (the chain reports them).
                return .asIs
            }
            return elidable ? found : .asIs
        }
    }

    /// The canonical payload of a frame stored in a block of this layout: its field 14 replaced,
    /// in place, by field 15 with each ref's commitment. Nil when it holds no field 14 (it is
    /// stored canonical). A ref `commitment` cannot make gets 16 zero bytes, which no commitment
    /// is: the chain then breaks at that event.
    static func canonical(_ stored: UnsafeRawBufferPointer, _ commitment: (Int64) throws -> [UInt8]?) rethrows -> [UInt8]? {
        guard let found = elided(in: stored) else { return nil }
        // Field 15: its key, the length of its pairs, then each ref and its commitment.
        let size = PersonalValues.commitmentSize
        var length = 0
        for ref in found.refs { length += BinaryWriter.varintSize(ref) + size }
        var w = BinaryWriter(capacity: stored.count + found.refs.count * size + 4)
        w.bytes.append(contentsOf: stored[..<found.start])
        w.key(PayloadField.introductions, .bytes)
        w.varint(UInt64(length))
        for ref in found.refs {
            w.varint(ref)
            if ref <= UInt64(Int64.max), let made = try commitment(Int64(ref)), made.count == size {
                w.bytes.append(contentsOf: made)
            } else {
                w.bytes.append(contentsOf: repeatElement(0, count: size))
            }
        }
        w.bytes.append(contentsOf: stored[found.end...])
        return w.bytes
    }

    /// A field of (ref, commitment) pairs as the encoder writes field 15.
    private static func write(_ number: UInt64, _ pairs: [(UInt64, [UInt8])]) -> [UInt8] {
        var w = BinaryWriter(capacity: pairs.count * 20 + 4)
        w.message(number) { m in
            for (ref, commitment) in pairs {
                m.varint(ref)
                m.bytes.append(contentsOf: commitment)
            }
        }
        return w.bytes
    }

    /// Adds the refs a stored payload holds elided (field 14) to `refs`.
    static func refs(in stored: UnsafeRawBufferPointer, into refs: inout Set<Int64>) {
        for ref in elided(in: stored)?.refs ?? [] { refs.insert(Int64(truncatingIfNeeded: ref)) }
    }

    /// Where a stored payload holds its elided refs (its first top-level field 14, wire 2), and
    /// the refs; nil when it holds none, or does not parse (it is then read as stored).
    private static func elided(in stored: UnsafeRawBufferPointer) -> (start: Int, end: Int, refs: [UInt64])? {
        var r = BinaryReader(stored)
        var found: (start: Int, end: Int, refs: [UInt64])?
        do throws(BinaryReader.Failure) {
            while !r.isAtEnd {
                let start = r.offset
                let (number, wire) = try r.key()
                guard number == field, wire == 2, found == nil else {
                    try r.skip(wire: wire)
                    continue
                }
                var m = try r.message()
                var refs: [UInt64] = []
                while !m.isAtEnd { refs.append(try m.varint()) }
                found = (start, r.offset, refs)
            }
        } catch {
            return nil
        }
        return found
    }

    /// Marks each frame of the log's stored tail whose introductions the ledger can make again:
    /// every commitment of its field 15 is the one its value and its owner's salt, as stored now,
    /// give. The others (a value or salt edited since, a payload edited) are sealed as they are.
    static func check(_ frames: inout [EventStore.Frame], _ db: Database) throws {
        var refs = Set<Int64>()
        var introduced: [[(Int64, [UInt8])]] = []
        introduced.reserveCapacity(frames.count)
        for frame in frames {
            let pairs = PayloadCodec.introductions(in: frame.payload)
            introduced.append(pairs)
            for (ref, _) in pairs { refs.insert(ref) }
        }
        let source = CommitmentSource(erased: [:])
        // A value that cannot be read leaves its frame stored as it is.
        if !refs.isEmpty { try? source.load(refs, db) }
        for i in frames.indices {
            frames[i].introductionsChecked = introduced[i].allSatisfy { ref, commitment in source.commitment(ref) == commitment }
        }
    }
}

/// The commitments of personal values, made again from what the ledger holds beside the log:
/// the value and its owner's salt while they are held, else the commitment `forget` kept when
/// it erased them (`erased_commitments`). Nil for a ref that is neither (deleted without an
/// erasure, or never assigned). Values are read a block's worth at a time (``load(_:_:)``).
final class CommitmentSource {
    /// User ids' rows read so far (their salts serve all their values), and the other values
    /// of the last ``load(_:_:)`` (each is introduced by one event, so read once).
    private var users: [Int64: PersonalValueRow] = [:]
    private var values: [Int64: PersonalValueRow] = [:]
    private let erased: [Int64: [UInt8]]
    /// The sealed blocks of values decoded last, by first ref: a scan reads the log in order, and
    /// a block of values serves the events of a few blocks of the log.
    private var decoded: [(first: Int64, last: Int64, rows: [PersonalValueRow])] = []

    /// `personal`: the values the scan reads, when it read them (their kept commitments are
    /// then taken from there instead of read again).
    init(_ db: Database, personal: PersonalValues) throws {
        erased = try personal.keptCommitments ?? PersonalValues.erasedCommitments(db)
    }

    fileprivate init(erased: [Int64: [UInt8]]) { self.erased = erased }

    /// Reads the rows of `refs` (and their owners'), replacing the values read before. A sealed
    /// block of values that does not decode gives none of its refs: their events' links then
    /// break, and `verify` names the block, instead of the read failing.
    func load(_ refs: Set<Int64>, _ db: Database) throws {
        values.removeAll(keepingCapacity: true)
        let missing = refs.filter { users[$0] == nil }.sorted()
        guard !missing.isEmpty else { return }
        try read(missing, db)
    }

    /// Refs held twice (a row and a sealed record, or two records): no commitment is made for
    /// them, so their events' links break, whichever copy a reader would show.
    private var doubled = Set<Int64>()

    /// Whether the file has `personal_values` (a ledger opened read-only before migration 0007
    /// has none), and the highest ref a sealed block covers: asked once.
    private var hasValues: Bool?
    private var sealedThrough: Int64?

    private func read(_ refs: [Int64], _ db: Database) throws {
        if hasValues == nil { hasValues = try db.tableExists("personal_values") }
        guard hasValues == true else { return }
        // A ledger whose values are all rows (a small one) has no block to look in.
        if sealedThrough == nil { sealedThrough = try PersonalValueBlocks.sealedThrough(db) }
        // As stored, whatever the type of each cell (an edit may have made one a number): the
        // bytes a reader of the values gets. The refs an event block introduces were assigned
        // one after another, so one range holds them (and its statement is prepared once).
        func rows(from first: Int64, through last: Int64) throws -> [PersonalValueRow] {
            let statement = try db.cachedStatement(
                sql: """
                    SELECT ref, CAST(owner AS INTEGER), CAST(salt AS BLOB), CAST(value AS BLOB) FROM personal_values
                    WHERE ref >= ? AND ref <= ?
                    """)
            return try Row.fetchAll(statement, arguments: [first, last]).map { row in
                PersonalValueRow(ref: row[0], owner: row[1] ?? -1, salt: (row[2] as Data?).map { [UInt8]($0) }, value: [UInt8]((row[3] as Data?) ?? Data()))
            }
        }
        var owners = Set<Int64>()
        var found = Set<Int64>()
        func keep(_ row: PersonalValueRow) {
            guard found.insert(row.ref).inserted else {
                doubled.insert(row.ref)
                return
            }
            if row.owner == row.ref {
                users[row.ref] = row
            } else {
                values[row.ref] = row
                if row.owner > 0 && users[row.owner] == nil { owners.insert(row.owner) }
            }
        }
        let wanted = Set(refs)
        for row in try rows(from: refs[0], through: refs[refs.count - 1]) where wanted.contains(row.ref) { keep(row) }
        // The sealed ones (every ref is looked for there too: one held twice has no commitment),
        // from the blocks decoded last or from their rows.
        decoded.removeAll { $0.last < refs[0] }
        if refs[0] <= sealedThrough! {
            // Every block whose range meets the refs' (an added one too: a ref held in two
            // blocks then has no commitment), those not decoded yet read and decoded. One that
            // does not decode gives none of its refs: their events' links break, and `verify`
            // names the block.
            let first = refs[0], last = refs[refs.count - 1]
            let meeting = try Int64.fetchAll(
                db.cachedStatement(sql: "SELECT first_ref FROM personal_value_blocks WHERE first_ref <= ?2 AND (last_ref >= ?1 OR last_ref < first_ref)"),
                arguments: [first, last])
            if meeting.contains(where: { start in !decoded.contains { $0.first == start } }) {
                for block in try PersonalValueBlocks.blocks(above: first - 1, through: last, db) where !decoded.contains(where: { $0.first == block.first }) {
                    guard let rows = try? PersonalValueBlocks.rows(of: block) else { continue }
                    decoded.append((block.first, block.last, rows))
                }
            }
        }
        for block in decoded where block.last >= refs[0] && block.first <= refs[refs.count - 1] {
            for row in block.rows where wanted.contains(row.ref) { keep(row) }
        }
        // The last few stay for the next blocks of the log.
        if decoded.count > 4 { decoded.removeFirst(decoded.count - 4) }
        for owner in owners { for row in try rows(from: owner, through: owner) where row.owner == row.ref { users[row.ref] = row } }
    }

    /// The commitments of `refs`, made from their values before `forget` erases them (to keep
    /// in `erased_commitments`). Throws when a value cannot be read (a sealed block that does
    /// not decode): an erasure that cannot keep a commitment would break the chain.
    static func beforeErasing(_ refs: Set<Int64>, _ db: Database) throws -> [(ref: Int64, commitment: [UInt8])] {
        let source = CommitmentSource(erased: [:])
        if !refs.isEmpty { try source.read(refs.sorted(), db) }
        return refs.sorted().compactMap { ref in source.commitment(ref).map { (ref, $0) } }
    }

    func commitment(_ ref: Int64) -> [UInt8]? {
        guard !doubled.contains(ref) else { return nil }
        guard let row = values[ref] ?? users[ref] else { return erased[ref] }
        // A user id's row and a value of no user carry their own salt; any other value is
        // salted with its owner's.
        let salt = row.owner == 0 || row.owner == ref ? row.salt : users[row.owner]?.salt
        guard let salt else { return nil }
        // Text is committed to as its UTF-8, the bytes stored (bytes edited into something
        // that is not UTF-8 give another commitment, as any edit does); a packed signed body as
        // its text.
        if row.value.first == SignedParts.packedMarker {
            guard let text = row.text else { return nil }
            return PersonalValues.commitment(salt: salt, value: text)
        }
        return PersonalValues.commitment(salt: salt, utf8: row.value)
    }
}
