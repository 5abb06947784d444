/// Events of one ledger as a fleet store keeps them (docs/fleet.md, "The log in blocks"): up to
/// ``maxEvents`` consecutive events in one row, their block frames (``FrameCodec``: seq implicit,
/// times as deltas from the previous frame, from zero in each block) compressed with LZ4 as a
/// ledger's sealed blocks are, and beside them every event's full 32-byte chain link, in order.
///
/// Links are kept whole, not recomputed: a keyed chain's links cannot be recomputed in the store,
/// and ship's continuity check, the ingest service and the fleet audit's witness compare the link
/// of any event.
package enum FleetBlock {
    /// The most events a ship puts in one block: reading the events after a seq decodes at most
    /// one block in part.
    package static let maxEvents = 1024
    package static let linkSize = 32
    /// A block is closed once its frames reach this many bytes (events of Apple's signed
    /// documents are large), so no reader decompresses more than ``maxRawSize`` for one block.
    package static let sealRawSize = 4 << 20
    /// The most a stored block's frames may claim uncompressed: ``sealRawSize`` and one more
    /// frame of the largest event a ledger takes (a 1 MB line). A larger claim is refused
    /// before anything is allocated: an LZ4 block of 8 MB can really expand to 2 GB.
    package static let maxRawSize: Int64 = 6 << 20

    /// One block as its row stores it.
    package struct Encoded: Sendable {
        package var firstSeq: Int64
        package var lastSeq: Int64
        package var rawSize: Int64
        package var frames: [UInt8]
        package var links: [UInt8]
    }

    /// `events` (consecutive) in blocks of at most ``maxEvents``.
    package static func encode(_ events: [UploadedFrame]) throws(LedgerError) -> [Encoded] {
        var blocks: [Encoded] = []
        var start = 0
        while start < events.count {
            var end = start, raw = 0
            while end < events.count && end - start < maxEvents && raw < sealRawSize {
                raw += events[end].payload.count + 32
                end += 1
            }
            blocks.append(try encodeOne(events[start..<end]))
            start = end
        }
        return blocks
    }

    private static func encodeOne(_ events: ArraySlice<UploadedFrame>) throws(LedgerError) -> Encoded {
        var w = BinaryWriter(capacity: events.reduce(0) { $0 + $1.payload.count + 24 })
        var links: [UInt8] = []
        links.reserveCapacity(events.count * linkSize)
        var previous: (at: Int64, recorded: Int64) = (0, 0)
        for e in events {
            FrameCodec.appendBlockFrame(
                type: UInt64(e.type.rawValue), flags: e.flags, at: e.at, recorded: e.recorded, version: UInt64(e.version), payload: e.payload,
                link: e.link, inlineLink: 0, previous: &previous, to: &w)
            links += e.link
        }
        let first = events.first!.seq, last = events.last!.seq
        let frames = try LZ4.compressForStorage(w.bytes, "events \(first)...\(last)")
        return Encoded(firstSeq: first, lastSeq: last, rawSize: Int64(w.bytes.count), frames: frames, links: links)
    }

    /// The events of a stored block, checked for shape: its range, one link per event, every
    /// frame whole and nothing after the last. Throws ``LedgerError/Code/corruptData`` naming the
    /// block's first seq.
    package static func decode(firstSeq: Int64, lastSeq: Int64, rawSize: Int64, frames: [UInt8], links: [UInt8]) throws(LedgerError) -> [UploadedFrame] {
        let raw = try decompress(firstSeq: firstSeq, lastSeq: lastSeq, rawSize: rawSize, frames: frames)
        let count = Int(lastSeq - firstSeq + 1)
        guard links.count == count * linkSize else {
            throw LedgerError.corrupt("the block of events \(firstSeq)...\(lastSeq) holds \(links.count) bytes of links, not \(count * linkSize): it was edited", seq: firstSeq)
        }
        var out: [UploadedFrame] = []
        out.reserveCapacity(count)
        try walk(raw, firstSeq: firstSeq, lastSeq: lastSeq) { entry, buffer in
            let e = entry.event, i = Int(e.seq - firstSeq)
            out.append(
                UploadedFrame(
                    seq: e.seq, type: entry.type, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger, at: e.event.at.nanosecondsSinceEpoch,
                    recorded: e.recordedAt.nanosecondsSinceEpoch, version: e.version, payload: Array(buffer[entry.payload]),
                    link: Array(links[(i * linkSize)..<((i + 1) * linkSize)])))
            return true
        }
        return out
    }

    /// Walks a stored block's events without copying them: `body` gets each event's seq, type
    /// and anomaly, and for an event of `subjectOf` types its subject (field 1 of its payload).
    /// Its links are not read (the query need not fetch them). Throws as
    /// ``decode(firstSeq:lastSeq:rawSize:frames:links:)`` for frames that do not decode.
    package static func scan(
        firstSeq: Int64, lastSeq: Int64, rawSize: Int64, frames: [UInt8], subjectOf: Set<EventType>,
        _ body: (_ seq: Int64, _ type: EventType, _ anomaly: Rule?, _ subject: String?) -> Void
    ) throws(LedgerError) {
        let raw = try decompress(firstSeq: firstSeq, lastSeq: lastSeq, rawSize: rawSize, frames: frames)
        try walk(raw, firstSeq: firstSeq, lastSeq: lastSeq) { entry, buffer in
            let subject = subjectOf.contains(entry.type) ? Self.subject(in: UnsafeRawBufferPointer(rebasing: buffer[entry.payload])) : nil
            body(entry.event.seq, entry.type, entry.event.anomaly, subject)
            return true
        }
    }

    /// When a stored block's first event happened (nanoseconds since 1970), its frames
    /// decompressed and only the first read. Throws as ``decode(firstSeq:lastSeq:rawSize:frames:links:)``.
    package static func firstEventAt(firstSeq: Int64, lastSeq: Int64, rawSize: Int64, frames: [UInt8]) throws(LedgerError) -> Int64 {
        let raw = try decompress(firstSeq: firstSeq, lastSeq: lastSeq, rawSize: rawSize, frames: frames)
        var at: Int64 = 0
        try walk(raw, firstSeq: firstSeq, lastSeq: lastSeq) { entry, _ in
            at = entry.event.event.at.nanosecondsSinceEpoch
            return false
        }
        return at
    }

    /// A stored block's frames decompressed, once its range and claimed size are those a ship
    /// writes (nothing is allocated for a larger claim).
    private static func decompress(firstSeq: Int64, lastSeq: Int64, rawSize: Int64, frames: [UInt8]) throws(LedgerError) -> [UInt8] {
        let name = "the block of events \(firstSeq)...\(lastSeq)"
        guard firstSeq >= 1, lastSeq >= firstSeq, lastSeq - firstSeq < Int64(maxEvents) else {
            throw LedgerError.corrupt("\(name) has a range no ship writes (at most \(maxEvents) events from seq 1 on): it was edited", seq: max(firstSeq, 1))
        }
        guard rawSize >= 0, rawSize <= maxRawSize else {
            throw LedgerError.corrupt("\(name) claims \(rawSize) bytes of frames, more than any block a ship writes: it was edited", seq: firstSeq)
        }
        return try LZ4.decompressStored(frames, originalSize: Int(rawSize), name, seq: firstSeq)
    }

    /// Reads the frames of `raw` for seqs `firstSeq...lastSeq` in order, handing each to `body`
    /// with the buffer its ranges point into, until `body` returns false; read to the end, no
    /// byte may follow the last frame.
    private static func walk(
        _ raw: [UInt8], firstSeq: Int64, lastSeq: Int64, _ body: (FrameCodec.BlockEntry, UnsafeRawBufferPointer) -> Bool
    ) throws(LedgerError) {
        let failure = raw.withUnsafeBytes { buffer -> BinaryReader.Failure? in
            var r = BinaryReader(buffer)
            var previous: (at: Int64, recorded: Int64) = (0, 0)
            do throws(BinaryReader.Failure) {
                for seq in firstSeq...lastSeq {
                    let entry = try FrameCodec.readBlockFrame(&r, seq: seq, inlineLink: 0, previous: &previous, personal: .empty, wanted: false)
                    if !body(entry, buffer) { return nil }
                }
                return r.isAtEnd ? nil : BinaryReader.Failure(message: "bytes after its last frame")
            } catch {
                return error
            }
        }
        if let failure {
            throw LedgerError.corrupt("the block of events \(firstSeq)...\(lastSeq) does not decode (\(failure.message)): it was edited or damaged", seq: firstSeq)
        }
    }

    /// Field 1 of a payload (the id it is about), read without decoding the rest; nil when it has
    /// none or does not decode.
    static func subject(in payload: UnsafeRawBufferPointer) -> String? {
        var r = BinaryReader(payload)
        do throws(BinaryReader.Failure) {
            while !r.isAtEnd {
                let (number, wire) = try r.key()
                if number == PayloadField.subject && wire == 2 { return try r.string() }
                try r.skip(wire: wire)
            }
        } catch {}
        return nil
    }
}

extension UploadedFrame {
    /// Whether `other` is the same stored event: every field of its canonical frame, and its link.
    package func isSameEvent(as other: UploadedFrame) -> Bool {
        seq == other.seq && type == other.type && anomaly == other.anomaly && appendedByLedger == other.appendedByLedger && at == other.at
            && recorded == other.recorded && version == other.version && payload == other.payload && link == other.link
    }

    /// The event a ship stores: its fields and its link.
    package init(_ chained: ChainedEvent) {
        let e = chained.event
        self.init(
            seq: e.seq, type: e.event.type, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger, at: e.event.at.nanosecondsSinceEpoch,
            recorded: e.recordedAt.nanosecondsSinceEpoch, version: e.version, payload: chained.payload, link: chained.link)
    }

    /// The id it is about (field 1 of its payload: a transaction, download, product or asset
    /// pack; its stream is `transaction:<id>` for a transaction's event), read without decoding
    /// the rest; nil when the payload has none or does not decode.
    package var subject: String? {
        payload.withUnsafeBytes { FleetBlock.subject(in: $0) }
    }
}
