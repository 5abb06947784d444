import Foundation
import GRDB
import GRDBSQLite

extension EventStore {
    // MARK: - Sealed blocks

    /// One sealed block as read from its row: everything needed to decode it away from the
    /// database (its dictionary resolved), or the reason it cannot be.
    package struct SealedBlock: Sendable {
        var first: Int64
        var last: Int64
        /// The seqs the scan wants from it: `from` through `through` (none when `from > through`).
        var from: Int64
        var through: Int64
        var codec: BlockCodec = .raw
        package var layout: BlockLayout = .inlineLinks
        package var rawSize: Int = 0
        package var data: [UInt8] = []
        var dictionary: [UInt8]? = nil
        /// What the refs of its events' personal fields stand for.
        var personal: PersonalValues = .empty
        /// Why the block cannot be decoded, found while reading its row.
        var failure: LedgerError? = nil

        package init(first: Int64, last: Int64, from: Int64, through: Int64) {
            self.first = first
            self.last = last
            self.from = from
            self.through = through
        }
    }

    static func sealedBlock(
        _ db: Database, _ block: Row, from seq: Int64, through last: Int64,
        dictionaries: inout [Int64: [UInt8]], personal: PersonalValues
    ) throws -> SealedBlock {
        let first: Int64 = block[0]
        let blockLast: Int64 = block[1]
        var sealed = SealedBlock(first: first, last: blockLast, from: seq, through: last)
        sealed.personal = personal
        let codecValue: Int64 = block[2]
        guard let (layout, codec) = BlockLayout.decode(storedCodec: codecValue) else {
            sealed.failure = .corrupt("the block of events \(first)...\(blockLast) has unknown codec \(codecValue)", seq: first)
            return sealed
        }
        sealed.codec = codec
        sealed.layout = layout
        sealed.rawSize = Int(clamping: block[4] as Int64)
        guard let data = try block.withUnsafeData(atIndex: 5, { $0.map { [UInt8]($0) } }) else {
            sealed.failure = .corrupt("the block of events \(first)...\(blockLast) has no data", seq: first)
            return sealed
        }
        sealed.data = data
        if codec == .lz4Dictionary {
            guard let id: Int64 = block[3] else {
                sealed.failure = .corrupt("the block of events \(first)...\(blockLast) does not decompress (no dictionary id)", seq: first)
                return sealed
            }
            if dictionaries[id] == nil {
                guard let bytes = try Data.fetchOne(db, sql: "SELECT bytes FROM dictionaries WHERE id = ?", arguments: [id]) else {
                    sealed.failure = .corrupt("the block of events \(first)...\(blockLast) does not decompress (dictionary \(id) is missing)", seq: first)
                    return sealed
                }
                dictionaries[id] = [UInt8](bytes)
            }
            sealed.dictionary = dictionaries[id]
        }
        return sealed
    }

    /// The block's frames, decompressed.
    static func decompress(_ block: SealedBlock) throws -> [UInt8] {
        if let failure = block.failure { throw failure }
        switch block.codec {
        case .raw:
            return block.data
        case .lz4, .lz4Dictionary:
            return try LZ4.decompressStored(
                block.data, originalSize: block.rawSize, dictionary: block.dictionary, "the block of events \(block.first)...\(block.last)",
                seq: block.first)
        }
    }

    /// The wanted events of a sealed block, in order, and what stopped the decoding early or
    /// found the block wrong: the events before a damaged frame are still returned.
    package static func decodeEvents(_ block: SealedBlock) -> (events: [RecordedEvent], failure: LedgerError?) {
        let raw: [UInt8]
        do {
            raw = try decompress(block)
        } catch {
            return ([], error as? LedgerError ?? .corrupt("the block of events \(block.first)...\(block.last) does not decode (\(error))", seq: block.first))
        }
        var events: [RecordedEvent] = []
        let wanted = min(block.last, block.through).subtractingReportingOverflow(max(block.first, block.from))
        events.reserveCapacity(wanted.overflow || wanted.partialValue < 0 ? 0 : Int(min(wanted.partialValue, 4095)) + 1)
        let (_, failure) = forEachFrame(in: raw, of: block) { entry, _ in
            events.append(entry.event)
            return true
        }
        return (events, failure)
    }

