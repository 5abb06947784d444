import Crypto
import Foundation
import GRDB

/// One row of a ledger's `personal_values` as it travels: in an upload, in a fleet store, in a
/// pulled ledger (docs/storage.md, "Erasure"). `salt` is set on a user id's row (owner = ref)
/// and on a value of no user (owner 0); `value` is the stored bytes (a signed body packed).
package struct PersonalValueRow: Sendable, Hashable {
    package var ref: Int64
    package var owner: Int64
    package var salt: [UInt8]?
    package var value: [UInt8]

    package init(ref: Int64, owner: Int64, salt: [UInt8]?, value: [UInt8]) {
        self.ref = ref
        self.owner = owner
        self.salt = salt
        self.value = value
    }

    /// The value as text (a packed signed body unpacked), as its commitment covers it; nil when
    /// the stored bytes are not a value (a damaged packed body).
    package var text: String? {
        try? value.withUnsafeBytes { (b) throws(BinaryReader.Failure) in try SignedParts.text(ofStored: b) }
    }

    /// The rows of `refs` (nil: every row), and with `withOwners` the rows of their owners (for
    /// the salts), in ref order; none of a ref in `excluding` or owned by one.
    static func read(_ db: Database, introducedBy refs: Set<Int64>?, withOwners: Bool = false, excluding: Set<Int64> = []) throws -> [PersonalValueRow] {
        guard refs?.isEmpty != true, try db.tableExists("personal_values") else { return [] }
        var sql = "SELECT ref, owner, salt, value FROM personal_values"
        if let refs {
            let list = refs.sorted().map(String.init).joined(separator: ",")
            sql += " WHERE ref IN (\(list))"
            if withOwners { sql += " OR ref IN (SELECT owner FROM personal_values WHERE ref IN (\(list)) AND owner > 0)" }
        }
        func rows(_ sql: String) throws -> [PersonalValueRow] {
            try Row.fetchAll(db, sql: sql).map { row in
                PersonalValueRow(ref: row[0], owner: row[1], salt: (row[2] as Data?).map { [UInt8]($0) }, value: [UInt8]((row[3] as Data?) ?? Data()))
            }
        }
        var found = try rows(sql)
        // The sealed values (migration 0010), and with `withOwners` their owners' rows.
        var owners = Set<Int64>()
        let sorted = refs?.sorted()
        for block in try PersonalValueBlocks.blocks(above: (sorted?.first ?? 1) - 1, through: sorted?.last ?? .max, db) {
            if let sorted, !block.covers(any: sorted) { continue }
            for row in try PersonalValueBlocks.rows(of: block) where refs?.contains(row.ref) ?? true {
                found.append(row)
                if withOwners, row.owner > 0 { owners.insert(row.owner) }
            }
        }
        owners.subtract(found.map(\.ref))
        if !owners.isEmpty {
            found += try rows("SELECT ref, owner, salt, value FROM personal_values WHERE ref IN (\(owners.sorted().map(String.init).joined(separator: ",")))")
        }
        var seen = Set<Int64>()
        return found.sorted { $0.ref < $1.ref }.filter { row in
            seen.insert(row.ref).inserted && !excluding.contains(row.ref) && !excluding.contains(row.owner)
        }
    }

    /// Whether this row is the value `commitment` was made for, with `salt` (its owner's).
    package func matches(_ commitment: [UInt8], salt: [UInt8]) -> Bool {
        guard let text else { return false }
        // Text is committed to as UTF-8: bytes that are not (decoded with replacements) would
        // be stored unlike what was committed.
        if value.first != SignedParts.packedMarker && Array(text.utf8) != value { return false }
        return PersonalValues.commitment(salt: salt, value: text) == commitment
    }
}

