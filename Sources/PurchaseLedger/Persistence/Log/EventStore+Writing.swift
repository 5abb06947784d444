import Foundation
import GRDB
import GRDBSQLite

extension EventStore {
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
        /// Whether the commitments of its payload's field 15 are those its values and their
        /// owners' salts, as the ledger stores them, make: true for a payload this version's
        /// encoder just wrote, and for a stored one ``ElidedCommitments/check(_:_:)`` checked.
        /// A block of the ``BlockLayout/elidedCommitments`` layout stores only such a frame's
        /// commitments elided.
        package var introductionsChecked = false

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
        let layout: BlockLayout
        /// Rows in the open tail when the append began.
        let storedTail: Int
        /// New frames given so far.
        var added = 0
        /// Whether the sealer has the stored tail and the dictionary (needed once a block can fill).
        var started = false
        /// New frames not handed to the sealer yet.
        var batch: [Frame] = []
        let sealer: Sealer

        /// Frames handed to the sealer at once.
        static let batchSize = 256

        static let insertRow = PreparedSQL(
            "INSERT INTO events (seq, stream, version, type, at_ns, recorded_ns, flags, codec, payload, link) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)")

        /// `storedTail` is the rows in the open tail when known, read from the file when nil.
        init(
            _ db: Database, blockSize: Int, codec: BlockCodec, layout: BlockLayout = .current, chain: HashChain, lastLink: [UInt8],
            storedTail: Int? = nil
        ) throws {
            self.blockSize = max(1, blockSize)
            self.codec = codec
            self.layout = layout
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
                    if layout == .elidedCommitments { try ElidedCommitments.check(&tail, db) }
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
        mutating func flushBatch(later: Bool) {
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
        let slots = DispatchSemaphore(value: 8)
        let blockSize: Int
        let codec: BlockCodec
        let layout: BlockLayout
        let chain: HashChain
        /// Whether work went to `queue`. Until it does, everything runs on the calling thread, and
        /// `finish()` need not wait.
        var queued = false
        // What follows is read and written on `queue` only, once `queued`, until `finish()`
        // returns. The spool spills to a file after 1 MiB: every byte it holds adds to a large
        // append's peak memory.
        let spool = Spool(memoryLimit: 1 << 20)
        var lastLink: [UInt8]
        var pending: [Frame] = []
        var started = false
        var dictionary: (id: Int64, bytes: [UInt8])?
        var newDictionary: (id: Int64, bytes: [UInt8])?
        var sealed: [(row: SealedRow, data: Spool.Slice)] = []
        var canonical = BinaryWriter(capacity: 256)
        var failure: (any Error)?

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

        func run(later: Bool, _ work: @escaping @Sendable () throws -> Void) {
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

        func sealFullBlocks() throws {
            guard started else { return }
            var start = 0
            while pending.count - start >= blockSize {
                let frames = pending[start..<(start + blockSize)]
                if codec == .lz4Dictionary && dictionary == nil {
                    // The first block sealed seeds the ledger's dictionary from its own frames
                    // (not their links, which are random bytes: nothing to match).
                    var raw = EventStore.rawBlock(frames, layout: layout)
                    if layout.trailsLinks { raw.removeLast(frames.count * layout.linkPrefixSize) }
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
        rawBlock(frames, asked: layout).bytes
    }

    /// The frames of a block, uncompressed, and the layout they are in: the one `asked`, except
    /// that a block holding a payload with a field 14 of its own is not given the
    /// ``BlockLayout/elidedCommitments`` layout, where the field means elided refs.
    static func rawBlock(_ frames: ArraySlice<Frame>, asked: BlockLayout) -> (bytes: [UInt8], layout: BlockLayout) {
        var layout = asked
        var stored: [ElidedCommitments.Stored] = []
        if layout == .elidedCommitments {
            stored.reserveCapacity(frames.count)
            for i in frames.indices {
                let how = ElidedCommitments.stored(frames[i].payload, checked: frames[i].introductionsChecked)
                if case .conflicting = how {
                    layout = .trailingLinks
                    break
                }
                stored.append(how)
            }
        }
        var w = BinaryWriter(capacity: frames.count * 64)
        var previous: (at: Int64, recorded: Int64) = (0, 0)
        let inline = layout == .inlineLinks ? layout.linkPrefixSize : 0
        for i in frames.indices {
            // Bytes are copied as stored, never re-encoded: sealing cannot hide or repair damage,
            // which the chain still catches. (An elided field 15 is only left out: a reader puts
            // it back byte for byte, and ``ElidedCommitments/stored(_:checked:)`` elides only
            // what it can.)
            let f = frames[i]
            FrameCodec.appendBlockFrameHeader(
                type: UInt64(bitPattern: f.type), flags: UInt64(bitPattern: f.flags), at: f.at, recorded: f.recorded,
                version: UInt64(bitPattern: f.version), previous: &previous, to: &w)
            if layout == .elidedCommitments, case .elided(let range, let field) = stored[i - frames.startIndex] {
                w.varint(UInt64(f.payload.count - range.count + field.count))
                w.bytes.append(contentsOf: f.payload[..<range.lowerBound])
                w.bytes.append(contentsOf: field)
                w.bytes.append(contentsOf: f.payload[range.upperBound...])
            } else {
                w.lengthPrefixed(f.payload)
            }
            if inline > 0 { w.bytes.append(contentsOf: f.link.prefix(inline)) }
        }
        if layout.trailsLinks {
            for i in frames.indices { w.bytes.append(contentsOf: frames[i].link.prefix(layout.linkPrefixSize)) }
        }
        return (w.bytes, layout)
    }

    /// Seals consecutive frames into one compressed block.
    static func seal(
        _ frames: ArraySlice<Frame>, codec: BlockCodec, layout: BlockLayout = .current, dictionary: (id: Int64, bytes: [UInt8])?
    ) throws -> SealedRow {
        let first = frames.first!, last = frames.last!
        let (raw, layout) = rawBlock(frames, asked: layout)
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
}
