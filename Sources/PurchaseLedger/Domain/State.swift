/// A product and its content, the key of owned content and published versions.
public struct ContentKey: Sendable, Hashable, Comparable, Codable {
    /// The product id; `""` for an asset pack's entries (``AssetPacks``).
    public var product: String
    /// The content id (`content` in events; `assetpack:<pack>` for an asset pack).
    public var content: String

    /// The key of `content` of `product`.
    public init(product: String, content: String) {
        self.product = product
        self.content = content
    }

    /// Orders by product, then content: the order of ``LedgerState/ownedContent``.
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
    /// The registration in force: the product's latest `productRegistered`.
    public var registration: ProductRegistration
    /// When that registration was recorded (an identical registration again keeps this time).
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

/// A record the ledger keeps (``TransactionRecord``, ``DownloadRecord``): its ``Fields`` in a
/// copy-on-write box, read as properties of the record (`record.state`) through a key-path
/// subscript. A record is one pointer to copy, store or move.
@dynamicMemberLookup
public struct Record<RecordFields: Sendable & Hashable>: Sendable, Hashable {
    /// What the record holds: ``TransactionFields``, ``DownloadFields``.
    public typealias Fields = RecordFields

    // The fields live in a copy-on-write box (`CopyOnWrite`).
    private var storage: CopyOnWrite<Fields>

    init(fields: Fields) {
        storage = CopyOnWrite(fields)
    }

    /// All its fields, as one value (read in place: no copy unless kept).
    public var fields: Fields {
        _read { yield storage.value }
    }

    /// A field, read: `record.state`.
    @inline(__always) public subscript<Value>(dynamicMember field: KeyPath<Fields, Value>) -> Value {
        storage.value[keyPath: field]
    }

    /// A field, read or changed in place (the reducer's view).
    @inline(__always) package subscript<Value>(dynamicMember field: WritableKeyPath<Fields, Value>) -> Value {
        get { storage.value[keyPath: field] }
        _modify { yield &storage.value[keyPath: field] }
    }
}

// A record reflects as its fields (in a debugger, in `dump`, in a test's diff), not as the box
// that holds them.
extension Record: CustomReflectable {
    /// Its fields (in a debugger, in `dump`, in a test's diff), not the box that holds them.
    public var customMirror: Mirror { Mirror(reflecting: fields) }
}

/// Fields that count the events stored in their record's stream.
protocol StreamCounted {
    /// Events stored in its stream (`transaction:<id>`, `download:<id>`).
    var events: Int64 { get set }
}

extension Record where RecordFields: StreamCounted {
    /// Counts one more event in its stream (and the `earlier` ones stored before it existed).
    mutating func recordEvent(adopting earlier: Int64?) -> Int64 {
        storage.value.events += (earlier ?? 0) + 1
        return storage.value.events
    }
}

/// One transaction as the ledger knows it now.
public typealias TransactionRecord = Record<TransactionFields>

/// What the ledger records of a transaction: a ``TransactionRecord``'s fields.
public struct TransactionFields: Sendable, Hashable, StreamCounted {
    /// Its id (`transaction` in events and in `replay --json`).
    public package(set) var transaction: String
    /// The product it buys or restores.
    public package(set) var product: String
    /// The user the queued payment, purchase or restore named; nil when none did.
    public package(set) var user: String?
    /// Units bought, 1...10 (`paymentQueued`'s `quantity`); 1 for a transaction first seen purchased
    /// or restored.
    public package(set) var quantity: Int
    /// Purchasing, deferred, purchased, failed or restored; ``finished`` and ``revoked`` are flags on top.
    public package(set) var state: TransactionStatus
    /// Whether the app finished it (`transactionFinished`): no download of it has a content URL since.
    public package(set) var finished: Bool = false
    /// Whether the store revoked it (`transactionRevoked`: a refund, a Family Sharing revocation...): it
    /// no longer grants its product.
    public package(set) var revoked: Bool = false
    /// The `reason` of its `transactionRevoked`; nil unless revoked.
    public package(set) var revocationReason: String?
    /// For a restore, the transaction it restores (`originalTransaction`); nil otherwise.
    public package(set) var originalTransaction: String?
    /// The store's own id of the transaction, when the purchase or restore reported one.
    public package(set) var storeTransactionId: String?
    /// The price paid, storefront, environment, ownership and offer, fixed when it was
    /// purchased or restored (contract 5.1).
    public package(set) var paid: PaidTerms = PaidTerms()
    /// Its downloads, in delivery order.
    public package(set) var downloads: [String] = []
    /// Why it failed (`transactionFailed`'s `error`); nil unless failed.
    public package(set) var error: StoreError?
    /// Whether it went through Ask to Buy.
    public package(set) var wasDeferred: Bool = false
    /// Whether finishing it discarded finished content that was never copied out.
    public package(set) var discardedContent: Bool = false
    /// When its payment was queued; nil for a transaction first seen purchased or restored.
    public package(set) var queuedAt: Timestamp?
    /// When it became purchased or restored.
    public package(set) var purchasedAt: Timestamp?
    /// When it failed; nil unless failed.
    public package(set) var failedAt: Timestamp?
    /// When the app finished it; nil until then.
    public package(set) var finishedAt: Timestamp?
    /// When the store revoked it; nil unless revoked.
    public package(set) var revokedAt: Timestamp?
    /// Events stored in its stream (`transaction:<id>`).
    public package(set) var events: Int64 = 0
}
extension Record where RecordFields == TransactionFields {
    init(transaction: String, product: String, user: String?, quantity: Int, state: TransactionStatus) {
        self.init(fields: Fields(transaction: transaction, product: product, user: user, quantity: quantity, state: state))
    }

