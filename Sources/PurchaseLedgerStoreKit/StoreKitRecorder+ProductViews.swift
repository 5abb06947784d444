public import Foundation
public import PurchaseLedger

/// What an app passes when it shows the App Store's page of an item: the item's Apple ID and the
/// tokens StoreKit's parameters carry (`SKStoreProductParameterITunesItemIdentifier`,
/// `...AffiliateToken`, `...CampaignToken`, `...ProviderToken`; an `SKOverlay.AppConfiguration`'s
/// `appIdentifier`, `campaignToken` and `providerToken`). The advertising-network parameters are
/// not recorded.
public struct ProductViewParameters: Sendable, Hashable {
    /// The item's Apple ID, in digits (an `NSNumber` in StoreKit's dictionary; its decimal digits here).
    public var item: String
    public var affiliateToken: String?
    public var campaignToken: String?
    public var providerToken: String?

    public init(item: String, affiliateToken: String? = nil, campaignToken: String? = nil, providerToken: String? = nil) {
        self.item = item
        self.affiliateToken = affiliateToken
        self.campaignToken = campaignToken
        self.providerToken = providerToken
    }

    /// The item of StoreKit's parameters: an `NSNumber` or an integer as its decimal digits, a
    /// string as it is (the ledger refuses one that is not a positive integer).
    public static func item(_ value: Any?) -> String? {
        switch value {
        case let n as NSNumber: n.int64Value > 0 ? String(n.int64Value) : n.stringValue
        case let n as Int: String(n)
        case let n as Int64: String(n)
        case let s as String: s
        default: nil
        }
    }
}

/// Store product views: the App Store's page of another item shown in the app, as a sheet
/// (`SKStoreProductViewController`) or an overlay (`SKOverlay`). The app is never told whether
/// the user bought anything there; the ledger records that the page was shown, whether it loaded,
/// and when it left the screen (docs/storekit.md).
///
/// These are the platform-neutral calls. On Apple platforms, `StoreProductViewRecorder` and
/// `StoreOverlayRecorder` make them from StoreKit's parameters and delegate callbacks.
extension StoreKitRecorder {
    /// The app put an item's page on screen: records `storeProductViewPresented` and returns the
    /// view's id (`view`, or a new UUID), which the later calls name.
    @discardableResult
    public func productViewPresented(_ parameters: ProductViewParameters, style: ProductViewStyle, view: String = UUID().uuidString) -> String {
        _ = recordPresentation(parameters, style: style, view: view)
        return view
    }

    /// Records the presentation; whether the ledger took it (false: reported to `onError`).
    func recordPresentation(_ parameters: ProductViewParameters, style: ProductViewStyle, view: String) -> Bool {
        record {
            [
                Event(
                    at: self.clock(),
                    .storeProductViewPresented(
                        view: view, item: parameters.item, style: style, affiliateToken: parameters.affiliateToken,
                        campaignToken: parameters.campaignToken, providerToken: parameters.providerToken))
            ]
        }
    }

    /// The page loaded (`loadProduct`'s completion with `true`; an overlay's `didFinishPresentation`).
    public func productViewLoaded(view: String) {
        record { [Event(at: self.clock(), .storeProductViewLoaded(view: view))] }
    }

    /// The page could not load (`loadProduct`'s error; an overlay's `didFailToLoadWithError`).
    public func productViewFailed(view: String, error: StoreError) {
        record { [Event(at: self.clock(), .storeProductViewFailed(view: view, error: error))] }
    }

    /// The page left the screen (`productViewControllerDidFinish`; an overlay's `didFinishDismissal`).
    public func productViewDismissed(view: String) {
        record { [Event(at: self.clock(), .storeProductViewDismissed(view: view))] }
    }

    /// Binds a StoreKit object (a product view controller, an overlay) to its view id, so the
    /// delegate callbacks that name the object find the id again.
    func bindProductView(_ object: ObjectIdentifier, to view: String) {
        bindings.withLock { $0.productViews[object] = view }
    }

    /// The view id bound to `object`; `end` unbinds it (the view left the screen).
    func productView(of object: ObjectIdentifier, end: Bool = false) -> String? {
        bindings.withLock { end ? $0.productViews.removeValue(forKey: object) : $0.productViews[object] }
    }
}
