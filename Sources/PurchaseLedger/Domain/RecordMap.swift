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
    /// How the snapshot `base` came from stored its overlay, for the next snapshot to build on:
    /// the snapshot layer's note (`Persistence/Snapshots/StoredOverlay.swift`), never read here.
    var stored: StoredOverlay<Value>? = nil

    /// An empty map.
    public init() {}

    /// The number of records.
    public var count: Int {
        guard let base else { return changes.count }
        return base.count - removed.count + added
    }

    /// Whether the map holds no record.
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
}

extension RecordMap {
    /// The map's stored pages, for making ready on another thread, ahead of a reader, the pages its
    /// lookups will read (``LogReplay/prefetcher(_:)``): the pages are immutable and each is
    /// made ready under its lock, and the ids changed or removed when this was taken, which a
    /// lookup finds without the pages, are left alone. Nil when the map has no stored pages.
    struct PageReader: Sendable {
        let pages: RecordPages<Value>
        let skipped: Set<RecordKey>

        /// The stored record `id` (decoding its page), or nil: none, or one a lookup finds elsewhere.
        func value(for id: String) -> Value? {
            skipped.contains(RecordKey(id)) ? nil : pages.value(for: id)
        }

        /// Makes ready the page a lookup of `id` reads (unless a lookup finds it elsewhere).
        func prepare(for id: String) {
            guard !pages.pages.isEmpty, !skipped.contains(RecordKey(id)) else { return }
            pages.pages[pages.pageIndex(for: id)].source?.prepare()
        }
    }

    var pageReader: PageReader? {
        base.map { PageReader(pages: $0, skipped: removed.union(changes.keys)) }
    }
}

extension RecordMap: Sequence {
    /// Iterates over `(key: id, value: record)` pairs in id order (every record, sorted first).
    public func makeIterator() -> IndexingIterator<[(key: String, value: Value)]> {
        sortedElements.makeIterator()
    }

    /// The number of records: exact, not an estimate.
    public var underestimatedCount: Int { count }
}

// Reflects as a dictionary in id order, whether its records are in snapshot pages or changed
// since: two equal maps look the same in a debugger, in `dump` and in a test's diff.
extension RecordMap: CustomReflectable {
    /// A dictionary in id order, whether the records are in snapshot pages or changed since.
    public var customMirror: Mirror {
        Mirror(self, unlabeledChildren: sortedElements.map { (key: $0.key, value: $0.value) }, displayStyle: .dictionary)
    }
}

extension RecordMap: Hashable {
    /// Whether both maps hold equal records under the same ids, wherever each keeps them (snapshot
    /// pages or changes since).
    public static func == (a: RecordMap, b: RecordMap) -> Bool {
        guard a.count == b.count else { return false }
        if a.base === b.base && a.removed == b.removed && a.changes == b.changes { return true }
        var equal = true
        a.forEachUnordered { id, value in
            if equal && b[id] != value { equal = false }
        }
        return equal
    }

    /// Hashes the number of records only, so hashing never decodes a snapshot's pages.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(count)
    }
}

extension RecordMap: ExpressibleByDictionaryLiteral {
    /// A map of the given ids and records; an id given twice keeps its last record.
    public init(dictionaryLiteral elements: (String, Value)...) {
        for (id, value) in elements { changes[RecordKey(id)] = value }
    }
}

extension RecordMap: CustomStringConvertible {
    /// The records in id order, as `[id: record, ...]`.
    public var description: String {
        "[" + sortedElements.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "]"
    }
}

/// The records of one kind shared by every state rebuilt from the same snapshot: pages sorted by
/// id, each covering the ids from its first one up to the next page's.
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

/// Where the records of a page not held in memory come from, when first read: implemented by the
/// layer that stores pages (snapshots: `StoredRecordPage`), so the domain knows no storage form.
/// `records` may be called from any thread (a replay's decoding thread reads pages ahead of the
/// reducer), so a source holds its bytes already and never reads the database there.
protocol RecordPageSource<Value>: Sendable {
    associatedtype Value: Sendable
    /// The records, sorted by id. A source checks its bytes when it is made (a snapshot page
    /// against its address), so reading them cannot meet damage here.
    var records: [(key: String, value: Value)] { get }
    /// The record `id`, when the source finds it without decoding the others; otherwise the
    /// records, which the page searches (there, the search is specialized for the record type).
    func lookup(_ id: String) -> RecordLookup<Value>
    /// Does now what the first lookup would do before it finds a record (read ahead on another
    /// thread), without decoding a record it may not be asked for.
    func prepare()
}

/// What a ``RecordPageSource`` gives for one id.
enum RecordLookup<Value: Sendable> {
    /// The record, or nil: there is none.
    case found(Value?)
    /// Every record, sorted by id, to search.
    case records([(key: String, value: Value)])
}

extension RecordPageSource {
    func lookup(_ id: String) -> RecordLookup<Value> { .records(records) }
    func prepare() { _ = records }
}

/// A run of records sorted by id, shared by every state that holds it: in memory, or read from
/// its ``RecordPageSource`` on first use.
final class RecordPage<Value: Sendable>: Sendable {
    let firstID: String
    let count: Int
    private let held: [(key: String, value: Value)]
    /// Where the records are when they are not `held`.
    let source: (any RecordPageSource<Value>)?

    /// A page of records already in memory, sorted by id.
    init(records: [(key: String, value: Value)]) {
        firstID = records.first?.key ?? ""
        count = records.count
        held = records
        source = nil
    }

    /// A page whose records `source` gives, later.
    init(firstID: String, count: Int, source: any RecordPageSource<Value>) {
        self.firstID = firstID
        self.count = count
        held = []
        self.source = source
    }

    /// The records, sorted by id.
    var records: [(key: String, value: Value)] { source?.records ?? held }

    func value(for id: String) -> Value? {
        guard let source else { return RecordPage.search(held, id) }
        switch source.lookup(id) {
        case .found(let value): return value
        case .records(let records): return RecordPage.search(records, id)
        }
    }

    /// The record `id` among `records`, sorted by id.
    static func search(_ records: [(key: String, value: Value)], _ id: String) -> Value? {
        position(of: id, count: records.count) { records[$0].key }.map { records[$0].value }
    }

    /// Where `id` is among `count` ids sorted by id, the `i`th being `key(i)`.
    @inline(__always) static func position(of id: String, count: Int, key: (Int) -> String) -> Int? {
        var low = 0, high = count
        while low < high {
            let mid = (low + high) / 2
            let k = key(mid)
            if k == id { return mid }
            if k < id { low = mid + 1 } else { high = mid }
        }
        return nil
    }
}