    /// Purchased or restored, and not refunded: it grants its product.
    public var grantsOwnership: Bool { (self.state == .purchased || self.state == .restored) && !self.revoked }
}

/// One download as the ledger knows it now.
public typealias DownloadRecord = Record<DownloadFields>

/// What the ledger records of a download: a ``DownloadRecord``'s fields.
public struct DownloadFields: Sendable, Hashable, StreamCounted {
    /// Its id (`download` in events; `assetpack:<pack>@<version>` for an asset pack's version).
    public package(set) var download: String
    /// The owning transaction; nil for standalone content registered by URL.
    public package(set) var transaction: String?
    /// The registered URL, for standalone content.
    public package(set) var url: String?
    /// The content id it delivers; nil for content registered by URL (`contentRegistered`).
    public package(set) var content: String?
    /// The version of that content it delivers; nil for content registered by URL.
    public package(set) var contentVersion: ContentVersion?
    /// The content's size in bytes, as the purchase or `contentRegistered` gave it; nil when not given.
    public package(set) var contentLength: Int64?
    /// Waiting, active, paused, finished, failed or cancelled; ``started`` tells a download never started.
    public package(set) var state: DownloadStatus = .waiting
    /// False until the app first starts it.
    public package(set) var started: Bool = false
    /// The last progress reported, 0...1: 0 after a (re)start, 1 once finished, kept by a failure or
    /// cancel.
    public package(set) var progress: Double = 0
    /// Bytes written, as the last `downloadProgressed` said; nil when it did not say, and after a restart.
    public package(set) var bytesWritten: Int64?
    /// Seconds left (-1: unknown), as the last `downloadProgressed` said; nil when it did not say, and
    /// after a restart, a finish or a failure.
    public package(set) var timeRemaining: Double?
    /// Where the finished content is, until its transaction finishes. Never set after the finish.
    public package(set) var contentURL: String?
    /// Whether the app copied the finished content out (`contentCopiedOut`).
    public package(set) var copiedOut: Bool = false
    /// Where the app copied the content (`contentCopiedOut`'s `destination`); nil until then.
    public package(set) var destination: String?
    /// Bytes copied out, when `contentCopiedOut` said (`bytesCopied`); nil otherwise.
    public package(set) var bytesCopied: Int64?
    /// Finished content the app chose to drop at finish (`discardContent`).
    public package(set) var discarded: Bool = false
    /// Why it last failed (`downloadFailed`, `assetPackFailed`); cleared when it starts again.
    public package(set) var error: StoreError?
    /// Why it was cancelled: by the user, or by its transaction's early finish (then it is `lost`); nil
    /// unless cancelled, cleared when it starts again.
    public package(set) var cancelReason: CancelReason?
    /// Number of times it was started.
    public package(set) var attempts: Int = 0
    /// When its latest attempt started; nil when never started.
    public package(set) var startedAt: Timestamp?
    /// When the last progress, finish, failure, pause, resume or cancel happened.
    public package(set) var lastActivityAt: Timestamp?
    /// When it finished; nil until then.
    public package(set) var finishedAt: Timestamp?
    /// When its content was copied out; nil until then.
    public package(set) var copiedOutAt: Timestamp?
    /// Events stored in its stream (`download:<id>`).
    public package(set) var events: Int64 = 0
}
extension Record where RecordFields == DownloadFields {
    init(download: String, transaction: String?, url: String? = nil, content: String? = nil, contentVersion: ContentVersion? = nil, contentLength: Int64? = nil) {
        self.init(fields: Fields(download: download, transaction: transaction, url: url, content: content, contentVersion: contentVersion, contentLength: contentLength))
    }