/// One event as an upload carries it: the fields of its canonical frame (docs/format.md) and its
/// full chain link. The payload's body is decoded by the receiver, with the personal values.
package struct UploadedFrame: Sendable {
    package var seq: Int64
    package var type: EventType
    package var anomaly: Rule?
    package var appendedByLedger: Bool
    package var at: Int64
    package var recorded: Int64
    package var version: Int64
    package var payload: [UInt8]
    package var link: [UInt8]
    /// Its canonical frame's bytes, when they are at hand (read from a body, or computed for the
    /// chain): written and hashed as they are, not encoded again.
    var canonicalBytes: [UInt8]?

    /// The flags of the canonical frame: bit 0 appended by the ledger, bits 1-7 the rule's code.
    var flags: UInt64 { (appendedByLedger ? 1 : 0) | UInt64(anomaly?.code ?? 0) << 1 }

    package init(
        seq: Int64, type: EventType, anomaly: Rule?, appendedByLedger: Bool, at: Int64, recorded: Int64, version: Int64, payload: [UInt8], link: [UInt8]
    ) {
        self.seq = seq
        self.type = type
        self.anomaly = anomaly
        self.appendedByLedger = appendedByLedger
        self.at = at
        self.recorded = recorded
        self.version = version
        self.payload = payload
        self.link = link
    }

    /// Its canonical frame, over `w`'s bytes.
    func canonical(into w: inout BinaryWriter) {
        if let canonicalBytes {
            w.bytes.removeAll(keepingCapacity: true)
            w.bytes.append(contentsOf: canonicalBytes)
            return
        }
        FrameCodec.canonical(
            seq: seq, type: UInt64(type.rawValue), flags: flags, at: at, recorded: recorded, version: version, payload: payload, into: &w)
    }
}

/// A run of a ledger's events as the ingest protocol carries them (docs/ingest.md): each event's
/// canonical frame and full chain link, the personal values the events introduce (with their
/// owners' salts), the headers of the signed transactions' chains, and the ledger's head after
/// the last event signed with its identity key.
///
/// ```swift
/// if let upload = try ledger.upload(after: 0, link: nil) {
///     let body = upload.encoded()        // POST to /v1/ledgers/<id>/events
///     print(upload.ledgerID, upload.firstSeq, upload.lastSeq, body.count)
/// }
/// ```
public struct LedgerUpload: Sendable {
    /// The version of the body's layout this type reads and writes (`Purchase-Ledger-Protocol`).
    public static let protocolVersion = 1

    /// The head after the last event, signed by the ledger's identity key.
    public var head: Checkpoint
    package var frames: [UploadedFrame]
    package var values: [PersonalValueRow]
    /// The signing headers the events' signed transactions name (each by its SHA-256).
    package var signingHeaders: [String]

    /// The ledger's id (the head's).
    public var ledgerID: String { head.ledgerID }
    /// The seq of the first event carried (the head's seq + 1 when none is).
    public var firstSeq: Int64 { frames.first?.seq ?? head.seq + 1 }
    /// The seq of the last event carried: the head's.
    public var lastSeq: Int64 { head.seq }
    /// Events carried.
    public var count: Int { frames.count }

    package init(head: Checkpoint, frames: [UploadedFrame], values: [PersonalValueRow], signingHeaders: [String]) {
        self.head = head
        self.frames = frames
        self.values = values
        self.signingHeaders = signingHeaders
    }

    /// The request body (protocol 1, docs/ingest.md): the head statement, the signing headers,
    /// the personal values, then each event's canonical frame and its 32-byte link, every count
    /// and length a varint.
    public func encoded() -> [UInt8] {
        var w = BinaryWriter(capacity: frames.reduce(256) { $0 + $1.payload.count + 80 })
        w.bytes.append(contentsOf: Self.magic)
        w.lengthPrefixed(head.json)
        w.varint(UInt64(signingHeaders.count))
        for header in signingHeaders { w.lengthPrefixed(header) }
        w.varint(UInt64(values.count))
        for row in values {
            w.varint(UInt64(row.ref))
            w.varint(UInt64(row.owner))
            w.lengthPrefixed(row.salt ?? [])
            w.lengthPrefixed(row.value)
        }
        w.varint(UInt64(frames.count))
        var frame = BinaryWriter(capacity: 256)
        for f in frames {
            if let bytes = f.canonicalBytes {
                w.lengthPrefixed(bytes)
            } else {
                f.canonical(into: &frame)
                w.lengthPrefixed(frame.bytes)
            }
            w.bytes.append(contentsOf: f.link)
        }
        return w.bytes
    }

