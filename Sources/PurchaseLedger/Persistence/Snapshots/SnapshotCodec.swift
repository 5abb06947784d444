import Crypto

/// The reducer state as pages of records, for snapshots (docs/format.md).
///
/// Each kind of record (transactions, downloads, ...) is sorted by key and cut into pages where a
/// key's hash says so. A page is stored LZ4-compressed, addressed by the first 16 bytes of the
/// SHA-256 of its stored bytes. A snapshot is a manifest: per page its address, sizes, record
/// count and first key.
///
/// Transactions and downloads, nearly all of a state, stay in their pages when a snapshot is
/// loaded (see ``RecordMap``): a page is decompressed and decoded only when a record in it is read.
/// A snapshot written from a state loaded from an earlier one re-encodes only the pages whose
/// records changed and refers to the others by address, so a snapshot costs in proportion to what
/// changed since the last one. Records are sequential, not tagged: a snapshot is only read by the
/// same ``Reducer/version`` that wrote it, and in one of the ``readableFormats``; any other is
/// ignored and the log replayed.
enum SnapshotCodec {
    /// The format snapshots are written in: 10 writes the pages of the paged kinds with each
    /// record's length (``cut(_:key:indexed:write:)``), so a lookup decodes one record, not the
    /// page's 256.
    static let format = 10
    /// The formats read: format 9 differs only in its pages, which say which layout they have, so
    /// its snapshots (and their pages that format-10 snapshots go on sharing) still load.
    static let readableFormats = [9, 10]
    /// ``readableFormats`` as an SQL list: `(9, 10)`.
    static let readableFormatsSQL = "(" + readableFormats.map(String.init).joined(separator: ", ") + ")"

    /// A page's address: the first 16 bytes (128 bits) of the SHA-256 of its stored bytes. Every
    /// manifest lists the addresses of all its pages, so this is most of a manifest's size; the
    /// whole 32 bytes made the manifests of a 1,000,000-event ledger 2.5 MB. 128 bits keep
    /// collisions out of reach and still catch any damage.
    static let addressSize = 16

    static func address(of stored: [UInt8]) -> [UInt8] { Array(SHA256.hash(data: stored).prefix(addressSize)) }

    typealias Failure = BinaryReader.Failure

    /// The kinds of record, in manifest order. A kind added later goes last, and a manifest
    /// written before it (ending early) reads as having none of it: `productViews`, so the
    /// snapshots of a ledger written before store product views still load.
    enum Kind: Int, CaseIterable {
        case products, publishedVersions, transactions, downloads, copiedContent, registeredURLs, owners, orphanStreams, productViews

        /// Kept in pages decoded on first use, with an overlay (``RecordMap``); the other kinds
        /// are small and decoded whole.
        var isPaged: Bool { self == .transactions || self == .downloads || self == .registeredURLs }
    }

    /// Pages hold about 256 records; a key whose hash ends in eight zero bits closes one.
    static let boundaryMask: UInt64 = 255
    static let maxPageBytes = 256 * 1024
    /// Which changed records a snapshot keeps in its overlay instead of rewriting their pages.
    struct OverlayLimits: Sendable, Equatable {
        /// A stored page with at most this many records changed, added or removed since it was
        /// written is kept as it is, and those records go to the snapshot's overlay: a large
        /// ledger changes a few old records here and there between snapshots, and rewriting a
        /// whole page (about 12 KB compressed) for each of them made most of a snapshot's bytes.
        var perPage = 32
        /// At most this many records in a kind's overlay. The overlay is written again by every
        /// snapshot, so past this the pages holding the most of its records are rewritten
        /// instead: without the bound, the overlay of a ledger that keeps growing would grow with
        /// it, and so would the cost of each snapshot.
        var total = 2048
    }

    /// A page as the manifest lists it. `generation`: for pages of a paged kind, the seq of the
    /// snapshot that wrote it (not stored for the other kinds).
    struct PageEntry {
        var address: [UInt8]
        var rawSize: Int
        var count: Int
        var firstKey: String
        var generation: Int64 = 0
    }

