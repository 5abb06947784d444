/// A product and its content, the key of owned content and published versions.
public struct ContentKey: Sendable, Hashable, Comparable, Codable {
    public var product: String
    public var content: String

    public init(product: String, content: String) {
        self.product = product
        self.content = content
    }

    public static func < (a: ContentKey, b: ContentKey) -> Bool {
        (a.product, a.content) < (b.product, b.content)
    }
}

/// The states of a payment-queue transaction. `finished` and `revoked` are flags on top.
public enum TransactionStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case purchasing, deferred, purchased, failed, restored
}

/// The states of a download. A download never started is `waiting` with `started == false`.
public enum DownloadStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case waiting, active, paused, finished, failed, cancelled
}

/// A registered product, with when it was (last) registered.
public struct ProductRecord: Sendable, Hashable {
    public var registration: ProductRegistration
    public var registeredAt: Timestamp
}

/// A record's fields in a copy-on-write box: a record is one pointer to copy, store or move, and
/// is changed in place when nothing else shares it. Two are equal when they share a box or their
/// fields are equal.
struct CopyOnWrite<Fields: Sendable & Hashable>: Sendable, Hashable {
    // A ManagedBuffer's header is reached through a pointer, so reading and changing it skips the
    // dynamic exclusivity checks a class's stored property costs on every access.
    final class Box: ManagedBuffer<Fields, UInt8> {
        static func make(_ fields: Fields) -> Box {
            unsafeDowncast(Box.create(minimumCapacity: 0) { _ in fields }, to: Box.self)
        }

        /// The fields, in place for as long as the box lives (a header never moves).
        @inline(__always) var fields: UnsafeMutablePointer<Fields> { withUnsafeMutablePointerToHeader { $0 } }
    }

    // ManagedBuffer is never Sendable; the box is, as this value type uses it: a shared box is
    // only read, and changed only once isKnownUniquelyReferenced says nothing else holds it.
    nonisolated(unsafe) private var box: Box

    init(_ fields: Fields) {
        box = Box.make(fields)
    }

    var value: Fields {
        _read { yield box.fields.pointee }
        _modify {
            if !isKnownUniquelyReferenced(&box) { box = Box.make(box.fields.pointee) }
            yield &box.fields.pointee
        }
    }

    static func == (a: CopyOnWrite, b: CopyOnWrite) -> Bool { a.box === b.box || a.value == b.value }
    func hash(into hasher: inout Hasher) { hasher.combine(value) }
}

/// One transaction as the ledger knows it now.
public struct TransactionRecord: Sendable, Hashable {
    // The fields live in a copy-on-write box (`CopyOnWrite`).
    struct Fields: Sendable, Hashable {
        var transaction: String
        var product: String
        var user: String?
        var quantity: Int
        var state: TransactionStatus
        var finished: Bool = false
        var revoked: Bool = false
        var revocationReason: String?
        var originalTransaction: String?
        var storeTransactionId: String?
        var downloads: [String] = []
        var error: StoreError?
        var wasDeferred: Bool = false
        var discardedContent: Bool = false
        var queuedAt: Timestamp?
        var purchasedAt: Timestamp?
        var failedAt: Timestamp?
        var finishedAt: Timestamp?
        var revokedAt: Timestamp?
        var events: Int64 = 0
    }

    private var storage: CopyOnWrite<Fields>

    init(transaction: String, product: String, user: String?, quantity: Int, state: TransactionStatus) {
        storage = CopyOnWrite(Fields(transaction: transaction, product: product, user: user, quantity: quantity, state: state))
    }

    var fields: Fields {
        _read { yield storage.value }
        _modify { yield &storage.value }
    }

