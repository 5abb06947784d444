/// An event as stored in the log: its place, its stream, and what the ledger made of it.
public struct RecordedEvent: Sendable, Hashable {
    /// Global position, gap-free from 1.
    public var seq: Int64
    /// Position within its stream, from 1.
    public var version: Int64
    /// The event itself: when it happened, its type and fields.
    public var event: Event
    /// When the ledger stored it (from the ledger's clock).
    public var recordedAt: Timestamp
    /// The rule this observation broke, when it was stored as an anomaly.
    public var anomaly: Rule?
    /// True for what the ledger appended itself, never given: the cancellations before an early
    /// finish, and the `personalDataErased` record of a `forget`.
    public var appendedByLedger: Bool

    /// A stored event with these values. The ledger makes its own when it stores events; this is for
    /// tools and tests.
    public init(seq: Int64, version: Int64, event: Event, recordedAt: Timestamp, anomaly: Rule? = nil, appendedByLedger: Bool = false) {
        self.seq = seq
        self.version = version
        self.event = event
        self.recordedAt = recordedAt
        self.anomaly = anomaly
        self.appendedByLedger = appendedByLedger
    }

    /// `transaction:<id>`, `download:<id>`, `catalog` or `restore`.
    public var stream: String { event.body.stream }

    var flags: UInt64 {
        (appendedByLedger ? 1 : 0) | UInt64(anomaly?.code ?? 0) << 1
    }

    /// The event as a JSON line, with `seq` and, when set, `anomaly` and `appendedByLedger`.
    public var jsonLine: String {
        JSONLines.encode(event, seq: seq, anomaly: anomaly, appendedByLedger: appendedByLedger)
    }
}

extension Event {
    /// The event's payload in the on-disk binary format (docs/format.md), as stored.
    public var binaryPayload: [UInt8] { FrameCodec.payload(body) }
}

/// How a sealed block keeps its events' chain links: the first bytes of each, so that damage
/// is pinned to the first event whose link no longer matches (the block's row keeps its last
/// link whole). Stored in the block's `codec` with the compression: `compression + 3 * layout`.
package enum BlockLayout: Int, Sendable, CaseIterable {
    /// Each frame ends with the first 4 bytes of its link (codecs 0-2; ledgers before 2026-11-24).
    case inlineLinks = 0
    /// Frames carry no link; the first 2 bytes of every event's link follow the last frame, in
    /// order (codecs 3-5). Random bytes between frames cut LZ4's matches short: 4 inline bytes
    /// cost 4.7 compressed bytes per event, 2 trailing ones 2 (27.2 -> 24.5 per event).
    case trailingLinks = 1
    /// As ``trailingLinks``, and a frame may hold its introductions **elided** (codecs 6-8): its
    /// payload's field 15, the (ref, commitment) pairs, stored as field 14 with the refs alone.
    /// A commitment is SHA-256 of its owner's salt and the value, both kept beside the log, so a
    /// reader that needs the canonical payload (the chain, an upload) makes it again from them
    /// (``ElidedCommitments``). Random bytes do not compress: the 16 bytes of each of the
    /// 324,610 commitments of the 1,000,000-event workload cost 5.5 MB of its file.
    case elidedCommitments = 2

    static let current = BlockLayout.elidedCommitments

    var linkPrefixSize: Int { self == .inlineLinks ? 4 : 2 }

    /// Whether the links' prefixes follow the last frame (every layout but the first).
    var trailsLinks: Bool { self != .inlineLinks }

    /// The `codec` column's value for a block of this layout and compression.
    func storedCodec(_ compression: BlockCodec) -> Int { compression.rawValue + 3 * rawValue }

    /// The layout and compression a `codec` column's value stands for.
    static func decode(storedCodec value: Int64) -> (BlockLayout, BlockCodec)? {
        guard value >= 0, value < 9, let layout = BlockLayout(rawValue: Int(value / 3)),
            let codec = BlockCodec(rawValue: Int(value % 3))
        else { return nil }
        return (layout, codec)
    }
}

