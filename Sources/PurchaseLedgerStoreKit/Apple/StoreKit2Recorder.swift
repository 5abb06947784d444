// StoreKit 2 (Transaction, Product): the Apple-only layer. It copies verified transactions into
// StoreKit2TransactionValue; what they become in the ledger is decided in StoreKitRecorder, tested
// on Linux. This file is parsed there (swiftc -parse) but compiled only where StoreKit exists.
#if canImport(StoreKit)
    import Foundation
    import PurchaseLedger
    import StoreKit

    extension StoreKitRecorder {
        /// At launch: records `Transaction.unfinished` and `Transaction.currentEntitlements` (what the
        /// ledger shows already adds nothing), then listens to `Transaction.updates` for as long as
        /// the returned task runs.
        public func startStoreKit2() -> Task<Void, Never> {
            Task.detached(priority: .utility) { [self] in
                for await result in Transaction.unfinished {
                    if case .verified(let t) = result { record([StoreKit2TransactionValue(t)], from: .unfinished) }
                }
                for await result in Transaction.currentEntitlements {
                    if case .verified(let t) = result { record([StoreKit2TransactionValue(t)], from: .currentEntitlements) }
                }
                for await result in Transaction.updates {
                    if case .verified(let t) = result { record([StoreKit2TransactionValue(t)], from: .updates) }
                }
            }
        }

        /// Buys `product` and records the transaction when the purchase succeeds (a pending one,
        /// Ask to Buy, arrives later through `Transaction.updates`).
        public func purchase(_ product: Product, options: Set<Product.PurchaseOption> = []) async throws -> Product.PurchaseResult {
            let result = try await product.purchase(options: options)
            if case .success(.verified(let t)) = result {
                record([StoreKit2TransactionValue(t)], from: .purchase)
            }
            return result
        }

        /// Finishes the transaction if the ledger allows it; a refusal throws before `finish()`.
        public func finish(_ transaction: Transaction) async throws {
            try finish(storeKit2: transaction.id)
            await transaction.finish()
        }

        /// Registers products fetched with `Product.products(for:)`.
        public func register(_ products: [Product]) throws {
            try register(products.map(ProductValue.init))
        }
    }

    extension StoreKit2TransactionValue {
        /// What the recorder reads of a verified transaction.
        public init(_ t: Transaction) {
            var reason: Reason?
            if #available(iOS 17.0, macOS 14.0, tvOS 17.0, watchOS 10.0, visionOS 1.0, *) {
                reason = t.reason == .renewal ? .renewal : .purchase
            }
            var revocationReason: String?
            if let r = t.revocationReason {
                revocationReason = r == .developerIssue ? "developerIssue" : "other"
            }
            self.init(
                id: t.id, originalID: t.originalID, productID: t.productID, productKind: ProductKind(t.productType),
                purchasedQuantity: t.purchasedQuantity, purchaseDate: t.purchaseDate, appAccountToken: t.appAccountToken,
                revocationDate: t.revocationDate, revocationReason: revocationReason, reason: reason)
        }
    }

    extension ProductValue {
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
