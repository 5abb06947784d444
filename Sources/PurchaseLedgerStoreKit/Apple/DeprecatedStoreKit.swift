// The deprecated StoreKit APIs the layer still reads, on purpose, all in this file.
//
// Apple deprecated hosted content (SKDownload, the queue's start/pause/resume/cancel,
// `updatedDownloads`, a transaction's `downloads`, a product's `isDownloadable` and content fields)
// in iOS 16, macOS 13, tvOS 16 and watchOS 9. Those are the package's floors, so every use warns in
// every build. StoreKit 2's `storefrontCountryCode` (replaced by `storefront` in the 17 releases)
// and `offerType`/`offerID` (replaced by `offer` in 17.2) warn in any build whose deployment target
// is past that point. Swift warns about them even in the `else` of an `#available` check that only
// older systems reach.
//
// The layer still reads them, because apps that sell hosted content still run and their downloads
// are what this ledger is for, and because iOS 16 has only the older fields. Swift 6.3 cannot
// silence one warning on one line, so each use is confined to one of two places, each silent by
// construction:
// - The layer's own hosted-content API takes SKDownload, so it is deprecated as SKDownload is
//   (`@available(*, deprecated)`: at these floors, "deprecated everywhere" is exactly Apple's
//   deprecation). Swift does not warn inside a deprecated declaration. An app that calls it is told,
//   as it already is by the `download` it passes in.
// - Everything else goes through `DeprecatedStoreKitReading` below. Its requirements are not
//   deprecated, but its one conformance's witnesses are, and Swift checks a call through a protocol
//   against the requirement.
// Tools/storekit-check.sh marks the same declarations deprecated in its stand-ins and treats
// warnings as errors, so a new use outside these two places fails the suite.
#if canImport(StoreKit)
    import Foundation
    import PurchaseLedger
    import StoreKit

    /// Reads StoreKit's deprecated fields for code that is not itself deprecated.
    protocol DeprecatedStoreKitReading: Sendable {
        #if !os(visionOS)
            /// A StoreKit 1 transaction's hosted-content downloads.
            func downloads(of transaction: SKPaymentTransaction) -> [DownloadValue]
            /// A StoreKit 1 product's hosted-content fields.
            func hostedContent(of product: SKProduct) -> HostedContentFields
            /// A StoreKit 2 transaction's storefront before the 17 releases (`storefront` then).
            func storefrontCountryCode(of transaction: Transaction) -> String
        #endif
        /// A StoreKit 2 transaction's offer before the 17.2 releases (`offer` then).
        func offer(of transaction: Transaction) -> Offer?
    }

    /// A product's hosted-content fields, as the ledger registers them.
    struct HostedContentFields {
        let isDownloadable: Bool
        let version: String
        let lengths: [Int64]
    }

    /// The one conformance: its witnesses are deprecated, so their bodies may use what they read.
    struct DeprecatedStoreKit: DeprecatedStoreKitReading {
        #if !os(visionOS)
            @available(*, deprecated, message: "Hosted content, deprecated in iOS 16, macOS 13, tvOS 16 and watchOS 9, read for the ledger")
            func downloads(of transaction: SKPaymentTransaction) -> [DownloadValue] {
                transaction.downloads.map(DownloadValue.init)
            }

            @available(*, deprecated, message: "Hosted content, deprecated in iOS 16, macOS 13, tvOS 16 and watchOS 9, read for the ledger")
            func hostedContent(of product: SKProduct) -> HostedContentFields {
                HostedContentFields(
                    isDownloadable: product.isDownloadable, version: product.downloadContentVersion,
                    lengths: product.downloadContentLengths.map(\.int64Value))
            }

            @available(*, deprecated, message: "Read on systems before the 17 releases, where `storefront` is missing")
            func storefrontCountryCode(of transaction: Transaction) -> String {
                transaction.storefrontCountryCode
            }
        #endif

        @available(*, deprecated, message: "Read on systems before the 17.2 releases, where `offer` is missing")
        func offer(of transaction: Transaction) -> Offer? {
            transaction.offerType.flatMap { type in OfferType(type).map { Offer(type: $0, id: transaction.offerID) } }
        }
    }

    /// What the layer calls: through the protocol, which keeps the call sites free of warnings.
    let deprecatedStoreKit: any DeprecatedStoreKitReading = DeprecatedStoreKit()
#endif