    /// The first bytes of every body: "PLUP", then the protocol's version as one byte.
    static let magic: [UInt8] = Array("PLUP".utf8) + [UInt8(protocolVersion)]

    /// Reads a body written by ``encoded()``. Throws ``LedgerError`` `malformedInput` naming the
    /// part that does not decode (nothing is checked beyond the layout: the chain, signature and
    /// rules are the receiver's).
    public init(body: [UInt8]) throws(LedgerError) {
        let result = body.withUnsafeBytes { buffer in Result { () throws(BinaryReader.Failure) in try Self.decode(buffer) } }
        switch result {
        case .success(let decoded): self = decoded
        case .failure(let error): throw LedgerError.make(.malformedInput, "the upload body does not decode: \(error.message)")
        }
    }

    private static func decode(_ buffer: UnsafeRawBufferPointer) throws(BinaryReader.Failure) -> LedgerUpload {
        var r = BinaryReader(buffer)
        let magic = buffer[try r.fixed(Self.magic.count)]
        guard Array(magic) == Self.magic else {
            throw BinaryReader.Failure(message: "the body does not start with \"PLUP\" and protocol version \(Self.protocolVersion)")
        }
        let statement = try r.string()
        let head: Checkpoint
        do throws(LedgerError) { head = try Checkpoint(json: statement) } catch { throw BinaryReader.Failure(message: "head statement: \(error.message)") }
        var headers: [String] = []
        for _ in 0..<(try r.int(max: 10_000)) { headers.append(try r.string()) }
        var values: [PersonalValueRow] = []
        for _ in 0..<(try r.int(max: 10_000_000)) {
            let ref = Int64(try r.int(max: Int(Int32.max)))
            let owner = Int64(try r.int(max: Int(Int32.max)))
            let salt = try r.bytes()
            values.append(PersonalValueRow(ref: ref, owner: owner, salt: salt.isEmpty ? nil : salt, value: try r.bytes()))
        }
        var frames: [UploadedFrame] = []
        let count = try r.int(max: 10_000_000)
        frames.reserveCapacity(min(count, 100_000))
        for i in 0..<count {
            let frame = try r.span()
            let link = Array(buffer[try r.fixed(32)])
            var f = BinaryReader(buffer, offset: frame.lowerBound, end: frame.upperBound)
            do throws(BinaryReader.Failure) {
                let seq = try f.varint()
                let type = try f.varint()
                let (appended, anomaly) = try FrameCodec.flags(try f.varint())
                let at = try f.zigzag()
                let recorded = try f.zigzag()
                let version = try f.varint()
                let payload = try f.bytes()
                guard f.isAtEnd else { throw BinaryReader.Failure(message: "bytes after the payload") }
                guard seq >= 1, seq < UInt64(Int64.max), version < UInt64(Int64.max), type < 256,
                    let eventType = EventType(rawValue: UInt8(type))
                else {
                    throw BinaryReader.Failure(message: "seq, type or version out of range")
                }
                frames.append(
                    UploadedFrame(
                        seq: Int64(seq), type: eventType, anomaly: anomaly, appendedByLedger: appended, at: at, recorded: recorded,
                        version: Int64(version), payload: payload, link: link))
            } catch {
                throw BinaryReader.Failure(message: "event \(i + 1) of the body: \(error.message)")
            }
        }
        guard r.isAtEnd else { throw BinaryReader.Failure(message: "bytes after the last event") }
        return LedgerUpload(head: head, frames: frames, values: values, signingHeaders: headers)
    }
}

