// Stand-in for the part of StoreKit that PurchaseLedgerStoreKit uses, so the StoreKit layer can be
// type-checked on Linux (Tools/storekit-check.sh). Each declaration is written from Apple's
// documentation of the real one, whose path under developer.apple.com/documentation/storekit/ is
// named beside it (StoreKit 1's from SKPaymentQueue.h, SKPaymentTransaction.h, SKPayment.h,
// SKDownload.h, SKProduct.h, SKStorefront.h). Availability cannot be modelled here:
// docs/platforms.md keeps it, per platform, checked by a test against the sources' guards.
// Deprecation can: every declaration Apple deprecated at or below the package's floors (all of
// hosted content at iOS 16, macOS 13, tvOS 16, watchOS 9, the floors themselves) or in a later
// release the layer still supports (`storefrontCountryCode`, `offerType`, `offerID`) is marked
// `@available(*, deprecated)` here, so the check (warnings are errors) fails on any use the layer
// does not silence on purpose.
public import Foundation
public import UIKit

// MARK: - StoreKit 1 (original API for in-app purchase)

// skpaymenttransactionstate: `enum SKPaymentTransactionState : Int`.
public enum SKPaymentTransactionState: Int, Sendable {
    case purchasing = 0
    case purchased = 1
    case failed = 2
    case restored = 3
    case deferred = 4
}

// skdownloadstate: `enum SKDownloadState : Int` (deprecated iOS 16, macOS 13, tvOS 16, watchOS 9).
@available(*, deprecated, message: "Hosted content is no longer supported")
public enum SKDownloadState: Int, Sendable {
    case waiting = 0
    case active = 1
    case paused = 2
    case finished = 3
    case failed = 4
    case cancelled = 5
}

// skstorefront: `class SKStorefront : NSObject`; countrycode: `var countryCode: String { get }`.
open class SKStorefront: NSObject {
    open var countryCode: String { "" }
    open var identifier: String { "" }
}

// skproduct: `class SKProduct : NSObject`; its `productIdentifier`, `price: NSDecimalNumber`,
// `priceLocale: Locale`, `localizedTitle`, `isDownloadable`, `downloadContentVersion`,
// `downloadContentLengths: [NSNumber]` (the last three deprecated iOS 16, macOS 13, tvOS 16, watchOS 9).
open class SKProduct: NSObject {
    open var productIdentifier: String { "" }
    open var price: NSDecimalNumber { NSDecimalNumber(value: 0) }
    open var priceLocale: Locale { Locale(identifier: "en_US") }
    open var localizedTitle: String { "" }
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open var isDownloadable: Bool { false }
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open var downloadContentVersion: String { "" }
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open var downloadContentLengths: [NSNumber] { [] }
}

// skpayment: `class SKPayment : NSObject`; `convenience init(product: SKProduct)`,
// `var productIdentifier: String`, `var quantity: Int`, `var applicationUsername: String?`.
open class SKPayment: NSObject {
    public convenience init(product: SKProduct) { self.init() }
    open var productIdentifier: String { "" }
    open var quantity: Int { 1 }
    open var applicationUsername: String? { nil }
}

// skpaymenttransaction: `class SKPaymentTransaction : NSObject`; `var error: (any Error)?`,
// `var original: SKPaymentTransaction?`, `var payment: SKPayment`, `var downloads: [SKDownload]`,
// `var transactionDate: Date?`, `var transactionIdentifier: String?`,
// `var transactionState: SKPaymentTransactionState`.
open class SKPaymentTransaction: NSObject {
    open var error: (any Error)? { nil }
    open var original: SKPaymentTransaction? { nil }
    open var payment: SKPayment { SKPayment() }
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open var downloads: [SKDownload] { [] }
    open var transactionDate: Date? { nil }
    open var transactionIdentifier: String? { nil }
    open var transactionState: SKPaymentTransactionState { .purchasing }
}

// skdownload: `class SKDownload : NSObject` (deprecated iOS 16, macOS 13, tvOS 16, watchOS 9;
// unavailable on visionOS); `var state: SKDownloadState`, `var expectedContentLength: Int64`,
// `var contentIdentifier: String`, `var contentURL: URL?`, `var contentVersion: String`,
// `var error: (any Error)?`, `var progress: Float`, `var timeRemaining: TimeInterval`,
// `var transaction: SKPaymentTransaction`.
@available(*, deprecated, message: "Hosted content is no longer supported")
open class SKDownload: NSObject {
    open var state: SKDownloadState { .waiting }
    open var expectedContentLength: Int64 { 0 }
    open var contentIdentifier: String { "" }
    open var contentURL: URL? { nil }
    open var contentVersion: String { "" }
    open var error: (any Error)? { nil }
    open var progress: Float { 0 }
    open var timeRemaining: TimeInterval { 0 }
    open var transaction: SKPaymentTransaction { SKPaymentTransaction() }
}

