import Dispatch

/// The transactions or downloads of a ``LedgerState``, by id: reads like a dictionary, iterates in
/// id order.
///
/// A state rebuilt from a snapshot keeps the snapshot's records in pages that are decoded on first
/// use, with the records changed since kept apart. So the state at any point of a large ledger
/// comes back without decoding every record it holds, and a copy of a state shares its pages.
///
/// ```swift
/// let state = try ledger.state(atSeq: 120_000)
/// if let t = state.transactions["tx-0000042"] { print(t.state) }
/// for (id, download) in state.downloads where download.lost { print(id) }
/// ```
public struct RecordMap<Value: Sendable & Hashable>: Sendable {
    /// Records set since `base`, or all of them when there is no base.
    var changes: [RecordKey: Value] = [:]
    /// The records as of a snapshot, shared by every state loaded from it.
    var base: RecordPages<Value>? = nil
    /// Ids of `base` removed since.
    var removed: Set<RecordKey> = []
    /// Ids in `changes` that `base` does not hold.
    var added = 0

    public init() {}

    init(base: RecordPages<Value>) {
        self.base = base
    }

    /// The number of records.
    public var count: Int {
        guard let base else { return changes.count }
        return base.count - removed.count + added
    }

    public var isEmpty: Bool { count == 0 }

    /// The record for `id`, or nil. Setting nil removes it.
    public subscript(id: String) -> Value? {
        get {
            let key = RecordKey(id)
            if let value = changes[key] { return value }
            guard let base, removed.isEmpty || !removed.contains(key) else { return nil }
            return base.value(for: id)
        }
        _modify {
            let key = RecordKey(id)
            guard let base else {
                yield &changes[key]
                return
            }
            if changes[key] != nil {
                yield &changes[key]
                if changes[key] == nil {
                    if base.value(for: id) != nil { removed.insert(key) } else { added -= 1 }
                }
            } else if removed.isEmpty || !removed.contains(key), let value = base.value(for: id) {
                changes[key] = value
                yield &changes[key]
                if changes[key] == nil { removed.insert(key) }
            } else {
                yield &changes[key]
                if changes[key] != nil {
                    if removed.remove(key) == nil { added += 1 }
                }
            }
        }
    }

    /// Changes the record for `id` in place with one lookup, and returns what `body` returns; nil,
    /// without calling `body`, when there is no such record.
    @inline(__always)
    mutating func update<R>(_ id: String, _ body: (inout Value) throws -> R) rethrows -> R? {
        let key = RecordKey(id)
        if let i = changes.index(forKey: key) { return try body(&changes.values[i]) }
        guard let base, removed.isEmpty || !removed.contains(key), let value = base.value(for: id) else { return nil }
        changes[key] = value
        return try body(&changes[key]!)
    }

    /// Whether a record exists for `id`, without copying it.
    public func contains(_ id: String) -> Bool {
        let key = RecordKey(id)
        if changes[key] != nil { return true }
        guard let base, removed.isEmpty || !removed.contains(key) else { return false }
        return base.value(for: id) != nil
    }

    /// Every id, in order.
    public var keys: [String] { sortedElements.map(\.key) }

    /// Every record, in id order.
    public var values: [Value] { sortedElements.map(\.value) }

    /// A dictionary of `transform` applied to every record.
    public func mapValues<T>(_ transform: (Value) throws -> T) rethrows -> [String: T] {
        var result: [String: T] = [:]
        result.reserveCapacity(count)
        try forEachUnordered { id, value in result[id] = try transform(value) }
        return result
    }

    /// Every record, in no particular order: cheaper than iterating when the order does not matter.
    func forEachUnordered(_ body: (String, Value) throws -> Void) rethrows {
        if let base {
            for page in base.pages {
                for (id, value) in page.records where changes[RecordKey(id)] == nil && (removed.isEmpty || !removed.contains(RecordKey(id))) {
                    try body(id, value)
                }
            }
        }
        for (key, value) in changes { try body(key.id, value) }
    }

    /// Every record, in id order.
    var sortedElements: [(key: String, value: Value)] {
        var elements: [(key: String, value: Value)] = []
        elements.reserveCapacity(count)
        forEachUnordered { elements.append(($0, $1)) }
        elements.sort { $0.key < $1.key }
        return elements
    }

    /// The same records, with no changes apart from `base`: what a snapshot wrote.
    mutating func rebase(on pages: RecordPages<Value>) {
        self = RecordMap(base: pages)
    }
}

extension RecordMap: Sequence {
    public func makeIterator() -> IndexingIterator<[(key: String, value: Value)]> {
        sortedElements.makeIterator()
    }

    public var underestimatedCount: Int { count }
}

extension RecordMap: Hashable {
    public static func == (a: RecordMap, b: RecordMap) -> Bool {
        guard a.count == b.count else { return false }
        if a.base === b.base && a.removed == b.removed && a.changes == b.changes { return true }
        var equal = true
        a.forEachUnordered { id, value in
            if equal && b[id] != value { equal = false }
        }
        return equal
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
    }
}

extension RecordMap: ExpressibleByDictionaryLiteral {
    public init(dictionaryLiteral elements: (String, Value)...) {
        for (id, value) in elements { changes[RecordKey(id)] = value }
    }
}

extension RecordMap: CustomStringConvertible {
    public var description: String {
        "[" + sortedElements.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "]"
    }
}

