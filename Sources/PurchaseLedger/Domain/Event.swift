/// One thing that happened: what the app decided (a command) or what the store reported (an
/// observation), and when.
///
/// ```swift
/// let event = Event(at: try Timestamp.parse("2024-03-01T09:15:02.137Z"),
///                   .paymentQueued(transaction: "t1", product: "com.example.book1", quantity: 1, user: "u1"))
/// ```
///
/// ## Topics
///
/// ### Creating an event
/// - ``init(at:_:)``
///
/// ### What happened, and when
/// - ``at``
/// - ``body``
/// - ``type``
public struct Event: Sendable, Hashable {
    /// When it happened, as the device or store recorded it (`at`); never assumed to be in order.
    public var at: Timestamp
    /// What happened: its type and fields.
    public var body: EventBody

    /// The event `body`, happened at `at`.
    public init(at: Timestamp, _ body: EventBody) {
        self.at = at
        self.body = body
    }

    /// The event's type (`type`), with its stable code.
    public var type: EventType { body.type }
}

/// The events of the ledger contract. Each case's fields are the contract's fields.
///
/// A command (the app's decision) that breaks a rule is refused; an observation (what the store
/// reported) that makes no sense is stored all the same, flagged as an anomaly
/// (``EventType/isCommand``, docs/rules.md).
///
/// ## Topics
///
/// ### Catalog
/// - ``productRegistered(_:)``
/// - ``contentVersionPublished(product:content:contentVersion:)``
///
/// ### Payments and transactions
/// - ``paymentQueued(transaction:product:quantity:user:)``
/// - ``transactionDeferred(transaction:)``
/// - ``transactionPurchased(transaction:product:user:storeTransactionId:downloads:terms:)``
/// - ``transactionFailed(transaction:error:)``
/// - ``transactionRestored(transaction:originalTransaction:product:user:storeTransactionId:downloads:terms:)``
/// - ``transactionRevoked(transaction:reason:signedTransaction:)``
/// - ``transactionFinished(transaction:discardContent:)``
/// - ``storePaymentPromoted(product:accepted:)``
///
/// ### Downloads and content
/// - ``downloadStarted(download:)``
/// - ``downloadProgressed(download:progress:bytesWritten:timeRemaining:)``
/// - ``downloadPaused(download:)``
/// - ``downloadResumed(download:)``
/// - ``downloadCancelled(download:reason:)``
/// - ``downloadFinished(download:contentURL:)``
/// - ``downloadFailed(download:error:)``
/// - ``contentCopiedOut(download:destination:checksum:bytesCopied:)``
/// - ``contentDeleted(product:)``
/// - ``contentRegistered(url:download:contentLength:)``
///
/// ### Restores
/// - ``restoreStarted(user:)``
/// - ``restoreCompleted``
/// - ``restoreFailed(error:)``
///
/// ### Asset packs
/// - ``assetPackPublished(pack:version:unlockedBy:)``
/// - ``assetPackBegan(pack:version:)``
/// - ``assetPackProgressed(pack:version:progress:)``
/// - ``assetPackPaused(pack:version:)``
/// - ``assetPackFinished(pack:version:)``
/// - ``assetPackFailed(pack:version:error:)``
/// - ``assetPackRemoved(pack:)``
/// - ``assetPackOpened(pack:version:)``
///
/// ### Store product views (in-app content display)
/// - ``storeProductViewPresented(view:item:style:affiliateToken:campaignToken:providerToken:)``
/// - ``storeProductViewLoaded(view:)``
/// - ``storeProductViewFailed(view:error:)``
/// - ``storeProductViewDismissed(view:)``
///
/// ### Apple's record
/// - ``appleTransactionReceived(signedTransaction:source:user:)``
/// - ``appleNotificationReceived(signedPayload:user:)``
/// - ``appleHistoryCompleted(revision:user:)``
///
/// ### Privacy
/// - ``personalDataErased(refs:)``
///
/// ### What an event is about
/// - ``type``
/// - ``subject``
/// - ``Subject``
/// - ``stream``
/// - ``transactionID``
/// - ``downloadID``
public enum EventBody: Sendable, Hashable {
    case productRegistered(ProductRegistration)
    case contentVersionPublished(product: String, content: String, contentVersion: ContentVersion)
    case paymentQueued(transaction: String, product: String, quantity: Int, user: String?)
    case transactionDeferred(transaction: String)
    /// `terms`: what the store reported was paid, where and by whom (contract 5.1; all optional).
    case transactionPurchased(
        transaction: String, product: String? = nil, user: String? = nil, storeTransactionId: String? = nil, downloads: [DownloadSpec]? = nil,
        terms: PurchaseTerms = .none)
    case transactionFailed(transaction: String, error: StoreError)
    case transactionRestored(
        transaction: String, originalTransaction: String, product: String, user: String? = nil, storeTransactionId: String? = nil,
        downloads: [DownloadSpec]? = nil, terms: PurchaseTerms = .none)
    /// `signedTransaction`: Apple's signed statement of the revocation (the transaction's JWS with
    /// its `revocationDate`), when the app has it.
    case transactionRevoked(transaction: String, reason: String, signedTransaction: String? = nil)
    case transactionFinished(transaction: String, discardContent: Bool)
    case downloadStarted(download: String)
    case downloadProgressed(download: String, progress: Double, bytesWritten: Int64?, timeRemaining: Double?)
    case downloadPaused(download: String)
    case downloadResumed(download: String)
    case downloadCancelled(download: String, reason: CancelReason)
    case downloadFinished(download: String, contentURL: String)
    case downloadFailed(download: String, error: StoreError)
    case contentCopiedOut(download: String, destination: String, checksum: String?, bytesCopied: Int64?)
    case contentDeleted(product: String)
    case restoreStarted(user: String?)
    case restoreCompleted
    case restoreFailed(error: StoreError)
    case contentRegistered(url: String, download: String, contentLength: Int64?)
    /// An Apple-hosted (or managed) asset pack at `version` is in the catalog, unlocked by any of
    /// `unlockedBy` (empty: free). A higher version later is an update (docs/storekit.md).
    case assetPackPublished(pack: String, version: Int, unlockedBy: [String])
    /// Background Assets' `DownloadStatusUpdate.began`: the download of `pack` at `version` began,
    /// or resumed after a pause.
    case assetPackBegan(pack: String, version: Int)
    case assetPackProgressed(pack: String, version: Int, progress: Double)
    case assetPackPaused(pack: String, version: Int)
    /// The pack is on the device at `version` and usable; an older version it replaces is gone.
    case assetPackFinished(pack: String, version: Int)
    case assetPackFailed(pack: String, version: Int, error: StoreError)
    /// The pack left the device (`remove(assetPackWithID:)`, or made obsolete by an update check).
    case assetPackRemoved(pack: String)
    /// The app opened the pack's files, needing at least `version`: refused unless that version
    /// finished, is still on the device and its unlocking purchase is in force.
    case assetPackOpened(pack: String, version: Int)
    /// StoreKit 1's `paymentQueue(_:shouldAddStorePayment:for:)`: a purchase started on the App
    /// Store (a promoted in-app purchase), and whether the app let it continue.
    case storePaymentPromoted(product: String, accepted: Bool)
    /// Appended by ``Ledger/forget(user:)``, never given: the personal values numbered `refs`
    /// were erased. It names no user, and no value (docs/storage.md, "Erasure").
    case personalDataErased(refs: [Int64])
    /// Apple's own record of a transaction, as the App Store Server API gave it (a history
    /// page's `signedTransactions`, or `getTransactionInfo`), verified when it was imported
    /// (``Ledger/importApple(_:verifier:at:)``). `user`: the ledger's user whose transaction it
    /// is, when the import matched one.
    case appleTransactionReceived(signedTransaction: String, source: AppleSource, user: String? = nil)
    /// An App Store Server Notification V2 (its `signedPayload`), verified when imported.
    case appleNotificationReceived(signedPayload: String, user: String? = nil)
    /// Every page of a user's transaction history down to `hasMore: false` was imported: Apple's
    /// record of `user`'s purchases is complete as of this event, the last page's `revision`.
    case appleHistoryCompleted(revision: String, user: String? = nil)
    /// The app put the App Store's page of another item on screen (`SKStoreProductViewController`
    /// as a sheet, `SKOverlay` as an overlay): `view`, the app's id for this presentation; `item`,
    /// the item's Apple ID (digits); the affiliate, campaign and provider tokens it passed.
    case storeProductViewPresented(
        view: String, item: String, style: ProductViewStyle, affiliateToken: String? = nil, campaignToken: String? = nil,
        providerToken: String? = nil)
    /// The page loaded (`loadProduct(withParameters:)`'s completion without an error; an overlay's
    /// `didFinishPresentation`).
    case storeProductViewLoaded(view: String)
    /// The page could not load (`loadProduct`'s error; `SKOverlayDelegate`'s `didFailToLoadWithError`).
    case storeProductViewFailed(view: String, error: StoreError)
    /// The page left the screen (`productViewControllerDidFinish`; an overlay's `didFinishDismissal`).
    /// The app is never told whether the user bought anything there.
    case storeProductViewDismissed(view: String)

