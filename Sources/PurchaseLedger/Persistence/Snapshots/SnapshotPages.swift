import Dispatch

/// A page of transaction or download records as a snapshot stores it: LZ4-compressed, addressed
/// by the start of the SHA-256 of the stored bytes, and decoded the first time one of its records
/// is read. A page the snapshot writer just built keeps the records it was built from.
final class StoredRecordPage<Value: Sendable>: RecordPageSource {
    /// The first ``SnapshotCodec/addressSize`` bytes of the SHA-256 of the stored bytes: the
    /// page's key in `snapshot_pages`.
    let address: [UInt8]
    /// The size of the page before compression.
    let rawSize: Int
    private let storage: Locked<Storage>

    enum Storage {
        /// The stored (compressed) bytes, already checked against `address`, and the record reader.
        case encoded([UInt8], SnapshotCodec.RecordReader<Value>)
        /// The raw bytes of a page written with each record's length, where its records are, the
        /// record reader, and how many lookups it served: a lookup decodes one record, until
        /// ``wholeAfter`` lookups, when the page is decoded whole.
        case indexed([UInt8], SnapshotCodec.PageIndex, SnapshotCodec.RecordReader<Value>, lookups: Int)
        case decoded([(key: String, value: Value)])
    }

    let firstID: String
    let count: Int

    init(address: [UInt8], rawSize: Int, firstID: String, count: Int, storage: Storage) {
        self.address = address
        self.rawSize = rawSize
        self.storage = Locked(storage)
        self.firstID = firstID
        self.count = count
    }

    /// The page as the state holds it.
    var page: RecordPage<Value> { RecordPage(firstID: firstID, count: count, source: self) }

    // The bytes matched `address` when the snapshot was loaded, so they are the bytes the snapshot
    // writer made: a page that does not decode is a bug in that writer (the codec's tests guard
    // it), not damage, and there is no state to give.
    private func decoded<T>(_ body: () throws -> T) -> T {
        do {
            return try body()
        } catch {
            preconditionFailure("a snapshot page that matched its SHA-256 does not decode (\(error)); please report this")
        }
    }

    /// Every record of the raw page `raw`, in either layout.
    private func whole(_ raw: [UInt8], _ reader: SnapshotCodec.RecordReader<Value>) -> [(key: String, value: Value)] {
        let records = decoded { try raw.withUnsafeBytes { buffer throws(BinaryReader.Failure) in try SnapshotCodec.decodePage(buffer, reader) } }
        precondition(records.count == count, "a snapshot page holds \(records.count) records, its manifest says \(count)")
        return records
    }

    var records: [(key: String, value: Value)] {
        storage.withLock { storage in
            let records: [(key: String, value: Value)]
            switch storage {
            case .decoded(let records):
                return records
            case .encoded(let compressed, let reader):
                records = whole(decoded { try LZ4.decompressStored(compressed, originalSize: rawSize, "a snapshot page") }, reader)
            case .indexed(let raw, _, let reader, _):
                records = whole(raw, reader)
            }
            storage = .decoded(records)
            return records
        }
    }

    /// Decompresses the page and reads its keys (with record lengths), or decodes it whole
    /// (without), for a lookup coming on another thread.
    func prepare() {
        storage.withLock { open(&$0) }
    }

    /// An encoded page decompressed: indexed when it was written with record lengths, else decoded.
    private func open(_ storage: inout Storage) {
        guard case .encoded(let compressed, let reader) = storage else { return }
        let raw = decoded { try LZ4.decompressStored(compressed, originalSize: rawSize, "a snapshot page") }
        if let index = decoded({ try raw.withUnsafeBytes { buffer throws(BinaryReader.Failure) in try SnapshotCodec.pageIndex(buffer) } }) {
            precondition(index.keys.count == count, "a snapshot page holds \(index.keys.count) records, its manifest says \(count)")
            storage = .indexed(raw, index, reader, lookups: 0)
        } else {
            storage = .decoded(whole(raw, reader))
        }
    }

    /// Lookups an indexed page serves one record at a time before it is decoded whole: a page
    /// read many times (an open ledger's time travel to one seq after another reads the same
    /// pages again) then costs a search, not a decode per lookup; one read a few times (a state
    /// loaded once) never decodes the records nobody asked for. A quarter of its records: decoding
    /// them one by one costs about what decoding the page does.
    private var wholeAfter: Int { max(16, count / 4) }

    /// The record `id`, decoding only it when the page was written with each record's length;
    /// otherwise every record (decoded now if they were not), for the page to search.
    func lookup(_ id: String) -> RecordLookup<Value> {
        storage.withLock { storage -> RecordLookup<Value> in
            open(&storage)
            if case .indexed(let raw, _, let reader, let lookups) = storage, lookups >= wholeAfter { storage = .decoded(whole(raw, reader)) }
            switch storage {
            case .decoded(let records):
                return .records(records)
            case .indexed(let raw, let index, let reader, let lookups):
                storage = .indexed(raw, index, reader, lookups: lookups + 1)
                guard let i = RecordPage<Value>.position(of: id, count: index.keys.count, key: { index.keys[$0] }) else { return .found(nil) }
                let value: Value = decoded {
                    try raw.withUnsafeBytes { buffer throws(BinaryReader.Failure) in try SnapshotCodec.decodeRecord(buffer, index, i, reader).value }
                }
                return .found(value)
            case .encoded:
                preconditionFailure("a page read above")
            }
        }
    }
}

