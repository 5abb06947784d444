public import Foundation
public import PurchaseLedger

// Small value types that mirror the StoreKit properties the recorder reads. The Apple-only layer
// (Apple/) copies StoreKit's objects into them; everything else, the whole mapping to ledger
// events, is platform-neutral and tested on Linux.

/// `SKPaymentTransactionState`, with its raw values.
public enum PaymentTransactionState: Int, Sendable, Hashable, CaseIterable {
    case purchasing = 0
    case purchased = 1
    case failed = 2
    case restored = 3
    case deferred = 4
}

/// `SKDownloadState`, with its raw values.
public enum DownloadState: Int, Sendable, Hashable, CaseIterable {
    case waiting = 0
    case active = 1
    case paused = 2
    case finished = 3
    case failed = 4
    case cancelled = 5
}

/// What the recorder reads of an `SKPaymentTransaction`.
public struct PaymentTransactionValue: Sendable, Hashable {
    /// The identity of the StoreKit object for as long as it lives (the Apple layer uses its
    /// `ObjectIdentifier`): the same object is reported again with each state change.
    public var handle: Int
    /// `transactionState`: what the callback reports.
    public var state: PaymentTransactionState
    /// `payment.productIdentifier`, `payment.quantity`, `payment.applicationUsername`.
    public var productIdentifier: String
    /// `payment.quantity`: units asked for.
    public var quantity: Int
    /// `payment.applicationUsername`: recorded as the transaction's user; nil when the payment set none.
    public var applicationUsername: String?
    /// Set in `purchased` and `restored` only.
    public var transactionIdentifier: String?
    /// `original.transactionIdentifier`, for `restored`.
    public var originalTransactionIdentifier: String?
    /// Set in `failed`.
    public var error: StoreError?
    /// Set in `purchased` (and, in practice, `restored`).
    public var downloads: [DownloadValue]
    /// `transactionDate`: when the App Store took the payment (`purchased`, `restored`); the
    /// event's time when present, the device clock otherwise.
    public var transactionDate: Date?
    /// `SKPaymentQueue.storefront?.countryCode` (ISO 3166-1 alpha-3) when the callback came.
    public var storefront: String?

    /// A transaction's values; the Apple layer copies them from an `SKPaymentTransaction`.
    public init(
        handle: Int, state: PaymentTransactionState, productIdentifier: String, quantity: Int = 1,
        applicationUsername: String? = nil, transactionIdentifier: String? = nil,
        originalTransactionIdentifier: String? = nil, error: StoreError? = nil, downloads: [DownloadValue] = [],
        transactionDate: Date? = nil, storefront: String? = nil
    ) {
        self.transactionDate = transactionDate
        self.storefront = storefront
        self.handle = handle
        self.state = state
        self.productIdentifier = productIdentifier
        self.quantity = quantity
        self.applicationUsername = applicationUsername
        self.transactionIdentifier = transactionIdentifier
        self.originalTransactionIdentifier = originalTransactionIdentifier
        self.error = error
        self.downloads = downloads
    }
}

/// What the recorder reads of an `SKDownload`.
public struct DownloadValue: Sendable, Hashable {
    /// The `handle` of the download's transaction.
    public var transactionHandle: Int
    /// `contentIdentifier`: the content id, and with the transaction id the download id
    /// (``StoreKitRecorder/downloadID(transaction:content:)``).
    public var contentIdentifier: String
    /// `contentVersion`: dotted integers; a purchase whose download says otherwise is not recorded
    /// (`malformedInput`, reported to `onError`).
    public var contentVersion: String
    /// `expectedContentLength`.
    public var contentLength: Int64
    /// `state`: what the callback reports.
    public var state: DownloadState
    /// 0...1; completion is the state `finished`, never a progress of 1.
    public var progress: Double
    /// Seconds; -1 (`SKDownloadTimeRemainingUnknown`) when unknown.
    public var timeRemaining: Double
    /// Set in `finished` only: a file URL of a directory.
    public var contentURL: URL?
    /// `error`, set in `failed`.
    public var error: StoreError?

    /// A download's values; the Apple layer copies them from an `SKDownload`.
    public init(
        transactionHandle: Int, contentIdentifier: String, contentVersion: String, contentLength: Int64,
        state: DownloadState = .waiting, progress: Double = 0, timeRemaining: Double = -1,
        contentURL: URL? = nil, error: StoreError? = nil
    ) {
        self.transactionHandle = transactionHandle
        self.contentIdentifier = contentIdentifier
        self.contentVersion = contentVersion
        self.contentLength = contentLength
        self.state = state
        self.progress = progress
        self.timeRemaining = timeRemaining
        self.contentURL = contentURL
        self.error = error
    }
}