    /// The type of this case (`type` in JSON).
    public var type: EventType {
        switch self {
        case .productRegistered: .productRegistered
        case .contentVersionPublished: .contentVersionPublished
        case .paymentQueued: .paymentQueued
        case .transactionDeferred: .transactionDeferred
        case .transactionPurchased: .transactionPurchased
        case .transactionFailed: .transactionFailed
        case .transactionRestored: .transactionRestored
        case .transactionRevoked: .transactionRevoked
        case .transactionFinished: .transactionFinished
        case .downloadStarted: .downloadStarted
        case .downloadProgressed: .downloadProgressed
        case .downloadPaused: .downloadPaused
        case .downloadResumed: .downloadResumed
        case .downloadCancelled: .downloadCancelled
        case .downloadFinished: .downloadFinished
        case .downloadFailed: .downloadFailed
        case .contentCopiedOut: .contentCopiedOut
        case .contentDeleted: .contentDeleted
        case .restoreStarted: .restoreStarted
        case .restoreCompleted: .restoreCompleted
        case .restoreFailed: .restoreFailed
        case .contentRegistered: .contentRegistered
        case .assetPackPublished: .assetPackPublished
        case .assetPackBegan: .assetPackBegan
        case .assetPackProgressed: .assetPackProgressed
        case .assetPackPaused: .assetPackPaused
        case .assetPackFinished: .assetPackFinished
        case .assetPackFailed: .assetPackFailed
        case .assetPackRemoved: .assetPackRemoved
        case .assetPackOpened: .assetPackOpened
        case .storePaymentPromoted: .storePaymentPromoted
        case .personalDataErased: .personalDataErased
        case .appleTransactionReceived: .appleTransactionReceived
        case .appleNotificationReceived: .appleNotificationReceived
        case .appleHistoryCompleted: .appleHistoryCompleted
        case .storeProductViewPresented: .storeProductViewPresented
        case .storeProductViewLoaded: .storeProductViewLoaded
        case .storeProductViewFailed: .storeProductViewFailed
        case .storeProductViewDismissed: .storeProductViewDismissed
        }
    }

