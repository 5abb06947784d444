import Foundation
import GRDB
import GRDBSQLite

/// How sealed blocks of events are compressed. Every block records its codec, so a ledger can mix
/// them and a change never rewrites history.
public enum BlockCodec: Int, Sendable, CaseIterable, CustomStringConvertible {
    /// Frames stored as they are.
    case raw = 0
    /// LZ4 over the whole block.
    case lz4 = 1
    /// LZ4 over the whole block, with a dictionary stored in the ledger.
    case lz4Dictionary = 2

    public var description: String {
        switch self {
        case .raw: "raw"
        case .lz4: "lz4"
        case .lz4Dictionary: "lz4+dictionary"
        }
    }
}

/// The log's rows, read and written inside a GRDB transaction. Not thread-safe on its own: a
/// `Database` is confined to the pool's connection that passes it in.
package enum EventStore {
    /// Largest dictionary kept (LZ4 looks back 64 KiB at most).
    static let maxDictionarySize = 64 * 1024

    // MARK: - Position

    static func lastSeq(_ db: Database) throws -> Int64 {
        if let tail = try Int64.fetchOne(db.cachedStatement(sql: "SELECT max(seq) FROM events")) { return tail }
        return try lastSealedSeq(db)
    }

    /// The last seq of the last sealed block (blocks are consecutive runs, so that is the one
    /// that starts last: a seek, where `max(last_seq)` read every block's row).
    static func lastSealedSeq(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT last_seq FROM event_blocks ORDER BY first_seq DESC LIMIT 1")) ?? 0
    }

    /// SQLite's data version of `db`'s connection: it changes whenever a transaction commits to
    /// the file, through this connection or any other (read at the start of a transaction, it
    /// reflects every commit before it).
    static func dataVersion(_ db: Database) -> UInt32? {
        var version: UInt32 = 0
        guard sqlite3_file_control(db.sqliteConnection, "main", SQLITE_FCNTL_DATA_VERSION, &version) == SQLITE_OK else { return nil }
        return version
    }

    /// The chain's link after event `seq` as the file stores it: a tail row's own, a block's
    /// last, or recomputed from the block before through the events of its block (nil when the
    /// log has no such event or it does not decode).
    static func link(at seq: Int64, chain: HashChain, _ db: Database) throws -> [UInt8]? {
        if seq == 0 { return try HashChain.genesis(db) }
        if let stored = try Data.fetchOne(db.cachedStatement(sql: "SELECT link FROM events WHERE seq = ?"), arguments: [seq]) {
            return [UInt8](stored)
        }
        guard
            let block = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT first_seq, last_seq, last_link FROM event_blocks WHERE first_seq <= ? ORDER BY first_seq DESC LIMIT 1"),
                arguments: [seq]),
            seq <= block[1] as Int64
        else { return nil }
        if seq == block[1] as Int64 { return [UInt8](block[2] as Data) }
        let first: Int64 = block[0]
        var previous: [UInt8]
        if first == 1 {
            previous = try HashChain.genesis(db)
        } else if let before = try Data.fetchOne(db.cachedStatement(sql: "SELECT last_link FROM event_blocks WHERE last_seq = ?"), arguments: [first - 1]) {
            previous = [UInt8](before)
        } else {
            return nil
        }
        var found: [UInt8]?
        do {
            try scan(db, from: first, through: seq, integrity: true, personal: .unresolved) { entry in
                previous = chain.link(after: previous, frame: FrameCodec.canonical(entry.event, payload: entry.payload))
                if entry.event.seq == seq { found = previous }
                return entry.event.seq < seq
            }
        } catch let error as LedgerError where error.code == .corruptData {
            return nil
        }
        return found
    }

    /// The chain link after the last stored event (the genesis link for an empty log).
    static func lastLink(_ db: Database) throws -> [UInt8] {
        if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT link FROM events ORDER BY seq DESC LIMIT 1")) {
            return [UInt8](row[0] as Data)
        }
        if let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT last_link FROM event_blocks ORDER BY first_seq DESC LIMIT 1")) {
            return [UInt8](row[0] as Data)
        }
        return try HashChain.genesis(db)
    }

    // MARK: - Writing

    /// An event ready to be written: its fields as stored, its payload and its chain link.
    package struct Frame {
        var seq: Int64
        /// What names its stream: the name itself (`events.stream`) is made only for frames
        /// stored as rows of the open tail, a few of a large append, whose other frames are sealed
        /// into blocks, which do not hold it.
        var subject: Subject
        var version: Int64
        var type: Int64
        var at: Int64
        var recorded: Int64
        var flags: Int64
        var payload: [UInt8]
        var link: [UInt8]

        /// A new event's frame; its link is set when it is linked into the chain.
        package init(_ e: RecordedEvent, payload: [UInt8], link: [UInt8] = []) {
            seq = e.seq
            subject = .event(e.event.body.subject)
            version = e.version
            type = Int64(e.event.type.rawValue)
            at = e.event.at.nanosecondsSinceEpoch
            recorded = e.recordedAt.nanosecondsSinceEpoch
            flags = Int64(e.flags)
            self.payload = payload
            self.link = link
        }

        enum Subject {
            case event(EventBody.Subject)
            case stored(String)
        }

        var stream: String {
            switch subject {
            case .event(let subject): subject.stream
            case .stored(let name): name
            }
        }

        init(row: Row) {
            seq = row[0]; subject = .stored(row[1]); version = row[2]; type = row[3]; at = row[4]; recorded = row[5]; flags = row[6]
            payload = [UInt8](row[7] as Data)
            link = [UInt8](row[8] as Data)
        }
    }

    /// The next events of the log on their way in. Frames arrive without their chain link; a
    /// ``Sealer`` on a thread of its own links them, in order, and seals and compresses every full
    /// block of `blockSize` (the open tail's stored rows first) into a ``Spool``, while the append
    /// goes on deciding the next events. Nothing is written until ``write(_:)``. Reading the tail
    /// and the dictionary is all it does to the database before then, so an append refused
    /// half-way has written nothing.
    struct BlockWriter {
        let blockSize: Int
        let codec: BlockCodec
        /// Rows in the open tail when the append began.
        private let storedTail: Int
        /// New frames given so far.
        private var added = 0
        /// Whether the sealer has the stored tail and the dictionary (needed once a block can fill).
        private var started = false
        /// New frames not handed to the sealer yet.
        private var batch: [Frame] = []
        private let sealer: Sealer

        /// Frames handed to the sealer at once.
        private static let batchSize = 256

        private static let insertRow = PreparedSQL(
            "INSERT INTO events (seq, stream, version, type, at_ns, recorded_ns, flags, codec, payload, link) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)")

        /// `storedTail` is the rows in the open tail when known, read from the file when nil.
        init(
            _ db: Database, blockSize: Int, codec: BlockCodec, layout: BlockLayout = .current, chain: HashChain, lastLink: [UInt8],
            storedTail: Int? = nil
        ) throws {
            self.blockSize = max(1, blockSize)
            self.codec = codec
            if let storedTail {
                self.storedTail = storedTail
            } else {
                self.storedTail = Int(try lastSeq(db) - lastSealedSeq(db))
            }
            sealer = Sealer(blockSize: self.blockSize, codec: codec, layout: layout, chain: chain, lastLink: lastLink)
        }

        /// The next frame of the log; its `link` is computed later, by the sealer.
        mutating func add(_ frame: Frame, _ db: Database) throws {
            added += 1
            if !started && storedTail + added >= blockSize {
                // The first block can now fill. The sealer holds fewer frames than that, so none
                // is sealed before it has the stored tail to put first, and the dictionary.
                flushBatch(later: false)
                var tail: [Frame] = []
                if storedTail > 0 {
                    tail = try Row.fetchAll(
                        db.cachedStatement(
                            sql: """
                                SELECT seq, stream, version, type, at_ns, recorded_ns, flags, payload, link FROM events ORDER BY seq
                                """)
                    ).map(Frame.init(row:))
                }
                var dictionary: (id: Int64, bytes: [UInt8])?
                if codec == .lz4Dictionary, let row = try Row.fetchOne(db, sql: "SELECT id, bytes FROM dictionaries ORDER BY id DESC LIMIT 1") {
                    dictionary = (row[0], [UInt8](row[1] as Data))
                }
                sealer.start(tail: tail, dictionary: dictionary)
                started = true
            }
            batch.append(frame)
            if batch.count >= Self.batchSize { flushBatch(later: true) }
        }

        /// Hands the batch to the sealer: to its queue when `later` (a large append, which goes on
        /// while the sealer works), or, when nothing went to the queue yet, done here and now (a
        /// small append, which would only wait for the queue).
        private mutating func flushBatch(later: Bool) {
            guard !batch.isEmpty else { return }
            sealer.add(batch, later: later)
            batch = []
            batch.reserveCapacity(Self.batchSize)
        }

        /// Waits until every frame is linked and every full block compressed, then writes what was
        /// decided: the dictionary if this append seeded it, the sealed blocks, and the frames left
        /// over as the open tail's rows. Returns the link of the last frame and the rows the open
        /// tail then holds.
        mutating func write(_ db: Database, _ statements: PreparedStatements) throws -> (lastLink: [UInt8], tail: Int) {
            flushBatch(later: false)
            let result = try sealer.finish()
            if let dictionary = result.newDictionary {
                try db.execute(
                    sql: "INSERT INTO dictionaries (id, created_at_seq, bytes) VALUES (?, ?, ?)",
                    arguments: [dictionary.id, result.sealed.first?.row.first ?? 1, Data(dictionary.bytes)])
            }
            if !result.sealed.isEmpty && storedTail > 0 {
                // The first sealed block took in the whole stored tail (it is shorter than a block).
                try db.execute(sql: "DELETE FROM events")
            }
            let insertBlock = try db.cachedStatement(
                sql: """
                    INSERT INTO event_blocks (first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    """)
            for (row, slice) in result.sealed {
                try insertBlock.execute(arguments: [
                    row.first, row.last, row.layout.storedCodec(row.codec), row.dictionaryID, row.rawSize,
                    Data(try sealer.spool.read(slice)), Data(row.lastLink),
                ])
            }
            // The stored tail is read only when a block is sealed at once from it, so the frames
            // left pending are all new.
            if !result.pending.isEmpty {
                let insertRow = try statements(Self.insertRow, db)
                for f in result.pending { try insertRow.executeEventRow(f, db) }
            }
            // A sealed block took in the stored tail, so the tail is then only what is pending.
            return (result.lastLink, (result.sealed.isEmpty ? storedTail : 0) + result.pending.count)
        }
    }

    /// Links frames into the chain and seals full blocks, in the order the frames were given: on a
    /// queue of its own once work is handed over `later`, on the calling thread until then. The
    /// compressed blocks wait in a spool of their own. At most a few batches wait, so memory stays
    /// bounded whatever the append's size.
    final class Sealer: @unchecked Sendable {  // unchecked: its state is touched only on its serial queue, or before work goes there
        struct Result {
            var sealed: [(row: SealedRow, data: Spool.Slice)]
            /// Linked frames that fill no block: the open tail's new rows.
            var pending: [Frame]
            var lastLink: [UInt8]
            /// The dictionary seeded from the first block, when the ledger had none.
            var newDictionary: (id: Int64, bytes: [UInt8])?
        }

        // Created on first use: a one-event append never hands work over (making a queue for each
        // one was about 1% of its time in a profile).
        private lazy var queue = DispatchQueue(label: "purchase-ledger.seal")
        private let slots = DispatchSemaphore(value: 8)
        private let blockSize: Int
        private let codec: BlockCodec
        private let layout: BlockLayout
        private let chain: HashChain
        /// Whether work went to `queue`. Until it does, everything runs on the calling thread, and
        /// `finish()` need not wait.
        private var queued = false
        // What follows is read and written on `queue` only, once `queued`, until `finish()`
        // returns. The spool spills to a file after 1 MiB: every byte it holds adds to a large
        // append's peak memory.
        let spool = Spool(memoryLimit: 1 << 20)
        private var lastLink: [UInt8]
        private var pending: [Frame] = []
        private var started = false
        private var dictionary: (id: Int64, bytes: [UInt8])?
        private var newDictionary: (id: Int64, bytes: [UInt8])?
        private var sealed: [(row: SealedRow, data: Spool.Slice)] = []
        private var canonical = BinaryWriter(capacity: 256)
        private var failure: (any Error)?

        init(blockSize: Int, codec: BlockCodec, layout: BlockLayout, chain: HashChain, lastLink: [UInt8]) {
            self.blockSize = blockSize
            self.codec = codec
            self.layout = layout
            self.chain = chain
            self.lastLink = lastLink
        }

        /// Puts the stored tail's frames (already linked) before the new ones, and gives the
        /// ledger's dictionary (nil: seed one from the first block). Blocks are sealed after this.
        func start(tail: [Frame], dictionary: (id: Int64, bytes: [UInt8])?) {
            run(later: false) { [self] in
                pending = tail + pending
                self.dictionary = dictionary
                started = true
                try sealFullBlocks()
            }
        }

        /// Links `frames` after the last one given, then seals what fills a block.
        func add(_ frames: [Frame], later: Bool) {
            run(later: later) { [self] in
                for var frame in frames {
                    FrameCodec.canonical(frame, into: &canonical)
                    frame.link = chain.link(after: lastLink, frame: canonical.bytes)
                    lastLink = frame.link
                    pending.append(frame)
                }
                try sealFullBlocks()
            }
        }

        /// Waits for the work given so far; its result, or the first failure.
        func finish() throws -> Result {
            let result = { [self] () throws -> Result in
                if let failure { throw failure }
                return Result(sealed: sealed, pending: pending, lastLink: lastLink, newDictionary: newDictionary)
            }
            return try queued ? queue.sync(execute: result) : result()
        }

        private func run(later: Bool, _ work: @escaping @Sendable () throws -> Void) {
            if !later && !queued {
                guard failure == nil else { return }
                do { try work() } catch { failure = error }
                return
            }
            queued = true
            slots.wait()
            queue.async { [self] in
                defer { slots.signal() }
                guard failure == nil else { return }
                do { try work() } catch { failure = error }
            }
        }

        private func sealFullBlocks() throws {
            guard started else { return }
            var start = 0
            while pending.count - start >= blockSize {
                let frames = pending[start..<(start + blockSize)]
                if codec == .lz4Dictionary && dictionary == nil {
                    // The first block sealed seeds the ledger's dictionary from its own frames
                    // (not their links, which are random bytes: nothing to match).
                    var raw = EventStore.rawBlock(frames, layout: layout)
                    if layout == .trailingLinks { raw.removeLast(frames.count * layout.linkPrefixSize) }
                    let seeded = (id: Int64(1), bytes: Array(DictionarySeed.common + raw.suffix(maxDictionarySize - DictionarySeed.common.count)))
                    dictionary = seeded
                    newDictionary = seeded
                }
                var row = try EventStore.seal(frames, codec: codec, layout: layout, dictionary: dictionary)
                let slice = try spool.append(row.data)
                row.data = []
                sealed.append((row, slice))
                start += blockSize
            }
            if start > 0 { pending.removeFirst(start) }
        }
    }

    /// A sealed block as its row stores it.
    struct SealedRow {
        var first: Int64
        var last: Int64
        var codec: BlockCodec
        var layout: BlockLayout
        var dictionaryID: Int64?
        var rawSize: Int
        var data: [UInt8]
        var lastLink: [UInt8]
    }

    /// The frames of a block, uncompressed, as docs/format.md lays them out.
    package static func rawBlock(_ frames: ArraySlice<Frame>, layout: BlockLayout) -> [UInt8] {
        var w = BinaryWriter(capacity: frames.count * 64)
        var previous: (at: Int64, recorded: Int64) = (0, 0)
        let inline = layout == .inlineLinks ? layout.linkPrefixSize : 0
        for f in frames {
            // Bytes are copied as stored, never re-encoded: sealing cannot hide or repair damage,
            // which the chain still catches.
            FrameCodec.appendBlockFrame(
                type: UInt64(bitPattern: f.type), flags: UInt64(bitPattern: f.flags), at: f.at, recorded: f.recorded,
                version: UInt64(bitPattern: f.version), payload: f.payload, link: f.link, inlineLink: inline, previous: &previous, to: &w)
        }
        if layout == .trailingLinks {
            for f in frames { w.bytes.append(contentsOf: f.link.prefix(layout.linkPrefixSize)) }
        }
        return w.bytes
    }

    /// Seals consecutive frames into one compressed block.
    static func seal(
        _ frames: ArraySlice<Frame>, codec: BlockCodec, layout: BlockLayout = .current, dictionary: (id: Int64, bytes: [UInt8])?
    ) throws -> SealedRow {
        let first = frames.first!, last = frames.last!
        let raw = rawBlock(frames, layout: layout)
        let data: [UInt8]
        switch codec {
        case .raw: data = raw
        case .lz4: data = try LZ4.compressForStorage(raw, "events \(first.seq)...\(last.seq)")
        case .lz4Dictionary: data = try LZ4.compressForStorage(raw, dictionary: dictionary!.bytes, "events \(first.seq)...\(last.seq)")
        }
        return SealedRow(
            first: first.seq, last: last.seq, codec: codec, layout: layout, dictionaryID: codec == .lz4Dictionary ? dictionary!.id : nil,
            rawSize: raw.count, data: data, lastLink: last.link)
    }

    // MARK: - Reading

    /// How a stored event is protected by the chain.
    enum StoredLink {
        /// A tail row's full link.
        case full([UInt8])
        /// A sealed event's link prefix; `blockLast` is the block's full last link, given with the
        /// block's last event.
        case prefix([UInt8], blockLast: [UInt8]?)

        /// Whether a recomputed link agrees with what is stored.
        func matches(_ link: [UInt8]) -> Bool {
            switch self {
            case .full(let stored): stored == link
            case .prefix(let prefix, let blockLast): link.starts(with: prefix) && (blockLast == nil || blockLast! == link)
            }
        }
    }

    /// What `scan` hands over for each event.
    struct Entry {
        var event: RecordedEvent
        /// The binary payload and stored link; only when integrity data was asked for.
        var payload: [UInt8]
        var link: StoredLink?
    }

    /// Calls `body` with every event from `seq` on, in order, one block at a time: memory stays
    /// flat whatever the log's size. Return false from `body` to stop. A block or row that does
    /// not decode throws ``LedgerError/Code/corruptData`` naming its seq, unless `onCorrupt` is
    /// given, which is then called and the scan goes on with the next block or row.
    static func scan(
        _ db: Database, from seq: Int64 = 1, through last: Int64 = .max, integrity: Bool = false,
        personal given: PersonalValues? = nil, onCorrupt: ((LedgerError) throws -> Void)? = nil, _ body: (Entry) throws -> Bool
    ) throws {
        var dictionaries: [Int64: [UInt8]] = [:]
        // What the personal refs stand for: the caller's (``PersonalValues/unresolved`` for the
        // stored bytes only), else the whole table.
        let personal = try given ?? PersonalValues.current(db)
        let blocks = try Row.fetchCursor(
            db,
            sql: """
                SELECT first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link FROM event_blocks
                WHERE last_seq >= ? AND first_seq <= ? ORDER BY first_seq
                """, arguments: [seq, last])
        let keepGoing =
            integrity
            ? try scanWithLinks(db, blocks, from: seq, through: last, dictionaries: &dictionaries, personal: personal, onCorrupt: onCorrupt, body)
            : try scanPipelined(db, blocks, from: seq, through: last, dictionaries: &dictionaries, personal: personal, onCorrupt: onCorrupt, body)
        guard keepGoing else { return }
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT seq, version, type, at_ns, recorded_ns, flags, codec, payload, link FROM events
                WHERE seq >= ? AND seq <= ? ORDER BY seq
                """, arguments: [seq, last])
        while let row = try rows.next() {
            let s: Int64 = row[0]
            let entry: Entry
            do {
                guard (row[6] as Int64) == 0 else { throw LedgerError.corrupt("event \(s) has unknown payload codec \(row[6] as Int64)", seq: s) }
                let payload = try row.withUnsafeData(atIndex: 7) { $0.map { [UInt8]($0) } ?? [] }
                let (appended, anomaly) = try decodeFlags(row[5], seq: s)
                let type = try decodeType(row[2], seq: s)
                let body = try decodePayload(type, payload, seq: s, personal: personal)
                let event = RecordedEvent(
                    seq: s, version: row[1], event: Event(at: Timestamp(nanosecondsSinceEpoch: row[3]), body),
                    recordedAt: Timestamp(nanosecondsSinceEpoch: row[4]), anomaly: anomaly, appendedByLedger: appended)
                entry = Entry(event: event, payload: integrity ? payload : [], link: integrity ? .full([UInt8](row[8] as Data)) : nil)
            } catch let error as LedgerError {
                try report(error, to: onCorrupt)
                continue
            }
            if try !body(entry) { return }
        }
    }

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

    private static func sealedBlock(
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
    private static func decompress(_ block: SealedBlock) throws -> [UInt8] {
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
    private static func forEachFrame(
        in raw: [UInt8], of block: SealedBlock,
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
            if block.layout == .trailingLinks {
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
                        &r, seq: s, inlineLink: inline, previous: &previous, personal: block.personal, wanted: s >= block.from && s <= block.through)
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
    private static func scanWithLinks(
        _ db: Database, _ blocks: RowCursor, from seq: Int64, through last: Int64,
        dictionaries: inout [Int64: [UInt8]], personal: PersonalValues, onCorrupt: ((LedgerError) throws -> Void)?,
        _ body: (Entry) throws -> Bool
    ) throws -> Bool {
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
            let (stopped, failure) = try forEachFrame(in: raw, of: block) { entry, buffer in
                try body(
                    Entry(
                        event: entry.event, payload: Array(buffer[entry.payload]),
                        link: .prefix(Array(buffer[entry.linkPrefix]), blockLast: entry.event.seq == block.last ? lastLink : nil)))
            }
            if stopped { return false }
            if let failure { try report(failure, to: onCorrupt) }
        }
        return true
    }

    /// Hands damage to `onCorrupt`, or throws it when there is none.
    private static func report(_ error: LedgerError, to onCorrupt: ((LedgerError) throws -> Void)?) throws {
        guard let onCorrupt else { throw error }
        try onCorrupt(error)
    }

    /// A block being decoded on the scan's decoding queue; `done` is signalled once it is filled.
    private final class PendingBlock: @unchecked Sendable {  // unchecked: filled on the decoding queue, read only after `done` is signalled
        let done = DispatchSemaphore(value: 0)
        var events: [RecordedEvent] = []
        var failure: LedgerError?
    }

    /// How many blocks are read ahead of the one being handed over.
    private static let readAhead = 3

    /// Hands over the sealed blocks' events while the next blocks are decompressed and decoded on
    /// another thread, so decoding and the caller's work (a replay's reducer) overlap. Rows are
    /// still read here, on the database's thread, and `body` and `onCorrupt` are called here, in
    /// log order. Returns false when `body` asked to stop.
    private static func scanPipelined(
        _ db: Database, _ blocks: RowCursor, from seq: Int64, through last: Int64,
        dictionaries: inout [Int64: [UInt8]], personal: PersonalValues, onCorrupt: ((LedgerError) throws -> Void)?,
        _ body: (Entry) throws -> Bool
    ) throws -> Bool {
        let queue = DispatchQueue(label: "purchase-ledger.block-decoder", qos: .userInitiated)
        var pending: [PendingBlock] = []
        var exhausted = false
        while true {
            while !exhausted && pending.count < readAhead {
                guard let row = try blocks.next() else { exhausted = true; break }
                let block = try sealedBlock(db, row, from: seq, through: last, dictionaries: &dictionaries, personal: personal)
                let slot = PendingBlock()
                queue.async {
                    (slot.events, slot.failure) = decodeEvents(block)
                    slot.done.signal()
                }
                pending.append(slot)
            }
            guard !pending.isEmpty else { return true }
            let slot = pending.removeFirst()
            slot.done.wait()
            for event in slot.events where try !body(Entry(event: event, payload: [])) { return false }
            if let failure = slot.failure { try report(failure, to: onCorrupt) }
        }
    }

    private static func decodeFlags(_ raw: Int64, seq: Int64) throws -> (Bool, Rule?) {
        do {
            return try FrameCodec.flags(UInt64(bitPattern: raw))
        } catch {
            throw LedgerError.corrupt("event \(seq) has invalid flags (\(error.message))", seq: seq)
        }
    }

    private static func decodeType(_ raw: Int64, seq: Int64) throws -> EventType {
        do {
            return try FrameCodec.eventType(UInt64(bitPattern: raw))
        } catch {
            throw LedgerError.corrupt("event \(seq) has an invalid type (\(error.message))", seq: seq)
        }
    }

    private static func decodePayload(_ type: EventType, _ payload: [UInt8], seq: Int64, personal: PersonalValues) throws -> EventBody {
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

/// Byte strings common in any purchase ledger, placed at the start of every dictionary.
enum DictionarySeed {
    static let common: [UInt8] = Array(
        ("file:///var/mobile/Containers/Data/Application//Library/Caches/StoreKit//Contents/"
            + "Library/Application Support/Documents/SKErrorDomainNSURLErrorDomainNSCocoaErrorDomain"
            + "The payment was cancelled.An unknown error occurredThe request timed out."
            + "The network connection was lost.The Internet connection appears to be offline.sha256:").utf8)
}