/// What the recorder reads of an `SKProduct` or a StoreKit 2 `Product`, to register it.
public struct ProductValue: Sendable, Hashable {
    /// `productIdentifier` (StoreKit 2: `id`): the ledger's product id.
    public var productIdentifier: String
    /// Its kind: StoreKit 2's `type`; StoreKit 1 does not say, so the app gives it.
    public var kind: ProductKind
    /// The price in currency units, as the store gave it (`SKProduct.price`, `Product.price`).
    public var price: Decimal
    /// ISO 4217 (`priceLocale.currency?.identifier`, `priceFormatStyle.currencyCode`).
    public var currencyCode: String
    /// `isDownloadable`: whether it has hosted content (StoreKit 1).
    public var isDownloadable: Bool
    /// `downloadContentVersion` and `downloadContentLengths`: one entry per hosted file, named
    /// after the product.
    public var contentVersion: String?
    /// `downloadContentLengths`: each hosted file's size in bytes.
    public var contentLengths: [Int64]
    /// `localizedTitle` (StoreKit 2: `displayName`), when there is one.
    public var title: String?

    /// A product's values; the Apple layer copies them from an `SKProduct` or a `Product`.
    public init(
        productIdentifier: String, kind: ProductKind, price: Decimal, currencyCode: String,
        isDownloadable: Bool = false, contentVersion: String? = nil, contentLengths: [Int64] = [], title: String? = nil
    ) {
        self.productIdentifier = productIdentifier
        self.kind = kind
        self.price = price
        self.currencyCode = currencyCode
        self.isDownloadable = isDownloadable
        self.contentVersion = contentVersion
        self.contentLengths = contentLengths
        self.title = title
    }
}

/// What the recorder reads of a StoreKit 2 `Transaction` (verified).
public struct StoreKit2TransactionValue: Sendable, Hashable {
    /// Why StoreKit 2 gave it (`Transaction.reason`, iOS 17+); nil when unknown.
    public enum Reason: String, Sendable, Hashable {
        case purchase
        case renewal
    }

    /// `Transaction.id`: the ledger records the transaction as `sk2-<id>`, with this store id.
    public var id: UInt64
    /// `Transaction.originalID`: ``id`` for a first purchase, another for a restore or a renewal.
    public var originalID: UInt64
    /// `Transaction.productID`.
    public var productID: String
    /// `Transaction.productType`; nil for a type the contract does not have.
    public var productKind: ProductKind?
    /// `Transaction.purchasedQuantity`; its payment records it within 1...10.
    public var purchasedQuantity: Int
    /// `Transaction.purchaseDate`: the time of its purchase or restore event.
    public var purchaseDate: Date
    /// `Transaction.appAccountToken`, recorded (lowercased) as the transaction's user; nil when the
    /// purchase set none.
    public var appAccountToken: UUID?
    /// `Transaction.revocationDate`: when set, the transaction is recorded as revoked at that time.
    public var revocationDate: Date?
    /// `revocationReason`: "developerIssue", "other"...
    public var revocationReason: String?
    /// `Transaction.reason` (iOS 17+); nil before.
    public var reason: Reason?
    /// `Transaction.price`: the total paid for `purchasedQuantity`, after any offer, in units of
    /// `currency` (iOS 15+); nil when StoreKit does not say.
    public var price: Decimal?
    /// `Transaction.currency?.identifier` (iOS 16+), ISO 4217.
    public var currency: String?
    /// `Transaction.storefront.countryCode` (iOS 17+), ISO 3166-1 alpha-3.
    public var storefront: String?
    /// `Transaction.environment` (iOS 16+).
    public var environment: StoreEnvironment?
    /// `Transaction.ownershipType`.
    public var ownership: Ownership?
    /// `Transaction.offer` (iOS 17.2+; `offerType` and `offerID` before).
    public var offer: Offer?
    /// Apple's signed statement of the transaction: the `VerificationResult`'s
    /// `jwsRepresentation`, recorded with its purchase, restore and revocation
    /// (`signedTransaction`, checked against their fields).
    public var signedTransaction: String?

    /// A transaction's values; the Apple layer copies them from a verified `Transaction`.
    public init(
        id: UInt64, originalID: UInt64, productID: String, productKind: ProductKind? = nil, purchasedQuantity: Int = 1,
        purchaseDate: Date, appAccountToken: UUID? = nil, revocationDate: Date? = nil, revocationReason: String? = nil,
        reason: Reason? = nil, price: Decimal? = nil, currency: String? = nil, storefront: String? = nil,
        environment: StoreEnvironment? = nil, ownership: Ownership? = nil, offer: Offer? = nil, signedTransaction: String? = nil
    ) {
        self.signedTransaction = signedTransaction
        self.price = price
        self.currency = currency
        self.storefront = storefront
        self.environment = environment
        self.ownership = ownership
        self.offer = offer
        self.id = id
        self.originalID = originalID
        self.productID = productID
        self.productKind = productKind
        self.purchasedQuantity = purchasedQuantity
        self.purchaseDate = purchaseDate
        self.appAccountToken = appAccountToken
        self.revocationDate = revocationDate
        self.revocationReason = revocationReason
        self.reason = reason
    }