    /// What an event is about, which decides its stream.
    public enum Subject: Sendable, Hashable {
        case transaction(String)
        case download(String)
        case restore
        case catalog
        /// Apple's record of the user's transactions (``EventBody/appleTransactionReceived(signedTransaction:source:user:)``...).
        case apple
        /// One presentation of a store product view (its `view` id).
        case productView(String)

        /// The stream's name: `transaction:<id>`, `download:<id>`, `restore`, `catalog`, `apple`
        /// or `productView:<id>`.
        public var stream: String {
            switch self {
            case .transaction(let t): "transaction:" + t
            case .download(let d): "download:" + d
            case .restore: "restore"
            case .catalog: "catalog"
            case .apple: "apple"
            case .productView(let v): "productView:" + v
            }
        }
    }

    /// What this event is about: one exhaustive switch, so a new event must say it.
    public var subject: Subject {
        switch self {
        case .paymentQueued(let t, _, _, _), .transactionDeferred(let t), .transactionPurchased(let t, _, _, _, _, _),
            .transactionFailed(let t, _), .transactionRestored(let t, _, _, _, _, _, _), .transactionRevoked(let t, _, _),
            .transactionFinished(let t, _):
            .transaction(t)
        case .downloadStarted(let d), .downloadProgressed(let d, _, _, _), .downloadPaused(let d), .downloadResumed(let d),
            .downloadCancelled(let d, _), .downloadFinished(let d, _), .downloadFailed(let d, _),
            .contentCopiedOut(let d, _, _, _), .contentRegistered(_, let d, _):
            .download(d)
        case .assetPackBegan(let p, let v), .assetPackProgressed(let p, let v, _), .assetPackPaused(let p, let v),
            .assetPackFinished(let p, let v), .assetPackFailed(let p, let v, _), .assetPackOpened(let p, let v):
            .download(AssetPacks.downloadID(pack: p, version: v))
        case .restoreStarted, .restoreCompleted, .restoreFailed:
            .restore
        case .productRegistered, .contentVersionPublished, .contentDeleted, .assetPackPublished, .assetPackRemoved, .storePaymentPromoted,
            .personalDataErased:
            .catalog
        case .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted:
            .apple
        case .storeProductViewPresented(let v, _, _, _, _, _), .storeProductViewLoaded(let v), .storeProductViewFailed(let v, _),
            .storeProductViewDismissed(let v):
            .productView(v)
        }
    }