/// The records of one kind as of a snapshot: pages sorted by id, each covering the ids from its
/// first one up to the next page's.
final class RecordPages<Value: Sendable>: Sendable {
    let pages: [RecordPage<Value>]
    let firstIDs: [String]
    let count: Int

    init(_ pages: [RecordPage<Value>]) {
        self.pages = pages
        firstIDs = pages.map(\.firstID)
        count = pages.reduce(0) { $0 + $1.count }
    }

    /// The index of the page whose range holds `id` (the first page for ids before every page).
    func pageIndex(for id: String) -> Int {
        var low = 0, high = firstIDs.count
        while low < high {
            let mid = (low + high) / 2
            if firstIDs[mid] <= id { low = mid + 1 } else { high = mid }
        }
        return max(0, low - 1)
    }

    func value(for id: String) -> Value? {
        guard !pages.isEmpty else { return nil }
        return pages[pageIndex(for: id)].value(for: id)
    }
}

/// One page of records: kept as stored (compressed) and decoded the first time it is read, or
/// built from records already in memory.
final class RecordPage<Value: Sendable>: Sendable {
    /// The SHA-256 of the stored bytes: the page's key in `snapshot_pages`.
    let address: [UInt8]
    let rawSize: Int
    let firstID: String
    let count: Int
    private let storage: Locked<Storage>

    enum Storage {
        case encoded([UInt8], @Sendable (UnsafeRawBufferPointer) throws -> [(key: String, value: Value)])
        case decoded([(key: String, value: Value)])
    }

    init(address: [UInt8], rawSize: Int, firstID: String, count: Int, storage: Storage) {
        self.address = address
        self.rawSize = rawSize
        self.firstID = firstID
        self.count = count
        self.storage = Locked(storage)
    }

    /// The records, sorted by id.
    var records: [(key: String, value: Value)] {
        storage.withLock { storage in
            switch storage {
            case .decoded(let records):
                return records
            case .encoded(let compressed, let decode):
                // The stored bytes were checked against `address` when the snapshot was loaded, so
                // a page that fails here was written wrong: a bug, not damage.
                let records: [(key: String, value: Value)]
                do {
                    let raw = try compressed.withUnsafeBytes { try LZ4.decompress($0, originalSize: rawSize) }
                    records = try raw.withUnsafeBytes { try decode($0) }
                } catch {
                    fatalError("a snapshot page that matched its SHA-256 does not decode (\(error)); please report this")
                }
                precondition(records.count == count, "a snapshot page holds \(records.count) records, its manifest says \(count)")
                storage = .decoded(records)
                return records
            }
        }
    }

    func value(for id: String) -> Value? {
        let records = self.records
        var low = 0, high = records.count
        while low < high {
            let mid = (low + high) / 2
            let key = records[mid].key
            if key == id { return records[mid].value }
            if key < id { low = mid + 1 } else { high = mid }
        }
        return nil
    }
}

/// Transaction and download pages already loaded, by address, so loading another snapshot that
/// shares them (consecutive snapshots share most pages) neither reads, checks nor decodes them
/// again. A page's bytes never change under its address, so nothing here goes stale. Bounded:
/// past `limit` pages, the least recently used half is dropped.
final class SnapshotPageCache: Sendable {
    private struct Entry<V: Sendable> {
        var page: RecordPage<V>
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
            let dropped = Dropped(transactions: transactions.values.filter { $0.used <= cutoff }.map(\.page),
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
        var transactions: [RecordPage<TransactionRecord>] = []
        var downloads: [RecordPage<DownloadRecord>] = []

        consuming func releaseInBackground() {
            guard !transactions.isEmpty || !downloads.isEmpty else { return }
            let pages = self
            DispatchQueue.global(qos: .utility).async { withExtendedLifetime(pages) {} }
        }
    }

    private let pages = Locked(Pages())
    let limit: Int

    init(limit: Int = 4096) {
        self.limit = limit
    }

    /// How many pages are cached.
    var count: Int { pages.withLock { $0.count } }

    func transactionPage(_ address: [UInt8], load: () throws -> RecordPage<TransactionRecord>) rethrows -> RecordPage<TransactionRecord> {
        try page(address, \.transactions, load)
    }

    func downloadPage(_ address: [UInt8], load: () throws -> RecordPage<DownloadRecord>) rethrows -> RecordPage<DownloadRecord> {
        try page(address, \.downloads, load)
    }

    /// Keeps the pages `state` holds its records in (say, those a snapshot just wrote), so a
    /// state loaded from that snapshot later finds them here.
    func remember(_ state: LedgerState) {
        pages.withLock { p -> Dropped in
            let now = p.tick()
            for page in state.transactions.base?.pages ?? [] {
                p.transactions[page.address, default: Entry(page: page, used: now)].used = now
            }
            for page in state.downloads.base?.pages ?? [] {
                p.downloads[page.address, default: Entry(page: page, used: now)].used = now
            }
            return p.count > limit ? p.shrink(to: limit / 2) : Dropped()
        }.releaseInBackground()
    }

    private func page<V>(_ address: [UInt8], _ kind: WritableKeyPath<Pages, [[UInt8]: Entry<V>]>,
                         _ load: () throws -> RecordPage<V>) rethrows -> RecordPage<V> {
        let cached = pages.withLock { p -> RecordPage<V>? in
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