    /// At most this many overlay chunks per kind; past it, the overlay is written as one chunk.
    static let maxChunks = 8

    /// A page to store: its address, raw size and LZ4-compressed bytes.
    struct StoredPage {
        var address: [UInt8]
        var rawSize: Int
        var data: [UInt8]
    }

    struct Encoded {
        var manifest: [UInt8]
        /// Pages the manifest refers to that may not be stored yet.
        var pages: [StoredPage]
        /// The paged records as written (pages and overlay), for the writer to continue from.
        var transactions: RecordMap<TransactionRecord>
        var downloads: RecordMap<DownloadRecord>
        var registeredURLs: RecordMap<String>
    }

    /// Encodes `s`. Pages of its paged kinds (``Kind/isPaged``) that are unchanged since the
    /// snapshot they came from, and still `stored`, are referred to, not written again.
    /// `indexedPages` false writes the paged kinds' pages as format 9 did (no record lengths):
    /// only for the tests that check those pages still load.
    static func encode(
        _ s: LedgerState, overlay limits: OverlayLimits = OverlayLimits(), indexedPages: Bool = true, stored: ([UInt8]) throws -> Bool
    ) throws -> Encoded {
        var scalars = BinaryWriter()
        scalars.varint(UInt64(s.seq))
        scalars.varint(s.restoreInProgress ? 1 : 0)
        scalars.varint(UInt64(s.anomalies))
        scalars.varint(UInt64(s.catalogEvents))
        scalars.varint(UInt64(s.restoreEvents))
        // Only after a restore that named a user (so other snapshots are as before): its user.
        if let user = s.restoreUser { scalars.lengthPrefixed(user) }
        var manifest = BinaryWriter()
        manifest.lengthPrefixed(scalars.bytes)
        var newPages: [StoredPage] = []
        func list(_ entries: [PageEntry], paged: Bool) {
            manifest.varint(UInt64(entries.count))
            for e in entries {
                manifest.bytes.append(contentsOf: e.address)
                manifest.varint(UInt64(e.rawSize))
                manifest.varint(UInt64(e.count))
                manifest.lengthPrefixed(e.firstKey)
                if paged { manifest.varint(UInt64(e.generation)) }
            }
        }
        /// A paged kind: its pages listed, each with its generation; then its overlay: the count
        /// of its records not in any page, and its chunks (address, raw size, generation, records).
        func pagedKind<V>(_ map: RecordMap<V>, write: @escaping (String, V, inout BinaryWriter) -> Void) throws -> RecordMap<V> {
            let (pages, overlay, storedOverlay) = try paged(
                map, write: write, limits: limits, generation: s.seq, indexed: indexedPages, stored: stored, new: &newPages)
            list(
                zip(pages, storedOverlay.generations).map {
                    PageEntry(address: $0.address, rawSize: $0.rawSize, count: $0.count, firstKey: $0.firstID, generation: $1)
                }, paged: true)
            manifest.varint(UInt64(overlay.added))
            manifest.varint(UInt64(storedOverlay.chunks.count))
            for chunk in storedOverlay.chunks {
                manifest.bytes.append(contentsOf: chunk.address)
                manifest.varint(UInt64(chunk.rawSize))
                manifest.varint(UInt64(chunk.generation))
                manifest.varint(UInt64(chunk.records))
            }
            return RecordMap(base: RecordPages(pages.map(\.page)), overlay: overlay, stored: storedOverlay)
        }
        var transactions = RecordMap<TransactionRecord>()
        var downloads = RecordMap<DownloadRecord>()
        var registeredURLs = RecordMap<String>()
        for kind in Kind.allCases {
            switch kind {
            case .transactions: transactions = try pagedKind(s.transactions) { _, t, w in t.writeSnapshot(to: &w) }
            case .downloads: downloads = try pagedKind(s.downloads) { _, d, w in d.writeSnapshot(to: &w) }
            case .registeredURLs:
                registeredURLs = try pagedKind(s.registeredURLs) { url, d, w in
                    w.lengthPrefixed(url); w.lengthPrefixed(d)
                }
            default:
                var entries: [PageEntry] = []
                for (raw, count, firstKey) in cut(records(of: kind, s), key: \.key, write: { r, w in r.write(&w) }) {
                    let page = try store(raw)
                    newPages.append(page)
                    entries.append(PageEntry(address: page.address, rawSize: raw.count, count: count, firstKey: firstKey))
                }
                list(entries, paged: false)
            }
        }
        return Encoded(manifest: manifest.bytes, pages: newPages, transactions: transactions, downloads: downloads, registeredURLs: registeredURLs)
    }