// skpaymenttransactionobserver: `protocol SKPaymentTransactionObserver : NSObjectProtocol`, whose one
// required method is `paymentQueue(_:updatedTransactions:)`. The others are `optional` Objective-C
// requirements, which Swift on Linux cannot declare: the recorder's implementations of them are
// checked as plain methods, with the signatures of skpaymenttransactionobserver/paymentqueue(_:...).
public protocol SKPaymentTransactionObserver: NSObjectProtocol {
    func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction])
}

// skpaymentqueue: `class SKPaymentQueue : NSObject`; `class func `default`() -> Self`,
// `func add(_ observer: any SKPaymentTransactionObserver)`, `func add(_ payment: SKPayment)`,
// `func finishTransaction(_ transaction: SKPaymentTransaction)`, `func restoreCompletedTransactions()`,
// `func restoreCompletedTransactions(withApplicationUsername username: String?)`,
// `var storefront: SKStorefront? { get }`, and (deprecated iOS 16, macOS 13, tvOS 16, watchOS 9;
// unavailable on visionOS) `func start(_:)`, `pause(_:)`, `resume(_:)`, `cancel(_:)` of `[SKDownload]`.
open class SKPaymentQueue: NSObject {
    open class func `default`() -> SKPaymentQueue { SKPaymentQueue() }
    open func add(_ observer: any SKPaymentTransactionObserver) {}
    open func add(_ payment: SKPayment) {}
    open func finishTransaction(_ transaction: SKPaymentTransaction) {}
    open func restoreCompletedTransactions() {}
    open func restoreCompletedTransactions(withApplicationUsername username: String?) {}
    open var storefront: SKStorefront? { nil }
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open func start(_ downloads: [SKDownload]) {}
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open func pause(_ downloads: [SKDownload]) {}
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open func resume(_ downloads: [SKDownload]) {}
    @available(*, deprecated, message: "Hosted content is no longer supported")
    open func cancel(_ downloads: [SKDownload]) {}
}

// MARK: - StoreKit 2

// appstore/environment: `struct AppStore.Environment`, `static let production`, `sandbox`, `xcode`.
public enum AppStore {
    public struct Environment: RawRepresentable, Hashable, Sendable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let production = Environment(rawValue: "Production")
        public static let sandbox = Environment(rawValue: "Sandbox")
        public static let xcode = Environment(rawValue: "Xcode")
    }
}

// storefront: `struct Storefront`; `let countryCode: String`, `let id: String`.
public struct Storefront: Hashable, Sendable {
    public let countryCode: String
    public let id: String
}

// verificationresult: `@frozen enum VerificationResult<SignedType>` with `case unverified(SignedType,
// VerificationResult<SignedType>.VerificationError)` and `case verified(SignedType)`: frozen, so a
// switch over its two cases needs no `@unknown default`.
@frozen
public enum VerificationResult<SignedType: Sendable>: Sendable {
    case unverified(SignedType, VerificationError)
    case verified(SignedType)

    // verificationresult/unsafepayloadvalue: `var unsafePayloadValue: SignedType { get }`.
    public var unsafePayloadValue: SignedType {
        switch self {
        case .unverified(let value, _), .verified(let value): value
        }
    }

    // verificationresult/verificationerror: `enum VerificationError : Error`.
    public enum VerificationError: Error, Sendable {
        case revokedCertificate, invalidCertificateChain, invalidDeviceVerification, invalidEncoding, invalidSignature, missingRequiredProperties
    }
}

// verificationresult/jwsrepresentation-21vgo: `var jwsRepresentation: String { get }`, where
// `SignedType == Transaction`: the transaction signed by the App Store, in JWS Compact Serialization.
extension VerificationResult where SignedType == Transaction {
    public var jwsRepresentation: String { "" }
}

// product: `struct Product`; `let id: String`, `let type: Product.ProductType`, `let price: Decimal`,
// `let displayName: String`, `var priceFormatStyle: Decimal.FormatStyle.Currency`,
// `func purchase(options: Set<Product.PurchaseOption> = []) async throws -> Product.PurchaseResult`
// (unavailable on visionOS), `func purchase(confirmIn scene: some UIScene, options: ...)` (iOS 17,
// visionOS 1).
public struct Product: Identifiable, Hashable, Sendable {
    public let id: String
    public let type: ProductType
    public let price: Decimal
    public let displayName: String
    public var priceFormatStyle: Decimal.FormatStyle.Currency { .init(code: "USD") }

