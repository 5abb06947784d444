// The rules of one aggregate; ``Reducer/decide(_:_:)`` dispatches each event to its function.

/// The catalog: products, their content versions, content deleted from the device and promoted
/// payments. A product must be registered before anything names it.
extension Reducer {
    /// `productRegistered`.
    static func registerProduct(_ s: inout LedgerState, _ registration: ProductRegistration, _ e: Event) throws(LedgerError) -> Outcome {
        let previous = s.products[registration.product]
        publish(&s, registration.product, registration.contents.map { ($0.content, $0.contentVersion) })
        if previous?.registration == registration { return .unchanged }
        s.products[registration.product] = ProductRecord(registration: registration, registeredAt: e.at)
        return .applied
    }

    /// `contentVersionPublished`.
    static func publishContentVersion(_ s: inout LedgerState, _ product: String, _ content: String, _ version: ContentVersion, _ e: Event) throws(LedgerError) -> Outcome {
        guard s.products[product] != nil else {
            throw .violation(.unknownProduct, "product \(product) was never registered", e)
        }
        let key = ContentKey(product: product, content: content)
        if let latest = s.publishedVersions[key], !version.isNewer(than: latest) { return .unchanged }
        s.publishedVersions[key] = version
        return .applied
    }

    /// `contentDeleted`.
    static func deleteContent(_ s: inout LedgerState, _ product: String, _ e: Event) throws(LedgerError) -> Outcome {
        guard s.products[product] != nil else {
            throw .violation(.unknownProduct, "product \(product) was never registered", e)
        }
        for key in s.copiedContent.keys where key.product == product {
            s.copiedContent[key] = nil
        }
        return .applied
    }

    /// `storePaymentPromoted`.
    static func promotePayment(_ s: inout LedgerState, _ product: String, _ e: Event) throws(LedgerError) -> Outcome {
        guard s.products[product] != nil else {
            throw .violation(.unknownProduct, "product \(product), promoted on the App Store, was never registered", e)
        }
        return .applied
    }

    /// The catalog's own copy of a registered product id, or nil for a product never
    /// registered: a record made with it shares the catalog's string instead of holding one of
    /// its own (a product id is longer than Swift keeps inline, and a large ledger holds a
    /// hundred thousand transactions of a few hundred products).
    @inline(__always)
    static func registered(_ product: String, _ s: LedgerState) -> String? {
        guard let i = s.products.index(forKey: product) else { return nil }
        return s.products.keys[i]
    }

    static func publish(_ s: inout LedgerState, _ product: String, _ versions: [(String, ContentVersion)]) {
        for (content, version) in versions {
            let key = ContentKey(product: product, content: content)
            if let latest = s.publishedVersions[key], !version.isNewer(than: latest) { continue }
            s.publishedVersions[key] = version
        }
    }
}
