public import Foundation
public import PurchaseLedger

// StoreKitRecorder's StoreKit 2 and Background Assets parts (StoreKitRecorder.swift has the rest).
extension StoreKitRecorder {
    // MARK: - StoreKit 2

    /// Where a StoreKit 2 transaction came from.
    public enum StoreKit2Source: String, Sendable {
        /// `Transaction.updates`: Ask to Buy approvals, purchases on other devices, refunds.
        case updates
        /// `Transaction.unfinished`, read at launch.
        case unfinished
        /// `Transaction.currentEntitlements`, read at launch.
        case currentEntitlements
        /// The transaction of a `Product.purchase()` that succeeded.
        case purchase
        /// `Transaction.all`, read at launch to find refunds and revocations that happened while
        /// the app was not running: only those are recorded (a transaction the ledger never saw is
        /// recorded with its revocation; one it holds gets the revocation it lacks). Running it
        /// again records nothing new.
        case reconcile
    }

    /// The ledger id of a StoreKit 2 transaction: `sk2-<id>`.
    public static func transactionID(storeKit2 id: UInt64) -> String { "sk2-\(id)" }

    /// Records StoreKit 2 transactions. What the ledger shows already (the same transactions read
    /// again at every launch) adds nothing; a purchase new to the ledger is its payment and
    /// purchase, a restore (another originalID, not a renewal) a `transactionRestored` of that
    /// original, a renewal a purchase of its own; a revocation date adds `transactionRevoked`.
    public func record(_ transactions: [StoreKit2TransactionValue], from source: StoreKit2Source) {
        for t in transactions {
            if source == .reconcile {
                let recorded = ledger.currentState.transactions[Self.transactionID(storeKit2: t.id)]
                guard t.revocationDate != nil, recorded?.revoked != true else { continue }
            }
            record { try self.events(for: t) }
        }
    }

    /// A StoreKit 2 transaction whose signature did not verify (`VerificationResult.unverified`):
    /// kept in the log as a purchase marked `unverified` with StoreKit's verification error, which
    /// the ledger stores as an `unverifiedTransaction` anomaly and never applies (no ownership, no
    /// revenue). Recorded once per transaction.
    public func unverified(storeKit2 id: UInt64, product: String, purchaseDate: Date? = nil, error: StoreError) {
        let transaction = Self.transactionID(storeKit2: id)
        record {
            let seen = try ledger.events(inStream: "transaction:" + transaction).contains { $0.anomaly == .unverifiedTransaction }
            guard !seen else { return [] }
            let why = "\(error.domain) \(error.code): \(error.message)"
            return [
                Event(
                    at: purchaseDate.map(Timestamp.init) ?? clock(),
                    .transactionPurchased(
                        transaction: transaction, product: product, storeTransactionId: String(id), terms: PurchaseTerms(unverified: why)))
            ]
        }
    }

    /// StoreKit 1's `paymentQueue(_:didRevokeEntitlementsForProductIdentifiers:)`: Family Sharing
    /// (or a refund) took these products away. Each transaction of theirs that still grants them
    /// is recorded as revoked, reason `entitlementRevoked`; a second call records nothing.
    public func revokedEntitlements(productIdentifiers: [String]) {
        record {
            let state = ledger.currentState
            let products = Set(productIdentifiers.map { Identifier.normalize($0) })
            let at = clock()
            return state.transactions.values.filter { products.contains($0.product) && $0.grantsOwnership }
                .map { Event(at: at, .transactionRevoked(transaction: $0.transaction, reason: "entitlementRevoked")) }
        }
    }

    func events(for t: StoreKit2TransactionValue) throws -> [Event] {
        let id = Self.transactionID(storeKit2: t.id)
        let state = ledger.currentState
        let recorded = state.transactions[id]
        var terms = t.terms
        // A refunded transaction's statement says so: it goes with the revocation, not the purchase
        // (a purchase carrying a refund's statement is flagged).
        let signed = terms.signedTransaction
        if t.revocationDate != nil { terms.signedTransaction = nil }
        let user = t.appAccountToken?.uuidString.lowercased()
        let bought = Timestamp(t.purchaseDate)
        var events: [Event] = []
        // StoreKit 2 reports a purchase once it is paid; the same event whether or not the ledger
        // saw the payment being queued.
        let purchased = Event(
            at: bought,
            .transactionPurchased(transaction: id, product: t.productID, user: user, storeTransactionId: String(t.id), downloads: nil, terms: terms))
        if recorded == nil {
            if t.isRestore {
                events.append(
                    Event(
                        at: bought,
                        .transactionRestored(
                            transaction: id, originalTransaction: Self.transactionID(storeKit2: t.originalID), product: t.productID,
                            user: user, storeTransactionId: String(t.id), downloads: nil, terms: terms)))
            } else {
                // The quantity lives on the payment; an unregistered product can only be observed.
                if state.products[Identifier.normalize(t.productID)] != nil {
                    events.append(Event(at: bought, .paymentQueued(transaction: id, product: t.productID, quantity: max(1, min(10, t.purchasedQuantity)), user: user)))
                }
                events.append(purchased)
            }
        } else if let recorded, recorded.state == .purchasing || recorded.state == .deferred {
            events.append(purchased)
        }
        if let revoked = t.revocationDate, recorded?.revoked != true {
            events.append(
                Event(
                    at: Timestamp(revoked),
                    .transactionRevoked(transaction: id, reason: t.revocationReason ?? "revoked", signedTransaction: signed)))
        }
        return events
    }