    // product/producttype: `struct ProductType`, `static let consumable`, `nonConsumable`,
    // `nonRenewable`, `autoRenewable`.
    public struct ProductType: RawRepresentable, Hashable, Sendable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let consumable = ProductType(rawValue: "Consumable")
        public static let nonConsumable = ProductType(rawValue: "Non-Consumable")
        public static let nonRenewable = ProductType(rawValue: "Non-Renewing Subscription")
        public static let autoRenewable = ProductType(rawValue: "Auto-Renewable Subscription")
    }

    // product/purchaseoption: `struct PurchaseOption : Hashable`.
    public struct PurchaseOption: Hashable, Sendable {}

    // product/purchaseresult: `enum PurchaseResult` with `case success(VerificationResult<Transaction>)`,
    // `case userCancelled`, `case pending`.
    public enum PurchaseResult: Sendable {
        case success(VerificationResult<Transaction>)
        case userCancelled
        case pending
    }

    public func purchase(options: Set<PurchaseOption> = []) async throws -> PurchaseResult { .pending }

    @MainActor
    public func purchase(confirmIn scene: some UIScene, options: Set<PurchaseOption> = []) async throws -> PurchaseResult { .pending }
}

// transaction: `struct Transaction`; the properties below, each under transaction/<name>.
public struct Transaction: Identifiable, Hashable, Sendable {
    public let id: UInt64
    public let originalID: UInt64
    public let productID: String
    public let productType: Product.ProductType
    public let purchasedQuantity: Int
    public let purchaseDate: Date
    public let appAccountToken: UUID?
    public let revocationDate: Date?
    public let revocationReason: RevocationReason?
    // transaction/reason (iOS 17, macOS 14, tvOS 17, watchOS 10, visionOS 1).
    public let reason: Reason
    public let price: Decimal?
    public let ownershipType: OwnershipType
    // transaction/currency (iOS 16, macOS 13, tvOS 16, watchOS 9): `let currency: Locale.Currency?`.
    public let currency: Locale.Currency?
    // transaction/environment (iOS 16, macOS 13, tvOS 16, watchOS 9).
    public let environment: AppStore.Environment
    // transaction/storefront (iOS 17, macOS 14, tvOS 17, watchOS 10, visionOS 1).
    public let storefront: Storefront
    // transaction/storefrontcountrycode (iOS 16, macOS 13, tvOS 16, watchOS 9, deprecated in the 17
    // releases; unavailable on visionOS).
    @available(*, deprecated, message: "Use storefront")
    public let storefrontCountryCode: String
    // transaction/offer (iOS 17.2, macOS 14.2, tvOS 17.2, watchOS 10.2, visionOS 1.1).
    public let offer: Offer?
    // transaction/offertype, transaction/offerid (deprecated iOS 17.2 for `offer`).
    @available(*, deprecated, message: "Use offer")
    public let offerType: OfferType?
    @available(*, deprecated, message: "Use offer")
    public let offerID: String?

    // transaction/finish(): `func finish() async`.
    public func finish() async {}

    // transaction/updates, unfinished, currententitlements, all: `static var ...: Transaction.Transactions`.
    public static var updates: Transactions { Transactions() }
    public static var unfinished: Transactions { Transactions() }
    public static var currentEntitlements: Transactions { Transactions() }
    public static var all: Transactions { Transactions() }

    // transaction/transactions: `struct Transactions : AsyncSequence`, of `VerificationResult<Transaction>`.
    public struct Transactions: AsyncSequence, Sendable {
        public typealias Element = VerificationResult<Transaction>
        public struct AsyncIterator: AsyncIteratorProtocol {
            public mutating func next() async -> VerificationResult<Transaction>? { nil }
        }
        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator() }
    }

    // transaction/offertype: `struct OfferType : RawRepresentable` of `Int`: `introductory`,
    // `promotional`, `code`, `winBack` (iOS 18, back-deployed).
    public struct OfferType: RawRepresentable, Hashable, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let introductory = OfferType(rawValue: 1)
        public static let promotional = OfferType(rawValue: 2)
        public static let code = OfferType(rawValue: 3)
        public static let winBack = OfferType(rawValue: 4)
    }

    // transaction/offer: `struct Offer`; `let id: String?`, `let type: Transaction.OfferType`.
    public struct Offer: Hashable, Sendable {
        public let id: String?
        public let type: OfferType
    }

    // transaction/revocationreason: `struct RevocationReason`, `developerIssue`, `other`.
    public struct RevocationReason: RawRepresentable, Hashable, Sendable {
        public let rawValue: Int
        public init(rawValue: Int) { self.rawValue = rawValue }
        public static let developerIssue = RevocationReason(rawValue: 1)
        public static let other = RevocationReason(rawValue: 0)
    }

    // transaction/reason: `struct Reason`, `purchase`, `renewal`.
    public struct Reason: RawRepresentable, Hashable, Sendable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let purchase = Reason(rawValue: "PURCHASE")
        public static let renewal = Reason(rawValue: "RENEWAL")
    }

    // transaction/ownershiptype: `struct OwnershipType`, `purchased`, `familyShared`.
    public struct OwnershipType: RawRepresentable, Hashable, Sendable {
        public let rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public static let purchased = OwnershipType(rawValue: "PURCHASED")
        public static let familyShared = OwnershipType(rawValue: "FAMILY_SHARED")
    }
}