    /// Decodes a block's frames in order and calls `visit` with each one the scan wants (and the
    /// block's bytes) until it returns false. Returns whether it was stopped, and the damage found:
    /// a frame that does not decode (the frames before it were visited), or a block holding
    /// another number of events than its range says.
    @inline(__always)
    static func forEachFrame(
        in raw: [UInt8], of block: SealedBlock, bodies: Bool = true,
        _ visit: (consuming FrameCodec.BlockEntry, UnsafeRawBufferPointer) throws -> Bool
    ) rethrows -> (stopped: Bool, failure: LedgerError?) {
        try raw.withUnsafeBytes { buffer in
            // The range comes from the block's row: a damaged one must not overflow the counting
            // below (every frame takes at least a byte, so a block holds fewer events than bytes).
            guard block.first >= 1, block.last >= block.first, block.last < Int64.max / 2,
                block.last - block.first < Int64(max(buffer.count, 1))
            else {
                return (false, .corrupt("the block of events \(block.first)...\(block.last) has an impossible range", seq: block.first))
            }
            var r = BinaryReader(buffer)
            let size = block.layout.linkPrefixSize
            let inline = block.layout == .inlineLinks ? size : 0
            // Trailing links: the frames end where the links of the block's events begin.
            var links = buffer.count
            if block.layout.trailsLinks {
                let count = block.last.subtractingReportingOverflow(block.first)
                guard !count.overflow, count.partialValue >= 0, count.partialValue < buffer.count / size else {
                    return (false, .corrupt("the block of events \(block.first)...\(block.last) is too short for their links", seq: block.first))
                }
                links = buffer.count - (Int(count.partialValue) + 1) * size
                r = BinaryReader(buffer, offset: 0, end: links)
            }
            var previous: (at: Int64, recorded: Int64) = (0, 0)
            var s = block.first
            while !r.isAtEnd {
                var entry: FrameCodec.BlockEntry
                do throws(BinaryReader.Failure) {
                    entry = try FrameCodec.readBlockFrame(
                        &r, seq: s, inlineLink: inline, previous: &previous, personal: block.personal, wanted: bodies && s >= block.from && s <= block.through)
                } catch {
                    return (false, .corrupt("event \(s) in the block of events \(block.first)...\(block.last) does not decode (\(error.message))", seq: s))
                }
                if inline == 0 {
                    let at = links + Int(s - block.first) * size
                    guard at + size <= buffer.count else { break }
                    entry.linkPrefix = at..<(at + size)
                }
                if s >= block.from && s <= block.through, try !visit(consume entry, buffer) { return (true, nil) }
                s += 1
            }
            if s != block.last + 1 {
                return (false, .corrupt("the block of events \(block.first)...\(block.last) holds \(s - block.first) events", seq: block.first))
            }
            return (false, nil)
        }
    }

    /// The sealed blocks' events with their payload bytes and chain links (for `verify` and
    /// statistics), decoded here, in order. Returns false when `body` asked to stop.
    static func scanWithLinks(
        _ db: Database, _ blocks: RowCursor, from seq: Int64, through last: Int64,
        dictionaries: inout [Int64: [UInt8]], personal: PersonalValues, bodies: Bool = true, onCorrupt: ((LedgerError) throws -> Void)?,
        _ body: (Entry) throws -> Bool
    ) throws -> Bool {
        // Made when the first block that elides commitments is met (``ElidedCommitments``).
        var commitments: CommitmentSource?
        while let row = try blocks.next() {
            let block = try sealedBlock(db, row, from: seq, through: last, dictionaries: &dictionaries, personal: personal)
            let raw: [UInt8]
            do {
                raw = try decompress(block)
            } catch let error as LedgerError {
                try report(error, to: onCorrupt)
                continue
            }
            let lastLink = [UInt8](row[6] as Data)
            if block.layout == .elidedCommitments {
                // The values whose commitments the block's frames hold elided, read at once.
                if commitments == nil { commitments = try CommitmentSource(db, personal: personal) }
                var refs = Set<Int64>()
                _ = forEachFrame(in: raw, of: block, bodies: false) { entry, buffer in
                    ElidedCommitments.refs(in: UnsafeRawBufferPointer(rebasing: buffer[entry.payload]), into: &refs)
                    return true
                }
                try commitments!.load(refs, db)
            }
            let (stopped, failure) = try forEachFrame(in: raw, of: block, bodies: bodies) { entry, buffer in
                var payload = Array(buffer[entry.payload])
                var madeAgain = false
                if block.layout == .elidedCommitments {
                    if let canonical = ElidedCommitments.canonical(UnsafeRawBufferPointer(rebasing: buffer[entry.payload]), commitments!.commitment) {
                        payload = canonical
                        madeAgain = true
                    }
                }
                var made = Entry(
                    event: entry.event, payload: payload,
                    link: .prefix(Array(buffer[entry.linkPrefix]), blockLast: entry.event.seq == block.last ? lastLink : nil), type: entry.type)
                made.commitmentsMadeAgain = madeAgain
                return try body(made)
            }
            if stopped { return false }
            if let failure { try report(failure, to: onCorrupt) }
        }
        return true
    }