    /// A renewal: an auto-renewable subscription's later period (its own id, the first one's
    /// originalID). Restores also carry another originalID; `reason` tells them apart when given.
    public var isRenewal: Bool {
        if let reason { return reason == .renewal }
        return originalID != id && productKind == .autoRenewable
    }

    /// A restore of an earlier purchase: another originalID, and neither a renewal nor, when
    /// StoreKit says why it gave the transaction (`reason`, iOS 17+), a purchase. From iOS 17 a
    /// customer's resubscription, upgrade or crossgrade has another originalID and the reason
    /// `purchase`: it is a payment, and its money counts.
    public var isRestore: Bool {
        originalID != id && reason == nil && !isRenewal
    }

    /// The contract's terms (5.1): the unit price (StoreKit's total divided by the quantity),
    /// currency, storefront, environment, ownership and offer, as far as StoreKit said them.
    public var terms: PurchaseTerms {
        var terms = PurchaseTerms(
            storefront: storefront, environment: environment, ownership: ownership, offer: offer, signedTransaction: signedTransaction)
        if let price, let currency, purchasedQuantity > 0 {
            var unit = price / Decimal(purchasedQuantity)
            var rounded = Decimal()
            NSDecimalRound(&rounded, &unit, 6, .plain)
            terms.price = NSDecimalNumber(decimal: rounded).description(withLocale: Locale(identifier: "en_US_POSIX"))
            terms.currency = currency
        }
        if terms.problem == nil { return terms }
        // A JWS that is not one is left out, never the purchase.
        let signed = PurchaseTerms(signedTransaction: signedTransaction).problem == nil ? signedTransaction : nil
        return PurchaseTerms(environment: environment, ownership: ownership, offer: offer, signedTransaction: signed)
    }
}

/// What the recorder reads of Background Assets' `AssetPackManager.DownloadStatusUpdate`: the
/// pack's id and version (`AssetPack.id`, `AssetPack.version`) and what happened.
public enum AssetPackStatusUpdateValue: Sendable, Hashable {
    /// `.began(pack)`: began, or resumed after a pause.
    case began(pack: String, version: Int)
    /// `.downloading(pack, progress)`: `progress.fractionCompleted`.
    case downloading(pack: String, version: Int, fractionCompleted: Double)
    case paused(pack: String, version: Int)
    /// `.finished(pack)`: on the device and usable.
    case finished(pack: String, version: Int)
    case failed(pack: String, version: Int, error: StoreError)

    /// The ledger event this update is, at `at`. A fraction outside 0...1 (or NaN: a `Progress`
    /// with no total) is recorded as the nearest value in 0...1.
    public func event(at: Timestamp) -> Event {
        switch self {
        case .began(let pack, let version): Event(at: at, .assetPackBegan(pack: pack, version: version))
        case .downloading(let pack, let version, let fraction):
            Event(at: at, .assetPackProgressed(pack: pack, version: version, progress: fraction.isNaN ? 0 : min(1, max(0, fraction))))
        case .paused(let pack, let version): Event(at: at, .assetPackPaused(pack: pack, version: version))
        case .finished(let pack, let version): Event(at: at, .assetPackFinished(pack: pack, version: version))
        case .failed(let pack, let version, let error): Event(at: at, .assetPackFailed(pack: pack, version: version, error: error))
        }
    }
}

extension StoreError {
    /// An error as StoreKit reports it: its `NSError` domain and code, and its description.
    public init(_ error: any Error) {
        let e = error as NSError
        self.init(domain: e.domain, code: Int64(e.code), message: e.localizedDescription)
    }
}

extension OfferType {
    /// The offer type of StoreKit 2's `Transaction.OfferType` by its raw value (1 introductory,
    /// 2 promotional, 3 offer code, 4 win-back, as the App Store Server API numbers them); nil for
    /// a kind the ledger's contract does not know. By value, not by the type's description, which
    /// names no case (`OfferType(rawValue: 4)`).
    public init?(storeKit2RawValue rawValue: Int) {
        switch rawValue {
        case 1: self = .introductory
        case 2: self = .promotional
        case 3: self = .code
        case 4: self = .winBack
        default: return nil
        }
    }
}

extension StoreKit2TransactionValue {
    /// The storefront a transaction records: `Transaction.storefront.countryCode` where the OS has
    /// it (iOS 17, macOS 14, tvOS 17, watchOS 10, visionOS 1), else the older
    /// `storefrontCountryCode` (iOS 16, macOS 13, tvOS 16, watchOS 9; not on visionOS).
    public static func storefront(current: String?, older: String?) -> String? {
        current ?? older
    }
}
