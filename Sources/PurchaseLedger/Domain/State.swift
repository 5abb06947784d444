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

/// One transaction as the ledger knows it now.
public struct TransactionRecord: Sendable, Hashable {
    public var transaction: String
    public var product: String
    public var user: String?
    public var quantity: Int
    public var state: TransactionStatus
    public var finished: Bool = false
    public var revoked: Bool = false
    public var revocationReason: String?
    public var originalTransaction: String?
    public var storeTransactionId: String?
    /// Its downloads, in delivery order.
    public var downloads: [String] = []
    public var error: StoreError?
    /// Whether it went through Ask to Buy.
    public var wasDeferred: Bool = false
    /// Whether finishing it discarded finished content that was never copied out.
    public var discardedContent: Bool = false
    public var queuedAt: Timestamp?
    /// When it became purchased or restored.
    public var purchasedAt: Timestamp?
    public var failedAt: Timestamp?
    public var finishedAt: Timestamp?
    public var revokedAt: Timestamp?
    /// Events stored in its stream (`transaction:<id>`).
    public var events: Int64 = 0

    /// Purchased or restored, and not refunded: it grants its product.
    public var grantsOwnership: Bool { (state == .purchased || state == .restored) && !revoked }
}

/// One download as the ledger knows it now.
public struct DownloadRecord: Sendable, Hashable {
    public var download: String
    /// The owning transaction; nil for standalone content registered by URL.
    public var transaction: String?
    /// The registered URL, for standalone content.
    public var url: String?
    public var content: String?
    public var contentVersion: ContentVersion?
    public var contentLength: Int64?
    public var state: DownloadStatus = .waiting
    /// False until the app first starts it.
    public var started: Bool = false
    public var progress: Double = 0
    public var bytesWritten: Int64?
    public var timeRemaining: Double?
    /// Where the finished content is, until its transaction finishes. Never set after the finish.
    public var contentURL: String?
    public var copiedOut: Bool = false
    public var destination: String?
    public var bytesCopied: Int64?
    /// Finished content the app chose to drop at finish (`discardContent`).
    public var discarded: Bool = false
    public var error: StoreError?
    public var cancelReason: CancelReason?
    /// Number of times it was started.
    public var attempts: Int = 0
    public var startedAt: Timestamp?
    /// When the last progress, finish, failure, pause, resume or cancel happened.
    public var lastActivityAt: Timestamp?
    public var finishedAt: Timestamp?
    public var copiedOutAt: Timestamp?
    /// Events stored in its stream (`download:<id>`).
    public var events: Int64 = 0

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
    public internal(set) var transactions: [String: TransactionRecord] = [:]
    public internal(set) var downloads: [String: DownloadRecord] = [:]
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
            guard transactions[t] != nil else { return orphan("transaction:" + t) }
            return transactions[t]!.recordEvent(adopting: orphanStreamEvents.isEmpty ? nil : orphanStreamEvents.removeValue(forKey: "transaction:" + t))
        }
        if let d = body.downloadID {
            guard downloads[d] != nil else { return orphan("download:" + d) }
            return downloads[d]!.recordEvent(adopting: orphanStreamEvents.isEmpty ? nil : orphanStreamEvents.removeValue(forKey: "download:" + d))
        }
        switch body {
        case .restoreStarted, .restoreCompleted, .restoreFailed:
            restoreEvents += 1
            return restoreEvents
        default:
            catalogEvents += 1
            return catalogEvents
        }
    }

    /// Events stored so far in the stream of `body`.
    func streamVersion(of body: EventBody) -> Int64 {
        if let t = body.transactionID { return transactions[t]?.events ?? orphanStreamEvents["transaction:" + t] ?? 0 }
        if let d = body.downloadID { return downloads[d]?.events ?? orphanStreamEvents["download:" + d] ?? 0 }
        switch body {
        case .restoreStarted, .restoreCompleted, .restoreFailed: return restoreEvents
        default: return catalogEvents
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