    /// The store product view this event is about, if it is one of theirs.
    public var productViewID: String? {
        switch self {
        case .storeProductViewPresented(let v, _, _, _, _, _), .storeProductViewLoaded(let v), .storeProductViewFailed(let v, _),
            .storeProductViewDismissed(let v):
            v
        default: nil
        }
    }

    /// The transaction this event is about, if it names one. (Its own switch, not `subject`: a
    /// replay asks this of every event, and this way it retains nothing.)
    public var transactionID: String? {
        switch self {
        case .paymentQueued(let t, _, _, _), .transactionDeferred(let t), .transactionPurchased(let t, _, _, _, _, _),
            .transactionFailed(let t, _), .transactionRestored(let t, _, _, _, _, _, _), .transactionRevoked(let t, _, _),
            .transactionFinished(let t, _):
            t
        case .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished,
            .downloadFailed, .contentCopiedOut, .contentRegistered, .restoreStarted, .restoreCompleted, .restoreFailed,
            .productRegistered, .contentVersionPublished, .contentDeleted, .assetPackPublished, .assetPackBegan, .assetPackProgressed,
            .assetPackPaused, .assetPackFinished, .assetPackFailed, .assetPackRemoved, .assetPackOpened, .storePaymentPromoted,
            .personalDataErased, .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted,
            .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            nil
        }
    }

    /// Apple's signed statement the event carries (a purchase's, a restore's or a revocation's
    /// `signedTransaction`), if any.
    public var signedTransaction: String? {
        switch self {
        case .transactionPurchased(_, _, _, _, _, let terms), .transactionRestored(_, _, _, _, _, _, let terms): terms.signedTransaction
        case .transactionRevoked(_, _, let signed): signed
        default: nil
        }
    }

    /// Any JWS the event carries: a device's ``signedTransaction``, or Apple's record (an
    /// imported transaction or notification). Its header is stored once per chain.
    var signedDocument: String? {
        switch self {
        case .appleTransactionReceived(let jws, _, _), .appleNotificationReceived(let jws, _): jws
        default: signedTransaction
        }
    }

    /// The download this event is about, if it names one.
    public var downloadID: String? {
        switch self {
        case .downloadStarted(let d), .downloadProgressed(let d, _, _, _), .downloadPaused(let d), .downloadResumed(let d),
            .downloadCancelled(let d, _), .downloadFinished(let d, _), .downloadFailed(let d, _),
            .contentCopiedOut(let d, _, _, _), .contentRegistered(_, let d, _):
            d
        case .assetPackBegan(let p, let v), .assetPackProgressed(let p, let v, _), .assetPackPaused(let p, let v),
            .assetPackFinished(let p, let v), .assetPackFailed(let p, let v, _), .assetPackOpened(let p, let v):
            AssetPacks.downloadID(pack: p, version: v)
        case .paymentQueued, .transactionDeferred, .transactionPurchased, .transactionFailed, .transactionRestored,
            .transactionRevoked, .transactionFinished, .restoreStarted, .restoreCompleted, .restoreFailed,
            .productRegistered, .contentVersionPublished, .contentDeleted, .assetPackPublished, .assetPackRemoved, .storePaymentPromoted,
            .personalDataErased, .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted,
            .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            nil
        }
    }

    /// The stream the event belongs to: `transaction:<id>`, `download:<id>`, `catalog` or `restore`.
    public var stream: String { subject.stream }
}