// MARK: - In-App Content Display (SKStoreProductViewController, SKOverlay)

// skstoreproductviewcontroller: `@MainActor class SKStoreProductViewController` (a UIViewController;
// an NSViewController on macOS); `weak var delegate: (any SKStoreProductViewControllerDelegate)?`,
// `func loadProduct(withParameters parameters: [String : Any], completionBlock block: ((Bool, (any Error)?) -> Void)? = nil)`.
@MainActor
open class SKStoreProductViewController: UIViewController {
    open weak var delegate: (any SKStoreProductViewControllerDelegate)?
    open func loadProduct(withParameters parameters: [String: Any], completionBlock block: ((Bool, (any Error)?) -> Void)? = nil) {}
}

// skstoreproductviewcontrollerdelegate: `protocol SKStoreProductViewControllerDelegate : NSObjectProtocol`,
// whose one method, `optional func productViewControllerDidFinish(_ viewController: SKStoreProductViewController)`,
// is an `optional` Objective-C requirement: here a requirement with a default, so an implementation
// with another signature fails to satisfy it.
public protocol SKStoreProductViewControllerDelegate: NSObjectProtocol {
    func productViewControllerDidFinish(_ viewController: SKStoreProductViewController)
}

extension SKStoreProductViewControllerDelegate {
    public func productViewControllerDidFinish(_ viewController: SKStoreProductViewController) {}
}

// skstoreproductparameteritunesitemidentifier, skstoreproductparameteraffiliatetoken,
// skstoreproductparametercampaigntoken, skstoreproductparameterprovidertoken: `let ...: String`.
public let SKStoreProductParameterITunesItemIdentifier: String = "id"
public let SKStoreProductParameterAffiliateToken: String = "at"
public let SKStoreProductParameterCampaignToken: String = "ct"
public let SKStoreProductParameterProviderToken: String = "pt"

// skoverlay: `@MainActor class SKOverlay : NSObject`; `init(configuration: SKOverlay.Configuration)`,
// `var configuration: SKOverlay.Configuration { get }`, `weak var delegate: (any SKOverlayDelegate)?`,
// `func present(in scene: UIWindowScene)`; skoverlay/configuration (`class Configuration : NSObject`),
// skoverlay/appconfiguration (`init(appIdentifier: String, position: SKOverlay.Position)`,
// `var appIdentifier: String`, `var campaignToken: String?`, `var providerToken: String?`),
// skoverlay/position, skoverlay/transitioncontext.
@MainActor
public final class SKOverlay: NSObject {
    public init(configuration: SKOverlay.Configuration) {
        self.configuration = configuration
    }
    public let configuration: SKOverlay.Configuration
    public weak var delegate: (any SKOverlayDelegate)?
    public func present(in scene: UIWindowScene) {}

    public enum Position: Int, Sendable {
        case bottom = 0
        case bottomRaised = 1
    }

    open class Configuration: NSObject {}

    public final class AppConfiguration: Configuration {
        public init(appIdentifier: String, position: SKOverlay.Position) {
            self.appIdentifier = appIdentifier
            self.position = position
        }
        public var appIdentifier: String
        public var position: SKOverlay.Position
        public var campaignToken: String?
        public var providerToken: String?
    }

    public final class TransitionContext: NSObject {}
}

// skoverlaydelegate: `protocol SKOverlayDelegate : NSObjectProtocol`, every method `optional`:
// `storeOverlayDidFailToLoad(_ overlay: SKOverlay, error: any Error)`,
// `storeOverlayWillStartPresentation(_:transitionContext:)`, `storeOverlayDidFinishPresentation(_:transitionContext:)`,
// `storeOverlayWillStartDismissal(_:transitionContext:)`, `storeOverlayDidFinishDismissal(_:transitionContext:)`.
public protocol SKOverlayDelegate: NSObjectProtocol {
    func storeOverlayDidFailToLoad(_ overlay: SKOverlay, error: any Error)
    func storeOverlayWillStartPresentation(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext)
    func storeOverlayDidFinishPresentation(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext)
    func storeOverlayWillStartDismissal(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext)
    func storeOverlayDidFinishDismissal(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext)
}

extension SKOverlayDelegate {
    public func storeOverlayDidFailToLoad(_ overlay: SKOverlay, error: any Error) {}
    public func storeOverlayWillStartPresentation(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {}
    public func storeOverlayDidFinishPresentation(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {}
    public func storeOverlayWillStartDismissal(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {}
    public func storeOverlayDidFinishDismissal(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {}
}
