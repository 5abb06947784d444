import Crypto
import Dispatch

extension SnapshotCodec {
    /// A paged record read from its bytes: its key and value.
    typealias RecordReader<V> = @Sendable (inout BinaryReader) throws(Failure) -> (key: String, value: V)

    /// The first byte of a page written with each record's length (format 10): a page of the
    /// earlier layout starts with its record count, never 0.
    static let indexedPageMarker: UInt8 = 0

    static func keyedTransaction(_ r: inout BinaryReader) throws(Failure) -> (key: String, value: TransactionRecord) {
        let t = try TransactionRecord(snapshot: &r)
        return (t.transaction, t)
    }

    /// A registered URL and the download it names.
    static func keyedURL(_ r: inout BinaryReader) throws(Failure) -> (key: String, value: String) {
        (try r.string(), try r.string())
    }

    static func keyedDownload(_ r: inout BinaryReader) throws(Failure) -> (key: String, value: DownloadRecord) {
        let d = try DownloadRecord(snapshot: &r)
        return (d.download, d)
    }

    /// The records of one raw page, each with its id, in either layout.
    static func decodePage<V>(_ buffer: UnsafeRawBufferPointer, _ record: RecordReader<V>) throws(Failure) -> [(key: String, value: V)] {
        let indexed = buffer.first == indexedPageMarker
        var r = BinaryReader(buffer, offset: indexed ? 1 : 0, end: buffer.count)
        let count = try r.int(max: buffer.count)
        var records: [(key: String, value: V)] = []
        records.reserveCapacity(count)
        for _ in 0..<count {
            guard indexed else {
                records.append(try record(&r))
                continue
            }
            // Each record must use its length exactly.
            let length = try r.int(max: r.end - r.offset)
            var one = BinaryReader(buffer, offset: r.offset, end: r.offset + length)
            records.append(try record(&one))
            guard one.isAtEnd else { throw Failure(message: "a record differs from its length") }
            r.offset += length
        }
        guard r.isAtEnd else { throw Failure(message: "trailing bytes in a page") }
        return records
    }

    /// Where each record of a page written with lengths is, and its key; nil for a page of the
    /// earlier layout. Reads the lengths and keys only: a few microseconds for 256 records,
    /// where decoding them all took 270.
    struct PageIndex: Sendable {
        var keys: [String]
        var ranges: [Range<Int>]
    }

    static func pageIndex(_ buffer: UnsafeRawBufferPointer) throws(Failure) -> PageIndex? {
        guard buffer.first == indexedPageMarker else { return nil }
        var r = BinaryReader(buffer, offset: 1, end: buffer.count)
        let count = try r.int(max: buffer.count)
        var index = PageIndex(keys: [], ranges: [])
        index.keys.reserveCapacity(count)
        index.ranges.reserveCapacity(count)
        for _ in 0..<count {
            let length = try r.int(max: r.end - r.offset)
            let range = r.offset..<(r.offset + length)
            var key = BinaryReader(buffer, offset: range.lowerBound, end: range.upperBound)
            index.keys.append(try key.string())
            index.ranges.append(range)
            r.offset = range.upperBound
        }
        guard r.isAtEnd else { throw Failure(message: "trailing bytes in a page") }
        return index
    }

    /// Record `i` of an indexed page, which must use its bytes exactly and carry its key.
    static func decodeRecord<V>(_ buffer: UnsafeRawBufferPointer, _ index: PageIndex, _ i: Int, _ record: RecordReader<V>) throws(Failure) -> (
        key: String, value: V
    ) {
        let range = index.ranges[i]
        var r = BinaryReader(buffer, offset: range.lowerBound, end: range.upperBound)
        let decoded = try record(&r)
        guard r.isAtEnd, decoded.key == index.keys[i] else { throw Failure(message: "a record differs from its page's index") }
        return decoded
    }