/// Encodes and decodes stored events (docs/format.md).
///
/// - The canonical frame, hashed into the chain: `seq, type, flags, at, recorded, version,
///   payload length, payload`, with absolute values.
/// - The block frame, inside sealed blocks: the same fields with `seq` implicit and times as
///   deltas from the previous event; the first bytes of the event's chain link follow it or the
///   block's last frame (``BlockLayout``).
package enum FrameCodec {
    /// The payload of `body`, its personal values inline (as versions before migration 0007
    /// stored them, and as exports and the fleet's rows carry them).
    package static func payload(_ body: EventBody) -> [UInt8] {
        var w = BinaryWriter()
        PayloadCodec.encode(body, into: &w)
        return w.bytes
    }

    /// The payload of `body` as the log stores it: its personal values as the refs `personal`
    /// prepared for this event (``PersonalEncoder/prepare(_:in:_:)``), followed by the
    /// introductions of the refs new in it (docs/format.md, "Personal fields are refs").
    static func payload(_ body: EventBody, refs personal: PersonalEncoder) -> [UInt8] {
        var w = BinaryWriter()
        PayloadCodec.encode(body, into: &w, personal: personal)
        personal.writeIntroductions(&w)
        return w.bytes
    }

    package static func canonical(_ e: RecordedEvent, payload: [UInt8]) -> [UInt8] {
        var w = BinaryWriter(capacity: payload.count + 32)
        canonical(e, payload: payload, into: &w)
        return w.bytes
    }

    /// The canonical frame written over `w`'s bytes, keeping their capacity: a loop that hashes
    /// every event of a log reuses one buffer.
    static func canonical(_ e: RecordedEvent, payload: [UInt8], into w: inout BinaryWriter) {
        canonical(
            seq: e.seq, type: UInt64(e.event.type.rawValue), flags: e.flags, at: e.event.at.nanosecondsSinceEpoch,
            recorded: e.recordedAt.nanosecondsSinceEpoch, version: e.version, payload: payload, into: &w)
    }

    /// The canonical frame of a scanned entry, over `w`'s bytes: with the entry's type, right
    /// also for a scan without bodies (whose events hold a placeholder body).
    static func canonical(_ entry: EventStore.Entry, into w: inout BinaryWriter) {
        let e = entry.event
        canonical(
            seq: e.seq, type: UInt64(entry.type.rawValue), flags: e.flags, at: e.event.at.nanosecondsSinceEpoch,
            recorded: e.recordedAt.nanosecondsSinceEpoch, version: e.version, payload: entry.payload, into: &w)
    }

    /// The canonical frame of a frame on its way into the log, over `w`'s bytes.
    static func canonical(_ f: EventStore.Frame, into w: inout BinaryWriter) {
        canonical(
            seq: f.seq, type: UInt64(bitPattern: f.type), flags: UInt64(bitPattern: f.flags), at: f.at, recorded: f.recorded,
            version: f.version, payload: f.payload, into: &w)
    }

    static func canonical(
        seq: Int64, type: UInt64, flags: UInt64, at: Int64, recorded: Int64, version: Int64, payload: [UInt8], into w: inout BinaryWriter
    ) {
        w.bytes.removeAll(keepingCapacity: true)
        w.varint(UInt64(seq))
        w.varint(type)
        w.varint(flags)
        w.zigzag(at)
        w.zigzag(recorded)
        w.varint(UInt64(version))
        w.lengthPrefixed(payload)
    }

    /// Appends one block frame to `w`, with the first `inlineLink` bytes of its link (0 in the
    /// ``BlockLayout/trailingLinks`` layout, which puts them after the last frame).
    static func appendBlockFrame(
        type: UInt64, flags: UInt64, at: Int64, recorded: Int64, version: UInt64, payload: [UInt8],
        link: [UInt8], inlineLink: Int, previous: inout (at: Int64, recorded: Int64), to w: inout BinaryWriter
    ) {
        appendBlockFrameHeader(type: type, flags: flags, at: at, recorded: recorded, version: version, previous: &previous, to: &w)
        w.lengthPrefixed(payload)
        if inlineLink > 0 { w.bytes.append(contentsOf: link.prefix(inlineLink)) }
    }

    /// The fields of a block frame before its payload.
    @inline(__always)
    static func appendBlockFrameHeader(
        type: UInt64, flags: UInt64, at: Int64, recorded: Int64, version: UInt64, previous: inout (at: Int64, recorded: Int64),
        to w: inout BinaryWriter
    ) {
        w.varint(type)
        w.varint(flags)
        TimeCodec.write(at &- previous.at, &w)
        TimeCodec.write(recorded &- previous.recorded, &w)
        w.varint(version)
        previous = (at, recorded)
    }

    /// One decoded block frame, with what verification needs.
    struct BlockEntry {
        var event: RecordedEvent
        var payload: Range<Int>
        var linkPrefix: Range<Int>
        /// The frame's type (the event's own, also when its body was not decoded).
        var type: EventType
    }

    typealias Failure = BinaryReader.Failure

    static func flags(_ raw: UInt64) throws(Failure) -> (Bool, Rule?) {
        let code = raw >> 1
        guard raw < 256 else { throw Failure(message: "bad flags") }
        if code == 0 { return (raw & 1 == 1, nil) }
        guard let rule = Rule(code: UInt8(code)) else { throw Failure(message: "unknown anomaly rule \(code)") }
        return (raw & 1 == 1, rule)
    }

    static func eventType(_ raw: UInt64) throws(Failure) -> EventType {
        guard raw < 256, let type = EventType(rawValue: UInt8(raw)) else { throw Failure(message: "unknown event type \(raw)") }
        return type
    }

    /// Decodes the next block frame. `seq` is the frame's position, known from the block;
    /// `inlineLink` the bytes of its link it ends with (its `linkPrefix`; none: an empty range).
    /// Unless `wanted`, the payload is stepped over, not decoded (the body is a placeholder): a
    /// scan that starts inside a block needs only the times of the frames before its start.
    static func readBlockFrame(
        _ r: inout BinaryReader, seq: Int64, inlineLink: Int, previous: inout (at: Int64, recorded: Int64), personal: PersonalValues,
        wanted: Bool = true
    ) throws(Failure) -> BlockEntry {
        let type = try eventType(try r.varint())
        let (appended, anomaly) = try flags(try r.varint())
        let at = previous.at &+ (try TimeCodec.read(&r))
        let recorded = previous.recorded &+ (try TimeCodec.read(&r))
        let version = Int64(try r.int(max: Int(Int64.max)))
        let span = try r.span()
        var payloadReader = BinaryReader(r.base, offset: span.lowerBound, end: span.upperBound)
        let body = wanted ? try PayloadCodec.decode(type, &payloadReader, personal: personal) : .restoreCompleted
        guard r.end - r.offset >= inlineLink else { throw Failure(message: "truncated link") }
        let prefix = r.offset..<(r.offset + inlineLink)
        r.offset += inlineLink
        previous = (at, recorded)
        let event = RecordedEvent(
            seq: seq, version: version, event: Event(at: Timestamp(nanosecondsSinceEpoch: at), body),
            recordedAt: Timestamp(nanosecondsSinceEpoch: recorded), anomaly: anomaly, appendedByLedger: appended)
        return BlockEntry(event: event, payload: span, linkPrefix: prefix, type: type)
    }
}
