// Stand-in for the part of UIKit that PurchaseLedgerStoreKit uses, so the StoreKit layer can be
// type-checked on Linux (Tools/storekit-check.sh). Not a copy of UIKit: each declaration below is
// written from Apple's documentation of the real one, named beside it.

// developer.apple.com/documentation/uikit/uiscene: `@MainActor class UIScene : UIResponder`.
@MainActor
open class UIScene {
    public init() {}
}

// developer.apple.com/documentation/uikit/uiwindowscene: `@MainActor class UIWindowScene : UIScene`.
@MainActor
open class UIWindowScene: UIScene {}

// developer.apple.com/documentation/uikit/uiviewcontroller: `@MainActor class UIViewController : UIResponder`;
// `func dismiss(animated flag: Bool, completion: (() -> Void)? = nil)`,
// `func present(_ viewControllerToPresent: UIViewController, animated flag: Bool, completion: (() -> Void)? = nil)`.
@MainActor
open class UIViewController {
    public init() {}
    open func dismiss(animated flag: Bool, completion: (() -> Void)? = nil) {}
    open func present(_ viewControllerToPresent: UIViewController, animated flag: Bool, completion: (() -> Void)? = nil) {}
}