extension Ledger {
    /// The events after `seq` (at most `limit`, and about `maxBytes` of frames), ready to send
    /// to an ingest service whose head for this ledger is `seq` with chain link `link` (nil or
    /// empty when it holds none): their frames and links, the personal values they introduce
    /// with their owners' rows, the signing headers, and the head after the last one, signed
    /// with the ledger's identity key. Nil when the ledger has nothing after `seq`.
    ///
    /// The chain is recomputed from the first event, so a damaged file throws `corruptData`
    /// naming the seq; a ledger whose link at `seq` is not `link` (its history differs from what
    /// the service holds: a file restored from an older backup, or another copy's history)
    /// throws `chainMismatch` naming `seq`; and one with fewer than `seq` events throws it too.
    public func upload(after seq: Int64, link: [UInt8]?, limit: Int = 2_000, maxBytes: Int = 4 << 20) throws -> LedgerUpload? {
        let read = try read { db -> (events: [UploadedFrame], values: [PersonalValueRow], headers: [String])? in
            var previous = try HashChain.genesis(db)
            var events: [UploadedFrame] = []
            var bytes = 0
            var frame = BinaryWriter(capacity: 256)
            var expected: Int64 = 1
            var stored: [UInt8] = previous
            // Only the bytes are needed: the payloads are not decoded (each event's body is a
            // placeholder; its type is the entry's).
            try EventStore.scan(db, from: 1, through: .max, integrity: true, personal: .unresolved, bodies: false) { entry in
                let e = entry.event
                guard e.seq == expected else {
                    throw LedgerError.corrupt("the log jumps from seq \(expected - 1) to \(e.seq)", seq: min(e.seq, expected))
                }
                expected += 1
                FrameCodec.canonical(entry, into: &frame)
                let next = chain.link(after: previous, frame: frame.bytes)
                guard entry.link?.matches(next) == true else { throw LedgerError.corrupt(HashChain.breakMessage(at: entry), seq: e.seq) }
                previous = next
                if e.seq == seq { stored = next }
                if e.seq > seq {
                    if events.count >= max(1, limit) || (bytes >= maxBytes && !events.isEmpty) { return false }
                    var chained = UploadedFrame(
                        seq: e.seq, type: entry.type, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger, at: e.event.at.nanosecondsSinceEpoch,
                        recorded: e.recordedAt.nanosecondsSinceEpoch, version: e.version, payload: entry.payload, link: next)
                    chained.canonicalBytes = frame.bytes
                    events.append(chained)
                    bytes += entry.payload.count + 64
                }
                return true
            }
            if expected - 1 < seq {
                throw LedgerError(
                    .chainMismatch,
                    "the service holds \(seq) events of this ledger, but the file has \(expected - 1): an older copy of the file (a backup restored?) or events removed",
                    seq: expected)
            }
            if seq > 0, let link, !link.isEmpty, link != stored {
                throw LedgerError(
                    .chainMismatch,
                    "the service holds a different event \(seq) of this ledger: this file's history differs from what was uploaded (an older backup restored, or another copy of the file uploaded first)",
                    seq: seq)
            }
            guard !events.isEmpty else { return nil }
            // The values the events introduce, and the rows of their owners (for the salts).
            var refs = Set<Int64>()
            for chained in events { for (ref, _) in PayloadCodec.introductions(in: chained.payload) { refs.insert(ref) } }
            let values = try PersonalValueRow.read(db, introducedBy: refs, withOwners: true)
            return (events, values, try SigningHeaders.read(db).byDigest.values.sorted())
        }
        guard let (events, values, headers) = read, let last = events.last else { return nil }
        guard let head = try identityStatement(seq: last.seq, link: last.link) else {
            throw LedgerError.make(.io, "the ledger has no identity key to sign its head with; open it for writing once")
        }
        return LedgerUpload(head: head, frames: events, values: values, signingHeaders: headers)
    }
}