    /// The records of a small kind, each with its key and how to write it.
    static func records(of kind: Kind, _ s: LedgerState) -> [(key: String, write: (inout BinaryWriter) -> Void)] {
        var records: [(key: String, write: (inout BinaryWriter) -> Void)]
        switch kind {
        case .products:
            records = s.products.map { key, p in
                (
                    key,
                    { w in
                        var inner = BinaryWriter()
                        PayloadCodec.encode(.productRegistered(p.registration), into: &inner)
                        w.lengthPrefixed(inner.bytes)
                        w.zigzag(p.registeredAt.nanosecondsSinceEpoch)
                    }
                )
            }
        case .publishedVersions:
            records = s.publishedVersions.map { key, v in
                (
                    key.product + "\u{0}" + key.content,
                    { w in
                        w.lengthPrefixed(key.product); w.lengthPrefixed(key.content); w.lengthPrefixed(v.text)
                    }
                )
            }
        case .copiedContent:
            records = s.copiedContent.map { key, o in
                (
                    key.product + "\u{0}" + key.content,
                    { w in OwnedContent.schema.writeSnapshot(o, to: &w) }
                )
            }
        case .owners:
            records = s.owners.map { p, n in
                (
                    p,
                    { w in
                        w.lengthPrefixed(p); w.zigzag(Int64(n))
                    }
                )
            }
        case .orphanStreams:
            records = s.orphanStreamEvents.map { stream, n in
                (
                    stream,
                    { w in
                        w.lengthPrefixed(stream); w.varint(UInt64(n))
                    }
                )
            }
        case .productViews:
            records = s.productViews.map { key, v in (key, { w in v.writeSnapshot(to: &w) }) }
        case .transactions, .downloads, .registeredURLs:
            records = []
        }
        records.sort { $0.key < $1.key }
        return records
    }

    /// Cuts sorted records into raw pages, closing a page after a key whose hash says so, or when
    /// it grows past `maxPageBytes`. A page is a `count` varint, then the records; `indexed`, it is
    /// a 0 byte (no page holds no record), the `count` varint, then each record as a varint length
    /// and its bytes: a reader finds a record by its key (every paged record starts with it) and
    /// decodes that one alone (``pageIndex(_:)``).
    @inline(__always) static func cut<R>(_ records: [R], key: (R) -> String, indexed: Bool = false, write: (R, inout BinaryWriter) -> Void) -> [(
        raw: [UInt8], count: Int, firstKey: String
    )] {
        var pages: [(raw: [UInt8], count: Int, firstKey: String)] = []
        var page = BinaryWriter(capacity: 8192)
        var record = BinaryWriter(capacity: 256)
        var count = 0
        var firstKey = ""
        func close() {
            guard count > 0 else { return }
            var framed = BinaryWriter(capacity: page.bytes.count + 5)
            if indexed { framed.bytes.append(indexedPageMarker) }
            framed.varint(UInt64(count))
            framed.bytes.append(contentsOf: page.bytes)
            pages.append((framed.bytes, count, firstKey))
            page = BinaryWriter(capacity: 8192)
            count = 0
        }
        for r in records {
            let k = key(r)
            if count == 0 { firstKey = k }
            if indexed {
                record.bytes.removeAll(keepingCapacity: true)
                write(r, &record)
                page.varint(UInt64(record.bytes.count))
                page.bytes.append(contentsOf: record.bytes)
            } else {
                write(r, &page)
            }
            count += 1
            if Identifier.stableHash(k) & boundaryMask == 0 || page.bytes.count >= maxPageBytes { close() }
        }
        close()
        return pages
    }