/// The event types, with their stable on-disk codes (never renumber one).
public enum EventType: UInt8, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    case productRegistered = 1
    case contentVersionPublished = 2
    case paymentQueued = 3
    case transactionDeferred = 4
    case transactionPurchased = 5
    case transactionFailed = 6
    case transactionRestored = 7
    case transactionRevoked = 8
    case transactionFinished = 9
    case downloadStarted = 10
    case downloadProgressed = 11
    case downloadPaused = 12
    case downloadResumed = 13
    case downloadCancelled = 14
    case downloadFinished = 15
    case downloadFailed = 16
    case contentCopiedOut = 17
    case contentDeleted = 18
    case restoreStarted = 19
    case restoreCompleted = 20
    case restoreFailed = 21
    case contentRegistered = 22
    case assetPackPublished = 23
    case assetPackBegan = 24
    case assetPackProgressed = 25
    case assetPackPaused = 26
    case assetPackFinished = 27
    case assetPackFailed = 28
    case assetPackRemoved = 29
    case assetPackOpened = 30
    case storePaymentPromoted = 31
    case personalDataErased = 32
    case appleTransactionReceived = 33
    case appleNotificationReceived = 34
    case appleHistoryCompleted = 35
    case storeProductViewPresented = 36
    case storeProductViewLoaded = 37
    case storeProductViewFailed = 38
    case storeProductViewDismissed = 39

    /// The contract's name, as in the JSON `type` field.
    public var name: String {
        switch self {
        case .productRegistered: "productRegistered"
        case .contentVersionPublished: "contentVersionPublished"
        case .paymentQueued: "paymentQueued"
        case .transactionDeferred: "transactionDeferred"
        case .transactionPurchased: "transactionPurchased"
        case .transactionFailed: "transactionFailed"
        case .transactionRestored: "transactionRestored"
        case .transactionRevoked: "transactionRevoked"
        case .transactionFinished: "transactionFinished"
        case .downloadStarted: "downloadStarted"
        case .downloadProgressed: "downloadProgressed"
        case .downloadPaused: "downloadPaused"
        case .downloadResumed: "downloadResumed"
        case .downloadCancelled: "downloadCancelled"
        case .downloadFinished: "downloadFinished"
        case .downloadFailed: "downloadFailed"
        case .contentCopiedOut: "contentCopiedOut"
        case .contentDeleted: "contentDeleted"
        case .restoreStarted: "restoreStarted"
        case .restoreCompleted: "restoreCompleted"
        case .restoreFailed: "restoreFailed"
        case .contentRegistered: "contentRegistered"
        case .assetPackPublished: "assetPackPublished"
        case .assetPackBegan: "assetPackBegan"
        case .assetPackProgressed: "assetPackProgressed"
        case .assetPackPaused: "assetPackPaused"
        case .assetPackFinished: "assetPackFinished"
        case .assetPackFailed: "assetPackFailed"
        case .assetPackRemoved: "assetPackRemoved"
        case .assetPackOpened: "assetPackOpened"
        case .storePaymentPromoted: "storePaymentPromoted"
        case .personalDataErased: "personalDataErased"
        case .appleTransactionReceived: "appleTransactionReceived"
        case .appleNotificationReceived: "appleNotificationReceived"
        case .appleHistoryCompleted: "appleHistoryCompleted"
        case .storeProductViewPresented: "storeProductViewPresented"
        case .storeProductViewLoaded: "storeProductViewLoaded"
        case .storeProductViewFailed: "storeProductViewFailed"
        case .storeProductViewDismissed: "storeProductViewDismissed"
        }
    }

    /// The contract's name (``name``).
    public var description: String { name }

    /// The type named `name` in the contract (`paymentQueued`); nil for an unknown name.
    public init?(name: String) {
        guard let match = EventType.byName[name] else { return nil }
        self = match
    }

    private static let byName: [String: EventType] = Dictionary(uniqueKeysWithValues: allCases.map { ($0.name, $0) })

    /// Commands record the app's decisions and may be rejected; observations record what the store
    /// said and are never lost.
    public var isCommand: Bool {
        switch self {
        case .paymentQueued, .transactionFinished, .downloadStarted, .downloadPaused, .downloadResumed,
            .downloadCancelled, .contentCopiedOut, .contentDeleted, .restoreStarted, .contentRegistered, .assetPackOpened:
            true
        case .productRegistered, .contentVersionPublished, .transactionDeferred, .transactionPurchased, .transactionFailed,
            .transactionRestored, .transactionRevoked, .downloadProgressed, .downloadFinished, .downloadFailed,
            .restoreCompleted, .restoreFailed, .assetPackPublished, .assetPackBegan, .assetPackProgressed, .assetPackPaused,
            .assetPackFinished, .assetPackFailed, .assetPackRemoved, .storePaymentPromoted, .personalDataErased,
            .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted, .storeProductViewPresented,
            .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            false
        }
    }
}

/// Where Apple's record of a transaction came from (``EventBody/appleTransactionReceived(signedTransaction:source:user:)``).
public enum AppleSource: String, Sendable, Hashable, CaseIterable {
    /// A page of `GET /inApps/v2/history/{transactionId}` (`signedTransactions`).
    case history
    /// `GET /inApps/v1/transactions/{transactionId}` (`signedTransactionInfo`).
    case transactionInfo

    /// Its stored code (never renumber one).
    var storedCode: UInt8 {
        switch self {
        case .history: 1
        case .transactionInfo: 2
        }
    }

    init?(storedCode: UInt64) {
        switch storedCode {
        case 1: self = .history
        case 2: self = .transactionInfo
        default: return nil
        }
    }
}