    /// Hands damage to `onCorrupt`, or throws it when there is none.
    static func report(_ error: LedgerError, to onCorrupt: ((LedgerError) throws -> Void)?) throws {
        guard let onCorrupt else { throw error }
        try onCorrupt(error)
    }

    /// A block being decoded on the scan's decoding queue; `done` is signalled once it is filled.
    final class PendingBlock: @unchecked Sendable {  // unchecked: filled on the decoding queue, read only after `done` is signalled
        let done = DispatchSemaphore(value: 0)
        var events: [RecordedEvent] = []
        var failure: LedgerError?
    }

    /// How many blocks are read ahead of the one being handed over.
    static let readAhead = 3

    /// Hands over the sealed blocks' events while the next blocks are decompressed and decoded on
    /// another thread, so decoding and the caller's work (a replay's reducer) overlap. Rows are
    /// still read here, on the database's thread, and `body` and `onCorrupt` are called here, in
    /// log order. Returns false when `body` asked to stop.
    static func scanPipelined(
        _ db: Database, _ blocks: RowCursor, from seq: Int64, through last: Int64,
        dictionaries: inout [Int64: [UInt8]], personal: PersonalValues, onCorrupt: ((LedgerError) throws -> Void)?,
        prefetch: (@Sendable ([RecordedEvent]) -> Void)?, continuity: inout Continuity, _ body: (Entry) throws -> Bool
    ) throws -> Bool {
        let queue = DispatchQueue(label: "purchase-ledger.block-decoder", qos: .userInitiated)
        // Set when this returns (the caller stopped, a throw, or the end): blocks still being
        // decoded are not read ahead for.
        let returned = Locked(false)
        defer { returned.withLock { $0 = true } }
        var pending: [PendingBlock] = []
        var exhausted = false
        while true {
            while !exhausted && pending.count < readAhead {
                guard let row = try blocks.next() else { exhausted = true; break }
                let block = try sealedBlock(db, row, from: seq, through: last, dictionaries: &dictionaries, personal: personal)
                let slot = PendingBlock()
                queue.async {
                    let (events, failure) = decodeEvents(block)
                    (slot.events, slot.failure) = (events, failure)
                    slot.done.signal()
                    // While the caller takes this block's events, and before the next block.
                    if let prefetch, !returned.withLock({ $0 }) { prefetch(events) }
                }
                pending.append(slot)
            }
            guard !pending.isEmpty else { return true }
            let slot = pending.removeFirst()
            slot.done.wait()
            for event in slot.events where try continuity.admit(event.seq, onCorrupt) {
                if try !body(Entry(event: event, payload: [])) { return false }
            }
            if let failure = slot.failure {
                try report(failure, to: onCorrupt)
                continuity.damaged = true
            }
        }
    }

    static func decodeFlags(_ raw: Int64, seq: Int64) throws -> (Bool, Rule?) {
        do {
            return try FrameCodec.flags(UInt64(bitPattern: raw))
        } catch {
            throw LedgerError.corrupt("event \(seq) has invalid flags (\(error.message))", seq: seq)
        }
    }

    static func decodeType(_ raw: Int64, seq: Int64) throws -> EventType {
        do {
            return try FrameCodec.eventType(UInt64(bitPattern: raw))
        } catch {
            throw LedgerError.corrupt("event \(seq) has an invalid type (\(error.message))", seq: seq)
        }
    }

    static func decodePayload(_ type: EventType, _ payload: [UInt8], seq: Int64, personal: PersonalValues) throws -> EventBody {
        do {
            return try payload.withUnsafeBytes { buffer throws(BinaryReader.Failure) -> EventBody in
                var r = BinaryReader(buffer)
                return try PayloadCodec.decode(type, &r, personal: personal)
            }
        } catch let failure as BinaryReader.Failure {
            throw LedgerError.corrupt("the payload of event \(seq) does not decode (\(failure.message))", seq: seq)
        }
    }
}