    static func store(_ raw: [UInt8]) throws -> StoredPage {
        let data = try LZ4.compressForStorage(raw, "a snapshot page")
        return StoredPage(address: address(of: data), rawSize: raw.count, data: data)
    }

    /// The pages of a paged kind's map: the pages of its base that nothing changed (and
    /// that are still stored) as they are, new pages for the rest; the overlay: the records
    /// changed in pages kept as they are (at most `limits.perPage` per page and `limits.total` in
    /// all, never the last page, where new ids go); and how both are stored. Pages written now get
    /// `generation`. The overlay's chunks that still hold current records are kept, and one new
    /// chunk holds the records changed since; when more than half of the kept chunks' records are
    /// out of date, when a chunk holds a record that is gone, or past ``maxChunks``, the whole
    /// overlay is written as one chunk.
    static func paged<V>(
        _ map: RecordMap<V>, write: @escaping (String, V, inout BinaryWriter) -> Void, limits: OverlayLimits, generation: Int64, indexed: Bool = true,
        stored: ([UInt8]) throws -> Bool, new: inout [StoredPage]
    ) throws -> (pages: [StoredRecordPage<V>], overlay: RecordMap<V>.Overlay, stored: StoredOverlay<V>) {
        var out: [StoredRecordPage<V>] = []
        var generations: [Int64] = []
        var overlay = RecordMap<V>.Overlay()
        func emit(_ records: [(key: String, value: V)]) throws {
            var offset = 0
            for (raw, count, firstKey) in cut(records, key: \.key, indexed: indexed, write: { r, w in write(r.key, r.value, &w) }) {
                let page = try store(raw)
                new.append(page)
                out.append(
                    StoredRecordPage(
                        address: page.address, rawSize: raw.count, firstID: firstKey, count: count,
                        storage: .decoded(Array(records[offset..<(offset + count)]))))
                generations.append(generation)
                offset += count
            }
        }
        guard let base = map.base, !base.pages.isEmpty else {
            var all: [(key: String, value: V)] = []
            all.reserveCapacity(map.count)
            map.forEachUnordered { all.append(($0, $1)) }
            all.sort { $0.key < $1.key }
            try emit(all)
            return (out, overlay, StoredOverlay(generations: generations))
        }
        // How the base was stored; a base without that record (none is made so) counts as written
        // before any chunk, with no chunks.
        let previous =
            map.stored.flatMap { $0.generations.count == base.pages.count ? $0 : nil }
            ?? StoredOverlay(generations: Array(repeating: 0, count: base.pages.count))
        var changedByPage: [Int: [(key: String, value: V)]] = [:]
        for (key, value) in map.changes { changedByPage[base.pageIndex(for: key.id), default: []].append((key.id, value)) }
        var removedByPage: [Int: [String]] = [:]
        for key in map.removed { removedByPage[base.pageIndex(for: key.id), default: []].append(key.id) }
        // The pages kept with their changes in the overlay: stored ones with at most
        // `limits.perPage` changes (never the last page, where new ids go), those with the fewest
        // first, while the overlay holds at most `limits.total` records; the rest are rewritten.
        var overlaid = Set<Int>()
        var candidates: [(page: Int, changes: Int)] = []
        for (i, page) in base.pages.enumerated() where i != base.pages.count - 1 {
            let n = (changedByPage[i]?.count ?? 0) + (removedByPage[i]?.count ?? 0)
            if n > 0 && n <= limits.perPage, let kept = page.source as? StoredRecordPage<V>, try stored(kept.address) {
                candidates.append((i, n))
            }
        }
        candidates.sort { $0.changes != $1.changes ? $0.changes < $1.changes : $0.page < $1.page }
        var budget = limits.total
        for c in candidates {
            guard c.changes <= budget else { break }
            budget -= c.changes
            overlaid.insert(c.page)
        }
        // New ids among the changes: those of the rewritten pages are counted here as they are
        // merged; the rest stay in the overlay.
        var addedInRewrites = 0
        for (i, page) in base.pages.enumerated() {
            let changed = changedByPage[i] ?? []
            let removed = removedByPage[i] ?? []
            if overlaid.contains(i), let kept = page.source as? StoredRecordPage<V> {
                out.append(kept)
                generations.append(previous.generations[i])
                overlay.changed += changed
                overlay.removed += removed
                continue
            }
            if changed.isEmpty && removed.isEmpty, let kept = page.source as? StoredRecordPage<V>, try stored(kept.address) {
                out.append(kept)
                generations.append(previous.generations[i])
                continue
            }
            let records = page.records
            var merged = records.filter { map.changes[RecordKey($0.key)] == nil && !map.removed.contains(RecordKey($0.key)) }
            addedInRewrites += changed.count - (records.count - removed.count - merged.count)
            merged.append(contentsOf: changed)
            merged.sort { $0.key < $1.key }
            try emit(merged)
        }
        overlay.changed.sort { $0.key < $1.key }
        overlay.removed.sort()
        overlay.added = map.added - addedInRewrites

        guard !overlay.changed.isEmpty || !overlay.removed.isEmpty else { return (out, overlay, StoredOverlay(generations: generations)) }

        // Which overlay records the previous chunks already hold as they are now.
        let pages = RecordPages(out.map(\.page))
        var current = Set<RecordKey>()
        var unchanged: [(key: RecordKey, chunk: Int, value: V?)] = []
        var currentIn = [Int](repeating: 0, count: previous.chunks.count)
        var fresh: (changed: [(key: String, value: V)], removed: [String]) = ([], [])
        // Each overlay entry: a record, or nil for an id removed from its page.
        let entries = overlay.changed.map { ($0.key, Optional($0.value)) } + overlay.removed.map { ($0, V?.none) }
        for (id, value) in entries {
            let key = RecordKey(id)
            current.insert(key)
            if let e = previous.entries[key], e.value == value {
                currentIn[e.chunk] += 1
                unchanged.append((key, e.chunk, value))
            } else if let value {
                fresh.changed.append((id, value))
            } else {
                fresh.removed.append(id)
            }
        }
        let keep = previous.chunks.indices.filter { currentIn[$0] > 0 }
        // A stored entry that is neither current nor under a page written now would come back
        // on load (an id added, then removed again); a chunk no longer stored cannot be referred
        // to. Either way the overlay is written whole.
        var whole = keep.count >= maxChunks
        for key in previous.entries.keys where !whole && !current.contains(key) {
            whole = generations[pages.pageIndex(for: key.id)] != generation
        }
        for i in keep where !whole { whole = try !stored(previous.chunks[i].address) }
        let currentInKept = keep.reduce(0) { $0 + currentIn[$1] }
        let outOfDate = keep.reduce(0) { $0 + previous.chunks[$1].records } - currentInKept
        whole = whole || outOfDate > currentInKept
        var result = StoredOverlay<V>(generations: generations)
        if !whole {
            var renumbered: [Int: Int] = [:]
            for old in keep {
                renumbered[old] = result.chunks.count
                result.chunks.append(previous.chunks[old])
            }
            for u in unchanged { result.entries[u.key] = (renumbered[u.chunk]!, u.value) }
        }
        let toWrite = whole ? (changed: overlay.changed, removed: overlay.removed) : fresh
        if !toWrite.changed.isEmpty || !toWrite.removed.isEmpty {
            var raw = BinaryWriter()
            raw.varint(UInt64(toWrite.changed.count))
            for (key, value) in toWrite.changed { write(key, value, &raw) }
            raw.varint(UInt64(toWrite.removed.count))
            for id in toWrite.removed { raw.lengthPrefixed(id) }
            let page = try store(raw.bytes)
            new.append(page)
            let index = result.chunks.count
            result.chunks.append(
                OverlayChunk(
                    address: page.address, rawSize: page.rawSize, generation: generation, records: toWrite.changed.count + toWrite.removed.count))
            for (id, value) in toWrite.changed { result.entries[RecordKey(id)] = (index, value) }
            for id in toWrite.removed { result.entries[RecordKey(id)] = (index, nil) }
        }
        return (out, overlay, result)
    }
}