    public var transaction: String {
        get { storage.value.transaction }
        _modify { yield &fields.transaction }
    }
    public var product: String {
        get { storage.value.product }
        _modify { yield &fields.product }
    }
    public var user: String? {
        get { storage.value.user }
        _modify { yield &fields.user }
    }
    public var quantity: Int {
        get { storage.value.quantity }
        _modify { yield &fields.quantity }
    }
    public var state: TransactionStatus {
        get { storage.value.state }
        _modify { yield &fields.state }
    }
    public var finished: Bool {
        get { storage.value.finished }
        _modify { yield &fields.finished }
    }
    public var revoked: Bool {
        get { storage.value.revoked }
        _modify { yield &fields.revoked }
    }
    public var revocationReason: String? {
        get { storage.value.revocationReason }
        _modify { yield &fields.revocationReason }
    }
    public var originalTransaction: String? {
        get { storage.value.originalTransaction }
        _modify { yield &fields.originalTransaction }
    }
    public var storeTransactionId: String? {
        get { storage.value.storeTransactionId }
        _modify { yield &fields.storeTransactionId }
    }
    /// Its downloads, in delivery order.
    public var downloads: [String] {
        get { storage.value.downloads }
        _modify { yield &fields.downloads }
    }
    public var error: StoreError? {
        get { storage.value.error }
        _modify { yield &fields.error }
    }
    /// Whether it went through Ask to Buy.
    public var wasDeferred: Bool {
        get { storage.value.wasDeferred }
        _modify { yield &fields.wasDeferred }
    }
    /// Whether finishing it discarded finished content that was never copied out.
    public var discardedContent: Bool {
        get { storage.value.discardedContent }
        _modify { yield &fields.discardedContent }
    }
    public var queuedAt: Timestamp? {
        get { storage.value.queuedAt }
        _modify { yield &fields.queuedAt }
    }
    /// When it became purchased or restored.
    public var purchasedAt: Timestamp? {
        get { storage.value.purchasedAt }
        _modify { yield &fields.purchasedAt }
    }
    public var failedAt: Timestamp? {
        get { storage.value.failedAt }
        _modify { yield &fields.failedAt }
    }
    public var finishedAt: Timestamp? {
        get { storage.value.finishedAt }
        _modify { yield &fields.finishedAt }
    }
    public var revokedAt: Timestamp? {
        get { storage.value.revokedAt }
        _modify { yield &fields.revokedAt }
    }
    /// Events stored in its stream (`transaction:<id>`).
    public var events: Int64 {
        get { storage.value.events }
        _modify { yield &fields.events }
    }

    /// Purchased or restored, and not refunded: it grants its product.
    public var grantsOwnership: Bool { (state == .purchased || state == .restored) && !revoked }

}

/// One download as the ledger knows it now.
public struct DownloadRecord: Sendable, Hashable {
    // The fields live in a copy-on-write box (`CopyOnWrite`).
    struct Fields: Sendable, Hashable {
        var download: String
        var transaction: String?
        var url: String?
        var content: String?
        var contentVersion: ContentVersion?
        var contentLength: Int64?
        var state: DownloadStatus = .waiting
        var started: Bool = false
        var progress: Double = 0
        var bytesWritten: Int64?
        var timeRemaining: Double?
        var contentURL: String?
        var copiedOut: Bool = false
        var destination: String?
        var bytesCopied: Int64?
        var discarded: Bool = false
        var error: StoreError?
        var cancelReason: CancelReason?
        var attempts: Int = 0
        var startedAt: Timestamp?
        var lastActivityAt: Timestamp?
        var finishedAt: Timestamp?
        var copiedOutAt: Timestamp?
        var events: Int64 = 0
    }

    private var storage: CopyOnWrite<Fields>

    init(download: String, transaction: String?, url: String? = nil, content: String? = nil, contentVersion: ContentVersion? = nil, contentLength: Int64? = nil) {
        storage = CopyOnWrite(Fields(download: download, transaction: transaction, url: url, content: content, contentVersion: contentVersion, contentLength: contentLength))
    }

    var fields: Fields {
        _read { yield storage.value }
        _modify { yield &storage.value }
    }