    /// A manifest's scalars, page entries per kind, and the overlay of each paged kind: the count
    /// of its records not in any page, and its chunks, oldest first.
    static func parse(_ manifest: [UInt8]) throws -> (
        scalars: [UInt8], kinds: [[PageEntry]], overlays: [Kind: (added: Int, chunks: [OverlayChunk])]
    ) {
        try manifest.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            let scalars = try r.bytes()
            var kinds: [[PageEntry]] = []
            var overlays: [Kind: (added: Int, chunks: [OverlayChunk])] = [:]
            func address() throws(Failure) -> [UInt8] {
                guard r.end - r.offset >= addressSize else { throw Failure(message: "truncated manifest") }
                defer { r.offset += addressSize }
                return Array(buffer[r.offset..<(r.offset + addressSize)])
            }
            for kind in Kind.allCases {
                // Store product views came later, at the end: a manifest written before ends
                // after the orphan streams, and has none.
                if kind == .productViews && r.isAtEnd {
                    kinds.append([])
                    continue
                }
                let paged = kind.isPaged
                let count = try r.int(max: buffer.count / addressSize)
                var entries: [PageEntry] = []
                entries.reserveCapacity(count)
                for _ in 0..<count {
                    entries.append(
                        PageEntry(
                            address: try address(), rawSize: try r.int(max: 1 << 30), count: try r.int(max: 1 << 30),
                            firstKey: try r.string(), generation: paged ? Int64(try r.int(max: Int(Int64.max))) : 0))
                }
                kinds.append(entries)
                if paged {
                    let added = try r.int(max: 1 << 30)
                    let chunkCount = try r.int(max: buffer.count / addressSize)
                    var chunks: [OverlayChunk] = []
                    for _ in 0..<chunkCount {
                        chunks.append(
                            OverlayChunk(
                                address: try address(), rawSize: try r.int(max: 1 << 30), generation: Int64(try r.int(max: Int(Int64.max))),
                                records: try r.int(max: 1 << 30)))
                    }
                    overlays[kind] = (added, chunks)
                }
            }
            guard r.isAtEnd else { throw Failure(message: "trailing bytes in the manifest") }
            return (scalars, kinds, overlays)
        }
    }

    /// Rebuilds a state from a manifest. `fetch` gives a page's stored bytes by address; every
    /// page is checked against its address here, and transaction and download pages are kept
    /// encoded until read.
    static func decode(manifest: [UInt8], cache: SnapshotPageCache, fetch: ([UInt8]) throws -> [UInt8]?) throws -> LedgerState {
        let (scalars, kinds, overlays) = try parse(manifest)
        var s = LedgerState()
        try scalars.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            s.seq = Int64(try r.int(max: Int(Int64.max)))
            s.restoreInProgress = try r.varint() == 1
            s.anomalies = try r.int(max: Int.max)
            s.catalogEvents = Int64(try r.int(max: Int(Int64.max)))
            s.restoreEvents = Int64(try r.int(max: Int(Int64.max)))
            if !r.isAtEnd { s.restoreUser = try r.string() }
        }
        // Every page and overlay chunk the cache does not hold is read first, then all are
        // checked against their addresses on every core (SHA-256 of the 5.6 MB a state at seq
        // 765,000 of a 1,000,000-event ledger reads took 3.4 ms on one).
        var wanted: [[UInt8]] = []
        for kind in Kind.allCases {
            let entries = kinds[kind.rawValue]
            let cached = kind == .transactions || kind == .downloads
            wanted += entries.lazy.map(\.address).filter { !cached || !cache.holds($0) }
            wanted += overlays[kind]?.chunks.map(\.address) ?? []
        }
        var read: [[UInt8]: [UInt8]] = [:]
        read.reserveCapacity(wanted.count)
        // Checked in batches on another thread while the next are read.
        let checks = DispatchGroup()
        defer { checks.wait() }
        let mismatch = Locked(false)
        var batch: [(address: [UInt8], data: [UInt8])] = []
        func check(_ pages: [(address: [UInt8], data: [UInt8])]) {
            guard !pages.isEmpty else { return }
            DispatchQueue.global().async(group: checks) {
                if !pages.allSatisfy({ SnapshotCodec.address(of: $0.data) == $0.address }) { mismatch.withLock { $0 = true } }
            }
        }
        for address in wanted where read[address] == nil {
            guard let data = try fetch(address) else { throw Failure(message: "missing page") }
            read[address] = data
            batch.append((address, data))
            if batch.count == 64 {
                check(batch)
                batch = []
            }
        }
        check(batch)
        checks.wait()
        guard !mismatch.withLock({ $0 }) else { throw Failure(message: "page does not match its hash") }
        func load(_ address: [UInt8]) throws -> [UInt8] {
            if let data = read[address] { return data }
            // Dropped from the cache since it was looked at: read and checked here.
            guard let data = try fetch(address) else { throw Failure(message: "missing page") }
            guard SnapshotCodec.address(of: data) == address else { throw Failure(message: "page does not match its hash") }
            return data
        }
        /// A paged kind's pages: from the cache, or read, checked and kept encoded. (`cached` is
        /// escaping only so that it may be called with a closure reading the non-escaping `fetch`.)
        func pages<V>(
            _ entries: [PageEntry], _ decode: @escaping RecordReader<V>,
            _ cached: @escaping ([UInt8], () throws -> StoredRecordPage<V>) throws -> StoredRecordPage<V>
        ) throws -> RecordPages<V> {
            RecordPages(
                try entries.map { e in
                    let page = try cached(e.address) {
                        StoredRecordPage(address: e.address, rawSize: e.rawSize, firstID: e.firstKey, count: e.count, storage: .encoded(try load(e.address), decode))
                    }
                    guard page.count == e.count, page.firstID == e.firstKey else { throw Failure(message: "page differs from the manifest") }
                    return page.page
                })
        }
        /// A paged kind: its pages, and its overlay, read and checked now (it is small). A chunk's
        /// record applies only where the chunk is newer than the page holding its key, and a later
        /// chunk's over an earlier one's.
        func pagedKind<V>(
            _ kind: Kind, _ record: @escaping RecordReader<V>,
            _ cached: @escaping ([UInt8], () throws -> StoredRecordPage<V>) throws -> StoredRecordPage<V>
        ) throws -> RecordMap<V> {
            let entries = kinds[kind.rawValue]
            let base = try pages(entries, record, cached)
            let (added, chunks) = overlays[kind] ?? (0, [])
            var stored = StoredOverlay<V>(generations: entries.map(\.generation), chunks: chunks)
            guard !chunks.isEmpty else {
                guard added == 0 else { throw Failure(message: "bad overlay") }
                return RecordMap(base: base, overlay: RecordMap<V>.Overlay(), stored: stored)
            }
            guard !base.pages.isEmpty else { throw Failure(message: "an overlay without pages") }
            for (index, chunk) in chunks.enumerated() {
                let raw = try LZ4.decompressStored(try load(chunk.address), originalSize: chunk.rawSize, "a snapshot overlay chunk")
                try raw.withUnsafeBytes { buffer in
                    var r = BinaryReader(buffer)
                    let changed = try r.int(max: buffer.count)
                    for _ in 0..<changed {
                        let (key, value) = try record(&r)
                        if chunk.generation > stored.generations[base.pageIndex(for: key)] { stored.entries[RecordKey(key)] = (index, value) }
                    }
                    let removed = try r.int(max: buffer.count)
                    for _ in 0..<removed {
                        let key = try r.string()
                        if chunk.generation > stored.generations[base.pageIndex(for: key)] { stored.entries[RecordKey(key)] = (index, nil) }
                    }
                    guard r.isAtEnd, changed + removed == chunk.records else { throw Failure(message: "bad overlay chunk") }
                }
            }
            var o = RecordMap<V>.Overlay()
            o.added = added
            for (key, e) in stored.entries {
                if let value = e.value { o.changed.append((key.id, value)) } else { o.removed.append(key.id) }
            }
            guard o.added <= o.changed.count, o.removed.count <= base.count else { throw Failure(message: "bad overlay") }
            return RecordMap(base: base, overlay: o, stored: stored)
        }
        for kind in Kind.allCases {
            let entries = kinds[kind.rawValue]
            switch kind {
            case .transactions: s.transactions = try pagedKind(kind, keyedTransaction, cache.transactionPage)
            case .downloads: s.downloads = try pagedKind(kind, keyedDownload, cache.downloadPage)
            // Few and small: not kept in the page cache.
            case .registeredURLs: s.registeredURLs = try pagedKind(kind, keyedURL) { _, load in try load() }
            default:
                for entry in entries {
                    let raw = try LZ4.decompressStored(try load(entry.address), originalSize: entry.rawSize, "a snapshot page")
                    try raw.withUnsafeBytes { buffer in
                        var r = BinaryReader(buffer)
                        let count = try r.int(max: buffer.count)
                        guard count == entry.count else { throw Failure(message: "page count differs from the manifest") }
                        for _ in 0..<count { try decodeRecord(kind, &r, into: &s) }
                        guard r.isAtEnd else { throw Failure(message: "trailing bytes in a page") }
                    }
                }
            }
        }
        return s
    }

    static func decodeRecord(_ kind: Kind, _ r: inout BinaryReader, into s: inout LedgerState) throws {
        switch kind {
        case .products:
            var inner = try r.message()
            let body = try PayloadCodec.decode(.productRegistered, &inner, personal: .empty)
            guard case .productRegistered(let registration) = body else { throw Failure(message: "bad product") }
            s.products[registration.product] = ProductRecord(registration: registration, registeredAt: Timestamp(nanosecondsSinceEpoch: try r.zigzag()))
        case .publishedVersions:
            let key = ContentKey(product: try r.string(), content: try r.string())
            s.publishedVersions[key] = try version(&r)
        case .copiedContent:
            var o = OwnedContent.blank
            try OwnedContent.schema.readSnapshot(into: &o, &r)
            s.copiedContent[ContentKey(product: o.product, content: o.content)] = o
        case .owners:
            s.owners[try r.string()] = Int(try r.zigzag())
        case .orphanStreams:
            s.orphanStreamEvents[try r.string()] = Int64(try r.int(max: Int(Int64.max)))
        case .productViews:
            let v = try ProductViewRecord(snapshot: &r)
            s.productViews[v.view] = v
            // The one on screen, which the state keeps by id (at most one is).
            if v.onScreen { s.productViewOnScreen = v.view }
        case .transactions, .downloads, .registeredURLs:
            throw Failure(message: "paged records in a small kind")
        }
    }

    static func version(_ r: inout BinaryReader) throws(Failure) -> ContentVersion {
        guard let v = ContentVersion(try r.string()) else { throw Failure(message: "bad version") }
        return v
    }
}
