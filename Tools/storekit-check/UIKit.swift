// Stand-in for the part of UIKit that PurchaseLedgerStoreKit uses, so the StoreKit layer can be
// type-checked on Linux (Tools/storekit-check.sh). Not a copy of UIKit: each declaration below is
// written from Apple's documentation of the real one, named beside it.

// developer.apple.com/documentation/uikit/uiscene: `@MainActor class UIScene : UIResponder`.
@MainActor
open class UIScene {
    public init() {}
}