    public var download: String {
        get { storage.value.download }
        _modify { yield &fields.download }
    }
    /// The owning transaction; nil for standalone content registered by URL.
    public var transaction: String? {
        get { storage.value.transaction }
        _modify { yield &fields.transaction }
    }
    /// The registered URL, for standalone content.
    public var url: String? {
        get { storage.value.url }
        _modify { yield &fields.url }
    }
    public var content: String? {
        get { storage.value.content }
        _modify { yield &fields.content }
    }
    public var contentVersion: ContentVersion? {
        get { storage.value.contentVersion }
        _modify { yield &fields.contentVersion }
    }
    public var contentLength: Int64? {
        get { storage.value.contentLength }
        _modify { yield &fields.contentLength }
    }
    public var state: DownloadStatus {
        get { storage.value.state }
        _modify { yield &fields.state }
    }
    /// False until the app first starts it.
    public var started: Bool {
        get { storage.value.started }
        _modify { yield &fields.started }
    }
    public var progress: Double {
        get { storage.value.progress }
        _modify { yield &fields.progress }
    }
    public var bytesWritten: Int64? {
        get { storage.value.bytesWritten }
        _modify { yield &fields.bytesWritten }
    }
    public var timeRemaining: Double? {
        get { storage.value.timeRemaining }
        _modify { yield &fields.timeRemaining }
    }
    /// Where the finished content is, until its transaction finishes. Never set after the finish.
    public var contentURL: String? {
        get { storage.value.contentURL }
        _modify { yield &fields.contentURL }
    }
    public var copiedOut: Bool {
        get { storage.value.copiedOut }
        _modify { yield &fields.copiedOut }
    }
    public var destination: String? {
        get { storage.value.destination }
        _modify { yield &fields.destination }
    }
    public var bytesCopied: Int64? {
        get { storage.value.bytesCopied }
        _modify { yield &fields.bytesCopied }
    }
    /// Finished content the app chose to drop at finish (`discardContent`).
    public var discarded: Bool {
        get { storage.value.discarded }
        _modify { yield &fields.discarded }
    }
    public var error: StoreError? {
        get { storage.value.error }
        _modify { yield &fields.error }
    }
    public var cancelReason: CancelReason? {
        get { storage.value.cancelReason }
        _modify { yield &fields.cancelReason }
    }
    /// Number of times it was started.
    public var attempts: Int {
        get { storage.value.attempts }
        _modify { yield &fields.attempts }
    }
    public var startedAt: Timestamp? {
        get { storage.value.startedAt }
        _modify { yield &fields.startedAt }
    }
    /// When the last progress, finish, failure, pause, resume or cancel happened.
    public var lastActivityAt: Timestamp? {
        get { storage.value.lastActivityAt }
        _modify { yield &fields.lastActivityAt }
    }
    public var finishedAt: Timestamp? {
        get { storage.value.finishedAt }
        _modify { yield &fields.finishedAt }
    }
    public var copiedOutAt: Timestamp? {
        get { storage.value.copiedOutAt }
        _modify { yield &fields.copiedOutAt }
    }
    /// Events stored in its stream (`download:<id>`).
    public var events: Int64 {
        get { storage.value.events }
        _modify { yield &fields.events }
    }

    /// Content the user paid for and will not get: cancelled when its transaction finished early.
    public var lost: Bool { state == .cancelled && cancelReason == .transactionFinished }

    /// Started and not yet at rest: the states an early finish cancels.
    var inFlight: Bool { started && (state == .waiting || state == .active || state == .paused) }

}

extension TransactionRecord {
    mutating func recordEvent(adopting earlier: Int64?) -> Int64 {
        events += (earlier ?? 0) + 1
        return events
    }
}

extension DownloadRecord {
    mutating func recordEvent(adopting earlier: Int64?) -> Int64 {
        events += (earlier ?? 0) + 1
        return events
    }
}

/// The version of a product's content the app copied out last.
public struct OwnedContent: Sendable, Hashable {
    public var product: String
    public var content: String
    public var contentVersion: ContentVersion
    public var destination: String
    public var transaction: String
    public var download: String
    public var copiedAt: Timestamp
}