    // MARK: - Background Assets: asset packs

    /// Records an asset pack in the catalog at `version`, unlocked by the purchase of any of
    /// `unlockedBy` (empty: free): what the app knows from its own configuration (which products
    /// unlock which packs is the app's rule, not Background Assets'). Recording the same or an
    /// older version again records nothing.
    public func assetPackPublished(id: String, version: Int, unlockedBy: [String] = []) throws {
        let state = ledger.currentState
        let known = state.assetPack(Identifier.normalize(id))
        if let published = known?.publishedVersion, published >= version,
            Set(unlockedBy.map { Identifier.normalize($0) }).isSubset(of: Set(known?.unlockedBy ?? []))
        {
            return
        }
        try ledger.append(Event(at: clock(), .assetPackPublished(pack: id, version: version, unlockedBy: unlockedBy)))
    }

    /// One of `AssetPackManager.statusUpdates`. Never fails: what the ledger cannot take goes to
    /// `onError`, and an update that breaks a rule is stored as an anomaly.
    public func assetPackStatusUpdate(_ update: AssetPackStatusUpdateValue) {
        record { [update.event(at: self.clock())] }
    }

    /// The pack left the device: `remove(assetPackWithID:)` returned, or `checkForUpdates()`
    /// listed it in `removedIDs`.
    public func assetPackRemoved(id: String) {
        record { [Event(at: self.clock(), .assetPackRemoved(pack: id))] }
    }

    /// Records that the app opens the pack's files, needing at least `version`; throws
    /// `assetPackNotReady` (and records nothing) when that version is not on the device or its
    /// unlocking purchase is not in force: the app must not read the files then.
    public func openAssetPack(id: String, version: Int) throws {
        try ledger.append(Event(at: clock(), .assetPackOpened(pack: id, version: version)))
    }

    /// Records the finish of a StoreKit 2 transaction; throws when the ledger refuses it, and then
    /// the app must not call `finish()`.
    public func finish(storeKit2 id: UInt64) throws {
        try ledger.append(Event(at: clock(), .transactionFinished(transaction: Self.transactionID(storeKit2: id), discardContent: false)))
    }

    /// Whether the app has to act on this StoreKit 2 transaction: deliver what it bought and finish
    /// it (one the ledger holds as purchased or restored, neither finished nor revoked), or only
    /// finish it (one whose signature did not verify, kept as an `unverifiedTransaction` anomaly).
    /// The Apple layer hands such transactions from `Transaction.updates` and
    /// `Transaction.unfinished` to the app's `deliver` handler (``startStoreKit2(deliver:)``).
    public func awaitsFinish(storeKit2 id: UInt64) -> Bool {
        let transaction = Self.transactionID(storeKit2: id)
        if let t = ledger.currentState.transactions[transaction] {
            return !t.finished && !t.revoked && (t.state == .purchased || t.state == .restored)
        }
        return isUnverified(transaction)
    }

    /// Allows finishing a StoreKit 2 transaction whose signature did not verify, so StoreKit stops
    /// delivering it at every launch. The ledger keeps it as the `unverifiedTransaction` anomaly
    /// it was recorded as (never a purchase: it grants nothing and counts in no revenue), so there
    /// is nothing to record; throws `malformedInput` for a transaction never recorded as
    /// unverified, and then the app must not call `finish()`.
    public func finishUnverified(storeKit2 id: UInt64) throws {
        let transaction = Self.transactionID(storeKit2: id)
        guard ledger.currentState.transactions[transaction] == nil, isUnverified(transaction) else {
            throw LedgerError.make(
                .malformedInput, "transaction \(transaction) was not recorded as unverified: finish it with finish(storeKit2:)")
        }
    }

    /// Whether the ledger holds `transaction` as an unverified purchase.
    func isUnverified(_ transaction: String) -> Bool {
        (try? ledger.events(inStream: "transaction:" + transaction).contains { $0.anomaly == .unverifiedTransaction }) ?? false
    }
}
