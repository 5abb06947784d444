/// Where a transaction happened, as StoreKit's `AppStore.Environment` says.
public enum StoreEnvironment: String, Sendable, Hashable, Codable, CaseIterable {
    case production, sandbox, xcode
}

/// Who owns a transaction, as StoreKit's `Transaction.OwnershipType` says. A family member's
/// `familyShared` transaction carries no money: the organizer's own purchase does.
public enum Ownership: String, Sendable, Hashable, Codable, CaseIterable {
    case purchased, familyShared
}

/// The kinds of offer StoreKit reports on a transaction (`Transaction.Offer.OfferType`).
public enum OfferType: String, Sendable, Hashable, Codable, CaseIterable {
    case introductory, promotional, code, winBack
}

/// The offer a transaction was bought with: a free trial or introductory price, a promotional
/// offer, an offer code, a win-back offer. Its price is the transaction's own `price`.
public struct Offer: Sendable, Hashable, Codable {
    /// Introductory, promotional, offer code or win-back (`offer.type`).
    public var type: OfferType
    /// The offer's identifier, when it has one (introductory offers have none).
    public var id: String?

    /// An offer of `type`, with its identifier when it has one.
    public init(type: OfferType, id: String? = nil) {
        self.type = type
        self.id = id
    }
}

/// What the store reported a purchase or restore was paid, where and by whom (contract 5.1).
/// Every field is optional: an absent `environment` means production, an absent `ownership`
/// means purchased, and an absent `price` means the price of the product's registration in force
/// at that point of the ledger.
///
/// ```swift
/// let terms = PurchaseTerms(price: "0.99", currency: "USD", storefront: "USA")
/// try ledger.append(Event(at: now, .transactionPurchased(transaction: "t1", terms: terms)))
/// ```
public struct PurchaseTerms: Sendable, Hashable {
    /// The fields, in one immutable box (nil: no terms): an event holds one pointer of them, so
    /// the events that have no terms (nearly all) stay as small as before. Inline, the terms made
    /// every event twice as large to copy, and a replay 12% slower.
    private final class Box: Sendable {
        let fields: Fields
        init(_ fields: Fields) { self.fields = fields }
    }

    struct Fields: Sendable, Hashable {
        var price: String?
        var currency: String?
        var storefront: String?
        var environment: StoreEnvironment?
        var ownership: Ownership?
        var offer: Offer?
        var unverified: String?
        var signedTransaction: String?
    }

    private var box: Box?

    private var fields: Fields {
        get { box?.fields ?? Fields() }
        set { box = newValue == Fields() ? nil : Box(newValue) }
    }

    /// The unit price paid, a decimal string in `currency` units ("0.99"; "0" for a free trial).
    /// Given with `currency` or not at all.
    public var price: String? {
        get { box?.fields.price }
        set { fields.price = newValue }
    }
    /// ISO 4217 (`USD`).
    public var currency: String? {
        get { box?.fields.currency }
        set { fields.currency = newValue }
    }
    /// ISO 3166-1 alpha-3, StoreKit's `Storefront.countryCode` (`USA`, `FRA`).
    public var storefront: String? {
        get { box?.fields.storefront }
        set { fields.storefront = newValue }
    }
    /// Production, sandbox or Xcode; nil means production.
    public var environment: StoreEnvironment? {
        get { box?.fields.environment }
        set { fields.environment = newValue }
    }
    /// Purchased or family-shared; nil means purchased.
    public var ownership: Ownership? {
        get { box?.fields.ownership }
        set { fields.ownership = newValue }
    }
    /// The offer the transaction was bought with, if any.
    public var offer: Offer? {
        get { box?.fields.offer }
        set { fields.offer = newValue }
    }
    /// Set when the store's signature of the transaction did not verify (StoreKit 2's
    /// `VerificationResult.unverified`): the verification error. Such a purchase is stored as an
    /// `unverifiedTransaction` anomaly and never applied: no ownership, no revenue.
    public var unverified: String? {
        get { box?.fields.unverified }
        set { fields.unverified = newValue }
    }

    /// Apple's own statement of the transaction: StoreKit 2's `VerificationResult.jwsRepresentation`
    /// (a compact JWS, ``SignedTransaction``), kept exactly as given. The fields it states and
    /// these terms state must agree, or the purchase is flagged `signedFieldsDiffer`. Personal:
    /// it holds the store's transaction ids, so `forget` erases it with its user.
    public var signedTransaction: String? {
        get { box?.fields.signedTransaction }
        set { fields.signedTransaction = newValue }
    }