/// Everything the ledger knows after some number of stored events: the result of the reducer.
///
/// A value: copy it freely. Produced by ``Reducer/reduce(_:_:)``, one event at a time.
public struct LedgerState: Sendable, Hashable {
    /// The seq of the last stored event this state reflects (0 for an empty ledger).
    public internal(set) var seq: Int64 = 0
    public internal(set) var products: [String: ProductRecord] = [:]
    /// The highest version ever published, per product and content.
    public internal(set) var publishedVersions: [ContentKey: ContentVersion] = [:]
    public internal(set) var transactions = RecordMap<TransactionRecord>()
    public internal(set) var downloads = RecordMap<DownloadRecord>()
    /// The latest copy-out per product and content, owned or not; see ``ownedContent``.
    public internal(set) var copiedContent: [ContentKey: OwnedContent] = [:]
    /// Standalone downloads by registered URL.
    public internal(set) var registeredURLs: [String: String] = [:]
    public internal(set) var restoreInProgress: Bool = false
    /// How many stored events were flagged as anomalies.
    public internal(set) var anomalies: Int = 0
    /// Granting transactions per product.
    var owners: [String: Int] = [:]
    /// Events stored in the `catalog` and `restore` streams, and in streams of ids the ledger has
    /// no record of (an anomalous purchase of an unknown product). Transactions and downloads
    /// count their own.
    var catalogEvents: Int64 = 0
    var restoreEvents: Int64 = 0
    var orphanStreamEvents: [String: Int64] = [:]

    public init() {}

    /// Counts one more stored event in the stream of `body`, and returns its version there.
    mutating func recordStreamEvent(_ body: EventBody) -> Int64 {
        if let t = body.transactionID {
            if orphanStreamEvents.isEmpty, let version = transactions.update(t, { $0.recordEvent(adopting: nil) }) { return version }
            guard transactions.contains(t) else { return orphan("transaction:" + t) }
            let adopted = orphanStreamEvents.removeValue(forKey: "transaction:" + t)
            return transactions.update(t) { $0.recordEvent(adopting: adopted) }!
        }
        if let d = body.downloadID {
            if orphanStreamEvents.isEmpty, let version = downloads.update(d, { $0.recordEvent(adopting: nil) }) { return version }
            guard downloads.contains(d) else { return orphan("download:" + d) }
            let adopted = orphanStreamEvents.removeValue(forKey: "download:" + d)
            return downloads.update(d) { $0.recordEvent(adopting: adopted) }!
        }
        if case .restore = body.subject {
            restoreEvents += 1
            return restoreEvents
        }
        catalogEvents += 1
        return catalogEvents
    }

    /// Events stored so far in the stream of `body`.
    func streamVersion(of body: EventBody) -> Int64 {
        if let t = body.transactionID { return transactions[t]?.events ?? orphanStreamEvents["transaction:" + t] ?? 0 }
        if let d = body.downloadID { return downloads[d]?.events ?? orphanStreamEvents["download:" + d] ?? 0 }
        switch body.subject {
        case .transaction, .download, .catalog: return catalogEvents
        case .restore: return restoreEvents
        }
    }

    private mutating func orphan(_ stream: String) -> Int64 {
        orphanStreamEvents[stream, default: 0] += 1
        return orphanStreamEvents[stream]!
    }

    /// Whether a purchased or restored, not revoked transaction grants `product`, itself or
    /// through a related product (declared on either side, not transitively).
    public func owns(product: String) -> Bool {
        if owners[product, default: 0] > 0 { return true }
        return relatedProducts(of: product).contains { owners[$0, default: 0] > 0 }
    }

    /// Products related to `product`, declared on either side.
    public func relatedProducts(of product: String) -> Set<String> {
        var related = Set(products[product]?.registration.relatedProducts ?? [])
        for (other, record) in products where record.registration.relatedProducts.contains(product) {
            related.insert(other)
        }
        related.remove(product)
        return related
    }

    /// The owned content versions: the latest copy-out of each product the user owns now.
    public var ownedContent: [OwnedContent] {
        copiedContent.keys.sorted().compactMap { key in
            owns(product: key.product) ? copiedContent[key] : nil
        }
    }

    /// True when a version newer than the owned one was published for that product and content.
    public func updateAvailable(for key: ContentKey) -> Bool {
        guard let owned = copiedContent[key], let latest = publishedVersions[key] else { return false }
        return latest.isNewer(than: owned.contentVersion)
    }

    /// The content URL of a finished download whose transaction is not finished; nil otherwise.
    public func contentURL(for download: String) -> String? {
        guard let record = downloads[download], record.state == .finished else { return nil }
        if let t = record.transaction, transactions[t]?.finished == true { return nil }
        return record.contentURL
    }
}