/// Transaction and download pages already loaded, by address, so loading another snapshot that
/// shares them (consecutive snapshots share most pages) neither reads, checks nor decodes them
/// again. A page's bytes never change under its address, so nothing here goes stale. Bounded:
/// past `limit` pages, the least recently used half is dropped.
final class SnapshotPageCache: Sendable {
    private struct Entry<V: Sendable> {
        var page: StoredRecordPage<V>
        var used: UInt64
    }

    private struct Pages {
        var transactions: [[UInt8]: Entry<TransactionRecord>] = [:]
        var downloads: [[UInt8]: Entry<DownloadRecord>] = [:]
        var clock: UInt64 = 0
        var count: Int { transactions.count + downloads.count }

        mutating func tick() -> UInt64 {
            clock += 1
            return clock
        }

        /// Drops the least recently used pages until at most `keep` remain, and returns them.
        mutating func shrink(to keep: Int) -> Dropped {
            guard count > keep else { return Dropped() }
            let uses = (transactions.values.map(\.used) + downloads.values.map(\.used)).sorted(by: >)
            let cutoff = uses[keep]
            let dropped = Dropped(
                transactions: transactions.values.filter { $0.used <= cutoff }.map(\.page),
                downloads: downloads.values.filter { $0.used <= cutoff }.map(\.page))
            transactions = transactions.filter { $0.value.used > cutoff }
            downloads = downloads.filter { $0.value.used > cutoff }
            return dropped
        }
    }

    /// Pages dropped from the cache. Freeing a decoded page frees its records one by one, which
    /// for half the cache takes long enough to show in the call that dropped them; so they are
    /// released on a background queue instead.
    private struct Dropped: Sendable {
        var transactions: [StoredRecordPage<TransactionRecord>] = []
        var downloads: [StoredRecordPage<DownloadRecord>] = []

        consuming func releaseInBackground() {
            guard !transactions.isEmpty || !downloads.isEmpty else { return }
            PurchaseLedger.releaseInBackground(self)
        }
    }

    private let pages = Locked(Pages())
    let limit: Int
    /// Snapshots whose binding this ledger has checked against its chain, by seq, binding and
    /// manifest digest: time travel checks each snapshot once, not at every load.
    private let bound = Locked(Set<[UInt8]>())

    func isKnownBound(_ key: [UInt8]) -> Bool { bound.withLock { $0.contains(key) } }
    func rememberBound(_ key: [UInt8]) { bound.withLock { _ = $0.insert(key) } }

    init(limit: Int = 4096) {
        self.limit = limit
    }

    /// How many pages are cached.
    var count: Int { pages.withLock { $0.count } }

    /// Drops every cached page (after an erasure: they may hold erased values).
    func clear() {
        pages.withLock { p -> Dropped in
            let dropped = p.shrink(to: 0)
            return dropped
        }.releaseInBackground()
    }

    /// Whether a transaction or download page is cached under `address` (a later lookup may
    /// still miss it, if it is dropped in between).
    func holds(_ address: [UInt8]) -> Bool {
        pages.withLock { $0.transactions[address] != nil || $0.downloads[address] != nil }
    }

    func transactionPage(_ address: [UInt8], load: () throws -> StoredRecordPage<TransactionRecord>) rethrows -> StoredRecordPage<TransactionRecord> {
        try page(address, \.transactions, load)
    }

    func downloadPage(_ address: [UInt8], load: () throws -> StoredRecordPage<DownloadRecord>) rethrows -> StoredRecordPage<DownloadRecord> {
        try page(address, \.downloads, load)
    }

    /// Keeps the pages `state` holds its records in (say, those a snapshot just wrote), so a
    /// state loaded from that snapshot later finds them here.
    func remember(_ state: LedgerState) {
        pages.withLock { p -> Dropped in
            let now = p.tick()
            for case let page as StoredRecordPage<TransactionRecord> in (state.transactions.base?.pages ?? []).map(\.source) {
                p.transactions[page.address, default: Entry(page: page, used: now)].used = now
            }
            for case let page as StoredRecordPage<DownloadRecord> in (state.downloads.base?.pages ?? []).map(\.source) {
                p.downloads[page.address, default: Entry(page: page, used: now)].used = now
            }
            return p.count > limit ? p.shrink(to: limit / 2) : Dropped()
        }.releaseInBackground()
    }

    private func page<V>(
        _ address: [UInt8], _ kind: WritableKeyPath<Pages, [[UInt8]: Entry<V>]>,
        _ load: () throws -> StoredRecordPage<V>
    ) rethrows -> StoredRecordPage<V> {
        let cached = pages.withLock { p -> StoredRecordPage<V>? in
            let now = p.tick()
            guard let page = p[keyPath: kind][address]?.page else { return nil }
            p[keyPath: kind][address]!.used = now
            return page
        }
        if let cached { return cached }
        let page = try load()
        pages.withLock { p -> Dropped in
            let dropped = p.count >= limit ? p.shrink(to: limit / 2) : Dropped()
            p[keyPath: kind][address] = Entry(page: page, used: p.tick())
            return dropped
        }.releaseInBackground()
        return page
    }
}
