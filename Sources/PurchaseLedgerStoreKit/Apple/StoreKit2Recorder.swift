// StoreKit 2 (Transaction, Product): the Apple-only layer. It copies verified transactions into
// StoreKit2TransactionValue; what they become in the ledger is decided in StoreKitRecorder, tested
// on Linux. This file is type-checked there against stand-ins (Tools/storekit-check.sh), and
// compiled where StoreKit exists.
#if canImport(StoreKit)
    import Foundation
    import PurchaseLedger
    public import StoreKit
    #if os(visionOS)
        public import UIKit
    #endif

    extension StoreKitRecorder {
        /// At launch: listens to `Transaction.updates` first (Apple: from launch, or transactions
        /// can be missed), then records `Transaction.unfinished` and `Transaction.currentEntitlements`
        /// (what the ledger shows already adds nothing), then reconciles with `Transaction.all`
        /// (refunds and revocations made while the app was closed). Runs for as long as the
        /// returned task does. An unverified result is kept as an `unverifiedTransaction` anomaly
        /// with StoreKit's verification error, never as a purchase.
        ///
        /// `deliver` gets each transaction of `updates` and `unfinished` the app still has to act
        /// on (``awaitsFinish(storeKit2:)``), once it is recorded: Ask to Buy approvals, offer
        /// codes, purchases made on another device, and those left unfinished last time. Deliver a
        /// verified one's content, then ``finish(_:)`` it; an unverified one can only be finished
        /// (``finish(unverified:)``).
        ///
        /// ```swift
        /// let storeKit = recorder.startStoreKit2 { result in
        ///     switch result {
        ///     case .verified(let transaction):
        ///         await library.unlock(transaction.productID)
        ///         try? await recorder.finish(transaction)
        ///     case .unverified(let transaction, _):
        ///         try? await recorder.finish(unverified: transaction)
        ///     }
        /// }
        /// ```
        public func startStoreKit2(
            deliver: @escaping @Sendable (VerificationResult<Transaction>) async -> Void = { _ in }
        ) -> Task<Void, Never> {
            let updates = Task.detached(priority: .utility) { [self] in
                for await result in Transaction.updates { await take(result, from: .updates, deliver: deliver) }
            }
            return Task.detached(priority: .utility) { [self] in
                for await result in Transaction.unfinished { await take(result, from: .unfinished, deliver: deliver) }
                for await result in Transaction.currentEntitlements { take(result, from: .currentEntitlements) }
                for await result in Transaction.all { take(result, from: .reconcile) }
                await withTaskCancellationHandler {
                    await updates.value
                } onCancel: {
                    updates.cancel()
                }
            }
        }

        /// Records `result`, then hands it to `deliver` when the app has to act on it.
        private func take(
            _ result: VerificationResult<Transaction>, from source: StoreKit2Source,
            deliver: @Sendable (VerificationResult<Transaction>) async -> Void
        ) async {
            take(result, from: source)
            if awaitsFinish(storeKit2: result.unsafePayloadValue.id) { await deliver(result) }
        }

        private func take(_ result: VerificationResult<Transaction>, from source: StoreKit2Source) {
            switch result {
            case .verified(let t):
                var value = StoreKit2TransactionValue(t)
                value.signedTransaction = result.jwsRepresentation
                record([value], from: source)
            case .unverified(let t, let error):
                unverified(storeKit2: t.id, product: t.productID, purchaseDate: t.purchaseDate, error: StoreError(error))
            }
        }

        #if os(visionOS)
            /// Buys `product`, confirming in `scene`, and records the transaction when the purchase
            /// succeeds (a pending one, Ask to Buy, arrives later through `Transaction.updates`).
            public func purchase(_ product: Product, confirmIn scene: some UIScene, options: Set<Product.PurchaseOption> = []) async throws
                -> Product.PurchaseResult
            {
                let result = try await product.purchase(confirmIn: scene, options: options)
                if case .success(let verification) = result { take(verification, from: .purchase) }
                return result
            }
        #else
            /// Buys `product` and records the transaction when the purchase succeeds (a pending one,
            /// Ask to Buy, arrives later through `Transaction.updates`).
            public func purchase(_ product: Product, options: Set<Product.PurchaseOption> = []) async throws -> Product.PurchaseResult {
                let result = try await product.purchase(options: options)
                if case .success(let verification) = result { take(verification, from: .purchase) }
                return result
            }
        #endif

        /// Finishes the transaction if the ledger allows it; a refusal throws before `finish()`.
        public func finish(_ transaction: Transaction) async throws {
            try finish(storeKit2: transaction.id)
            await transaction.finish()
        }

        /// Finishes a transaction whose signature did not verify, so StoreKit stops delivering it;
        /// the ledger keeps it as an anomaly (``finishUnverified(storeKit2:)``). Throws, before
        /// `finish()`, for one never recorded as unverified.
        public func finish(unverified transaction: Transaction) async throws {
            try finishUnverified(storeKit2: transaction.id)
            await transaction.finish()
        }

        /// Registers products fetched with `Product.products(for:)`.
        public func register(_ products: [Product]) throws {
            try register(products.map(ProductValue.init))
        }
    }

    extension StoreKit2TransactionValue {
        /// What the recorder reads of a verified transaction.
        ///
        /// No `#available` check at or below the package's floors (iOS 16, macOS 13, tvOS 16,
        /// watchOS 9, visionOS 1): Swift warns that such a check is unnecessary. visionOS has every
        /// field from its first release, so it takes them directly, in a branch of its own.
        public init(_ t: Transaction) {
            var revocationReason: String?
            if let r = t.revocationReason {
                revocationReason = r == .developerIssue ? "developerIssue" : "other"
            }
            self.init(
                id: t.id, originalID: t.originalID, productID: t.productID, productKind: ProductKind(t.productType),
                purchasedQuantity: t.purchasedQuantity, purchaseDate: t.purchaseDate, appAccountToken: t.appAccountToken,
                revocationDate: t.revocationDate, revocationReason: revocationReason, reason: nil, price: t.price,
                ownership: t.ownershipType == .familyShared ? .familyShared : .purchased)
            // `currency` and `environment`: iOS 16, macOS 13, tvOS 16, watchOS 9, the floors.
            currency = t.currency?.identifier
            switch t.environment {
            case .sandbox: environment = .sandbox
            case .xcode: environment = .xcode
            default: environment = .production
            }
            #if os(visionOS)
                reason = t.reason == .renewal ? .renewal : .purchase
                storefront = t.storefront.countryCode
            #else
                if #available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, *) {
                    reason = t.reason == .renewal ? .renewal : .purchase
                    storefront = t.storefront.countryCode
                } else {
                    // iOS 16 and its peers: the field that `storefront` replaced in the 17 releases.
                    storefront = Self.storefront(current: nil, older: deprecatedStoreKit.storefrontCountryCode(of: t))
                }
            #endif
            if #available(iOS 17.2, macOS 14.2, tvOS 17.2, watchOS 10.2, visionOS 1.1, *) {
                offer = t.offer.flatMap { o in OfferType(o.type).map { Offer(type: $0, id: o.id) } }
            } else {
                offer = deprecatedStoreKit.offer(of: t)
            }
        }
    }

    extension OfferType {
        init?(_ type: Transaction.OfferType) {
            self.init(storeKit2RawValue: type.rawValue)
        }
    }

    extension ProductValue {
        /// What the recorder reads of a product: its id, type, price, currency and display name.
        public init(_ p: Product) {
            self.init(
                productIdentifier: p.id, kind: ProductKind(p.type) ?? .nonConsumable, price: p.price,
                currencyCode: p.priceFormatStyle.currencyCode, title: p.displayName)
        }
    }

    extension ProductKind {
        init?(_ type: Product.ProductType) {
            switch type {
            case .consumable: self = .consumable
            case .nonConsumable: self = .nonConsumable
            case .autoRenewable: self = .autoRenewable
            case .nonRenewable: self = .nonRenewing
            default: return nil
            }
        }
    }
#endif
