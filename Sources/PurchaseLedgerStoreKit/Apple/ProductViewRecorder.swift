// Store product views (In-App Content Display: SKStoreProductViewController, SKOverlay): the
// Apple-only layer. It reads StoreKit's parameters and delegate callbacks into the recorder's
// product-view calls; what they become in the ledger is decided in StoreKitRecorder, tested on
// Linux. Type-checked there against stand-ins (Tools/storekit-check.sh).
// SKStoreProductViewController and its delegate: iOS 6, Mac Catalyst 13 and macOS 11; unavailable
// on visionOS (its delegate protocol is API_UNAVAILABLE there), tvOS and watchOS.
#if canImport(StoreKit) && !os(tvOS) && !os(watchOS)
    public import Foundation
    import PurchaseLedger
    public import StoreKit
#endif

#if canImport(StoreKit) && !os(visionOS) && !os(tvOS) && !os(watchOS)
    /// Records the App Store sheets (`SKStoreProductViewController`) an app shows: their
    /// presentation, their load or its failure, and their dismissal. Load each controller through
    /// ``load(_:withParameters:view:)``, which makes this object its delegate; keep the object for
    /// as long as the sheet is up (a controller does not retain its delegate).
    ///
    /// ```swift
    /// let sheets = StoreProductViewRecorder(recorder: recorder) { controller in   // a property
    ///     controller.dismiss(animated: true)
    /// }
    /// let controller = SKStoreProductViewController()
    /// viewController.present(controller, animated: true)
    /// let loaded = await sheets.load(controller, withParameters: [
    ///     SKStoreProductParameterITunesItemIdentifier: NSNumber(value: 1234567890),
    ///     SKStoreProductParameterCampaignToken: "spring",
    /// ])
    /// ```
    public final class StoreProductViewRecorder: NSObject, SKStoreProductViewControllerDelegate, @unchecked Sendable {  // unchecked: immutable lets
        /// The platform-neutral recorder the events go through.
        public let recorder: StoreKitRecorder
        /// Called when the user closed the sheet, after the dismissal is recorded: dismiss it here.
        let onFinish: @MainActor @Sendable (SKStoreProductViewController) -> Void

        /// Records into `recorder`; `onFinish` dismisses a sheet the user closed (the delegate's duty).
        public init(recorder: StoreKitRecorder, onFinish: @escaping @MainActor @Sendable (SKStoreProductViewController) -> Void) {
            self.recorder = recorder
            self.onFinish = onFinish
            super.init()
        }

        /// Makes this object `controller`'s delegate, records `storeProductViewPresented` (a sheet,
        /// the item and tokens of `parameters`), loads the page, and records `storeProductViewLoaded`
        /// or `storeProductViewFailed`. Returns whether it loaded.
        @MainActor
        @discardableResult
        public func load(_ controller: SKStoreProductViewController, withParameters parameters: [String: Any], view: String = UUID().uuidString) async -> Bool {
            controller.delegate = self
            let values = ProductViewParameters(
                item: ProductViewParameters.item(parameters[SKStoreProductParameterITunesItemIdentifier]) ?? "",
                affiliateToken: parameters[SKStoreProductParameterAffiliateToken] as? String,
                campaignToken: parameters[SKStoreProductParameterCampaignToken] as? String,
                providerToken: parameters[SKStoreProductParameterProviderToken] as? String)
            // A presentation the ledger refused (an item that is no Apple ID) is not bound: its
            // later callbacks record nothing, rather than anomalies.
            if recorder.recordPresentation(values, style: .sheet, view: view) { recorder.bindProductView(ObjectIdentifier(controller), to: view) }
            let recorder = self.recorder
            return await withCheckedContinuation { (done: CheckedContinuation<Bool, Never>) in
                controller.loadProduct(withParameters: parameters) { loaded, error in
                    if let error {
                        recorder.productViewFailed(view: view, error: StoreError(error))
                    } else if loaded {
                        recorder.productViewLoaded(view: view)
                    } else {
                        recorder.productViewFailed(view: view, error: StoreError(domain: "SKErrorDomain", code: 0, message: "the product page did not load"))
                    }
                    done.resume(returning: loaded && error == nil)
                }
            }
        }

        /// `SKStoreProductViewControllerDelegate`: the user closed the sheet. Records
        /// `storeProductViewDismissed`, then calls `onFinish`.
        public func productViewControllerDidFinish(_ viewController: SKStoreProductViewController) {
            dismissed(viewController)
            MainActor.assumeIsolated { onFinish(viewController) }
        }

        /// Records `storeProductViewDismissed` for a sheet the app dismissed itself (StoreKit
        /// calls `productViewControllerDidFinish` only when the user closes it). Once per sheet.
        public func dismissed(_ controller: SKStoreProductViewController) {
            if let view = recorder.productView(of: ObjectIdentifier(controller), end: true) { recorder.productViewDismissed(view: view) }
        }
    }
