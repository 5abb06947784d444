import Foundation
import PurchaseLedger

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
    public var state: PaymentTransactionState
    /// `payment.productIdentifier`, `payment.quantity`, `payment.applicationUsername`.
    public var productIdentifier: String
    public var quantity: Int
    public var applicationUsername: String?
    /// Set in `purchased` and `restored` only.
    public var transactionIdentifier: String?
    /// `original.transactionIdentifier`, for `restored`.
    public var originalTransactionIdentifier: String?
    /// Set in `failed`.
    public var error: StoreError?
    /// Set in `purchased` (and, in practice, `restored`).
    public var downloads: [DownloadValue]

    public init(
        handle: Int, state: PaymentTransactionState, productIdentifier: String, quantity: Int = 1,
        applicationUsername: String? = nil, transactionIdentifier: String? = nil,
        originalTransactionIdentifier: String? = nil, error: StoreError? = nil, downloads: [DownloadValue] = []
    ) {
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
    public var contentIdentifier: String
    public var contentVersion: String
    /// `expectedContentLength`.
    public var contentLength: Int64
    public var state: DownloadState
    /// 0...1; completion is the state `finished`, never a progress of 1.
    public var progress: Double
    /// Seconds; -1 (`SKDownloadTimeRemainingUnknown`) when unknown.
    public var timeRemaining: Double
    /// Set in `finished` only: a file URL of a directory.
    public var contentURL: URL?
    public var error: StoreError?

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
    public var productIdentifier: String
    public var kind: ProductKind
    /// The price in currency units, as the store gave it (`SKProduct.price`, `Product.price`).
    public var price: Decimal
    /// ISO 4217 (`priceLocale.currency?.identifier`, `priceFormatStyle.currencyCode`).
    public var currencyCode: String
    public var isDownloadable: Bool
    /// `downloadContentVersion` and `downloadContentLengths`: one entry per hosted file, named
    /// after the product.
    public var contentVersion: String?
    public var contentLengths: [Int64]
    public var title: String?

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

    public var id: UInt64
    public var originalID: UInt64
    public var productID: String
    public var productKind: ProductKind?
    public var purchasedQuantity: Int
    public var purchaseDate: Date
    public var appAccountToken: UUID?
    public var revocationDate: Date?
    /// `revocationReason`: "developerIssue", "other"...
    public var revocationReason: String?
    public var reason: Reason?

    public init(
        id: UInt64, originalID: UInt64, productID: String, productKind: ProductKind? = nil, purchasedQuantity: Int = 1,
        purchaseDate: Date, appAccountToken: UUID? = nil, revocationDate: Date? = nil, revocationReason: String? = nil,
        reason: Reason? = nil
    ) {
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
}

extension StoreError {
    /// An error as StoreKit reports it: its `NSError` domain and code, and its description.
    public init(_ error: any Error) {
        let e = error as NSError
        self.init(domain: e.domain, code: Int64(e.code), message: e.localizedDescription)
    }
}