    /// Terms with the given fields; nil leaves a field out. ``problem`` says whether they are valid.
    public init(
        price: String? = nil, currency: String? = nil, storefront: String? = nil, environment: StoreEnvironment? = nil,
        ownership: Ownership? = nil, offer: Offer? = nil, unverified: String? = nil, signedTransaction: String? = nil
    ) {
        fields = Fields(
            price: price, currency: currency, storefront: storefront, environment: environment, ownership: ownership, offer: offer,
            unverified: unverified, signedTransaction: signedTransaction)
    }

    /// Whether both have the same fields, every field compared.
    public static func == (a: PurchaseTerms, b: PurchaseTerms) -> Bool { a.box === b.box || a.fields == b.fields }
    /// Hashes every field.
    public func hash(into hasher: inout Hasher) { hasher.combine(fields) }

    /// No terms: the v1 form of a purchase.
    public static let none = PurchaseTerms()

    /// Whether no field is given (``none``).
    public var isEmpty: Bool { box == nil }

    /// Why these terms break the contract's rules, naming the field; nil when they do not.
    public var problem: String? {
        if (price == nil) != (currency == nil) {
            return "fields `price` and `currency` go together: give both or neither"
        }
        if let price, !JSONLines.isDecimal(price) {
            return "field `price` must be a decimal string such as \"4.99\" (\"0\" for a free trial)"
        }
        if let currency, !Self.isUpperLetters(currency, count: 3) {
            return "field `currency` must be an ISO 4217 code such as USD"
        }
        if let storefront, !Self.isUpperLetters(storefront, count: 3) {
            return "field `storefront` must be an ISO 3166-1 alpha-3 country code such as USA"
        }
        // A stored signed transaction may read as an erased marker; input refuses one
        // (``InputLimits``, JSON Lines), and a JWS is checked there.
        if let signedTransaction, !SignedTransaction.isErasedMarker(signedTransaction) {
            return SignedTransaction.problem(jws: signedTransaction)
        }
        return nil
    }

    /// Whether `text` is `count` capital letters A-Z: the shape of ISO 4217 and ISO 3166-1 alpha-3 codes.
    public static func isUpperLetters(_ text: String, count: Int) -> Bool {
        text.utf8.count == count && text.utf8.allSatisfy { $0 >= 65 && $0 <= 90 }
    }
}

/// What the ledger fixed of a transaction when it was purchased or restored: the price paid (its
/// event's own, else the product's registration in force then; nil when neither existed), and
/// where and by whom. Never changed by a later registration of the product.
public struct PaidTerms: Sendable, Hashable {
    /// The unit price paid, a decimal string in `currency` units; nil when neither the event nor a
    /// registration gave one.
    public var price: String?
    /// ISO 4217 (`USD`) of ``price``; nil with it.
    public var currency: String?
    /// ISO 3166-1 alpha-3 (`FRA`), when the store said it.
    public var storefront: String?
    /// Production unless the store said sandbox or Xcode.
    public var environment: StoreEnvironment = .production
    /// Purchased unless the store said family-shared.
    public var ownership: Ownership = .purchased
    /// The offer it was bought with, when the store said one.
    public var offer: Offer?
    /// Where `price` came from: `event` (the store reported it) or `catalog` (the registration in force).
    public var priceSource: PriceSource?

    /// No price, production, purchased, no offer: what a transaction holds before it is purchased.
    public init() {}

    /// Whether revenue totals count it: production, and owned by the one who paid.
    public var countsAsRevenue: Bool { environment == .production && ownership == .purchased }

    /// Whether `terms`, from a redelivered purchase or restore, contradict these. A redelivery
    /// may leave fields out.
    func contradicts(_ terms: PurchaseTerms) -> Bool {
        if let p = terms.price, priceSource != .event || p != price || terms.currency != currency { return true }
        if let s = terms.storefront, s != storefront { return true }
        if let e = terms.environment, e != environment { return true }
        if let o = terms.ownership, o != ownership { return true }
        if let o = terms.offer, o != offer { return true }
        return false
    }
}

/// Where a transaction's price came from.
public enum PriceSource: String, Sendable, Hashable, Codable, CaseIterable {
    /// The purchase or restore event carried it.
    case event
    /// The product's registration in force when it was purchased or restored.
    case catalog
}