#endif

// SKOverlay and its delegate: iOS 14 (the package's floor is 16), Mac Catalyst 14 and visionOS 1;
// unavailable on macOS, tvOS and watchOS.
#if canImport(StoreKit) && !os(macOS) && !os(tvOS) && !os(watchOS)
    public import UIKit

    /// Records the App Store overlays (`SKOverlay`) an app shows: presented by ``present(_:in:item:view:)``,
    /// which makes this object the overlay's delegate, then loaded (`didFinishPresentation`),
    /// failed (`didFailToLoadWithError`) or dismissed (`didFinishDismissal`). Keep the object for
    /// as long as the overlay is up. SwiftUI's `appStoreOverlay` reports no such callbacks: record
    /// it with the recorder's `productViewPresented(_:style:view:)` and `productViewDismissed(view:)`.
    ///
    /// ```swift
    /// let overlays = StoreOverlayRecorder(recorder: recorder)   // a property
    /// let configuration = SKOverlay.AppConfiguration(appIdentifier: "1234567890", position: .bottom)
    /// configuration.campaignToken = "spring"
    /// overlays.present(SKOverlay(configuration: configuration), in: scene)
    /// ```
    public final class StoreOverlayRecorder: NSObject, SKOverlayDelegate, @unchecked Sendable {  // unchecked: immutable lets
        /// The platform-neutral recorder the events go through.
        public let recorder: StoreKitRecorder

        public init(recorder: StoreKitRecorder) {
            self.recorder = recorder
            super.init()
        }

        /// Makes this object `overlay`'s delegate, records `storeProductViewPresented` (an overlay,
        /// the app and tokens of its `AppConfiguration`; `item` for another configuration, such as
        /// an App Clip's, which names none), and presents it in `scene`. Returns the view's id.
        @MainActor
        @discardableResult
        public func present(_ overlay: SKOverlay, in scene: UIWindowScene, item: String? = nil, view: String = UUID().uuidString) -> String {
            overlay.delegate = self
            let app = overlay.configuration as? SKOverlay.AppConfiguration
            let values = ProductViewParameters(
                item: app?.appIdentifier ?? item ?? "", campaignToken: app?.campaignToken, providerToken: app?.providerToken)
            if recorder.recordPresentation(values, style: .overlay, view: view) { recorder.bindProductView(ObjectIdentifier(overlay), to: view) }
            overlay.present(in: scene)
            return view
        }

        /// `SKOverlayDelegate`: the overlay is on screen, its page loaded.
        public func storeOverlayDidFinishPresentation(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {
            if let view = recorder.productView(of: ObjectIdentifier(overlay)) { recorder.productViewLoaded(view: view) }
        }

        /// `SKOverlayDelegate`: the overlay could not load; it will not appear.
        public func storeOverlayDidFailToLoad(_ overlay: SKOverlay, error: any Error) {
            if let view = recorder.productView(of: ObjectIdentifier(overlay), end: true) { recorder.productViewFailed(view: view, error: StoreError(error)) }
        }

        /// `SKOverlayDelegate`: the overlay left the screen.
        public func storeOverlayDidFinishDismissal(_ overlay: SKOverlay, transitionContext: SKOverlay.TransitionContext) {
            if let view = recorder.productView(of: ObjectIdentifier(overlay), end: true) { recorder.productViewDismissed(view: view) }
        }
    }
#endif