    /// Content the user paid for and will not get: cancelled when its transaction finished early.
    public var lost: Bool { self.state == .cancelled && self.cancelReason == .transactionFinished }

    /// Started and not yet at rest: the states an early finish cancels.
    var inFlight: Bool { self.started && (self.state == .waiting || self.state == .active || self.state == .paused) }
}

/// The version of a product's content the app copied out last.
public struct OwnedContent: Sendable, Hashable {
    /// The owned product; `""` for an asset pack's version on the device.
    public var product: String
    /// The content id (`assetpack:<pack>` for an asset pack).
    public var content: String
    /// The version copied out (for an asset pack, the version on the device).
    public var contentVersion: ContentVersion
    /// Where the app copied it (`contentCopiedOut`'s `destination`); empty for an asset pack.
    public var destination: String
    /// The transaction whose download delivered it; empty for an asset pack.
    public var transaction: String
    /// The download it was copied out of.
    public var download: String
    /// When it was copied out (for an asset pack, when that version finished).
    public var copiedAt: Timestamp
}

/// Everything the ledger knows after some number of stored events: the result of the reducer.
///
/// A value: copy it freely. Produced by ``Reducer/reduce(_:_:)``, one event at a time.
///
/// ## Topics
///
/// ### Position in the log
/// - ``init()``
/// - ``seq``
/// - ``anomalies``
///
/// ### Catalog
/// - ``products``
/// - ``publishedVersions``
/// - ``relatedProducts(of:)``
///
/// ### Transactions and downloads
/// - ``transactions``
/// - ``downloads``
/// - ``registeredURLs``
/// - ``contentURL(for:)``
/// - ``restoreInProgress``
///
/// ### Ownership
/// - ``owns(product:)``
/// - ``ownedContent``
/// - ``copiedContent``
/// - ``updateAvailable(for:)``
///
/// ### Asset packs
/// - ``assetPacks()``
/// - ``assetPack(_:)``
///
/// ### Store product views
/// - ``productViews``
/// - ``productViews(item:)``
/// - ``productViewsOnScreen``
public struct LedgerState: Sendable, Hashable {
    /// The seq of the last stored event this state reflects (0 for an empty ledger).
    public internal(set) var seq: Int64 = 0
    /// The registered products, by product id.
    public internal(set) var products: [String: ProductRecord] = [:]
    /// The highest version ever published, per product and content.
    public internal(set) var publishedVersions: [ContentKey: ContentVersion] = [:]
    /// Every transaction the ledger knows, by transaction id.
    public internal(set) var transactions = RecordMap<TransactionRecord>()
    /// Every download, by download id: a purchase's, content registered by URL, asset pack versions.
    public internal(set) var downloads = RecordMap<DownloadRecord>()
    /// The latest copy-out per product and content, owned or not; see ``ownedContent``.
    public internal(set) var copiedContent: [ContentKey: OwnedContent] = [:]
    /// Standalone downloads by registered URL.
    public internal(set) var registeredURLs = RecordMap<String>()
    /// Every store product view presented (or reported), by the app's view id.
    public internal(set) var productViews: [String: ProductViewRecord] = [:]
    /// The store product view on screen now, if any (there is at most one: a presentation
    /// replaces the view on screen). Derived from ``productViews``, kept so that a presentation
    /// does not look through every view the ledger ever held.
    var productViewOnScreen: String?
    /// Whether a `restoreStarted` still waits for its `restoreCompleted` or `restoreFailed`.
    public internal(set) var restoreInProgress: Bool = false
    /// The user the latest `restoreStarted` named: whose personal data its `restoreFailed`
    /// message is (erased with them). Kept after the restore ends, because an event's values are
    /// assigned their owner with the state after it. Nil before any restore, or when it named none.
    var restoreUser: String?
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

    /// An empty state: the state of a ledger before its first event (``seq`` 0).
    public init() {}

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
