// The rules of one aggregate; ``Reducer/decide(_:_:)`` dispatches each event to its function.

/// Transactions: queued, deferred, purchased, failed, restored, revoked and finished, each
/// transition looked up in ``TransactionMachine``; the finish rules (no finish before the content
/// is copied out) and the money a purchase fixes.
extension Reducer {
    /// `paymentQueued`.
    static func queuePayment(_ s: inout LedgerState, _ t: String, _ product: String, _ quantity: Int, _ user: String?, _ e: Event) throws(LedgerError) -> Outcome {
        if let existing = s.transactions[t] {
            if existing.queuedAt != nil, existing.product == product, existing.quantity == quantity, existing.user == user {
                return .ignored
            }
            throw .violation(.duplicateTransaction, "transaction \(t) already exists; a new payment needs a new transaction id", e)
        }
        guard let product = registered(product, s) else {
            throw .violation(.unknownProduct, "product \(product) was never registered", e)
        }
        var record = TransactionRecord(transaction: t, product: product, user: user, quantity: quantity, state: .purchasing)
        record.queuedAt = e.at
        s.transactions[t] = record
        return .applied
    }

    /// `transactionDeferred`.
    static func deferTransaction(_ s: inout LedgerState, _ t: String, _ e: Event) throws(LedgerError) -> Outcome {
        switch try verdict(TransactionMachine.deferral, transaction(s, t, e), e) {
        case .apply:
            s.transactions.update(t) { record in
                record.state = .deferred
                record.wasDeferred = true
            }
            return .applied
        case .redelivery: return .unchanged
        }
    }

    /// `transactionPurchased`.
    static func purchase(_ s: inout LedgerState, _ t: String, _ product: String?, _ user: String?, _ storeID: String?, _ specs: [DownloadSpec]?, _ terms: PurchaseTerms, _ e: Event)
        throws(LedgerError) -> Outcome
    {
        if let why = terms.unverified {
            throw .violation(.unverifiedTransaction, "transaction \(t)'s store signature did not verify (\(why)): kept, never applied", e)
        }
        // Only a signed purchase is compared (the catalog lookup is not made for the others).
        var disagreement: String?
        if let jws = terms.signedTransaction {
            let owned = product ?? s.transactions[t]?.product
            disagreement = signedDisagreement(
                jws, product: owned, quantity: s.transactions[t]?.quantity, storeID: storeID, original: nil,
                terms: owned.map { fixed(terms, paid(terms, $0, s)) } ?? terms)
        }
        guard let record = s.transactions[t] else {
            guard let product else {
                throw .malformed("transaction \(t) is unknown; a purchase the ledger has not seen queued must carry its product", event: e)
            }
            return flag(try arrive(&s, t, product, user, storeID, specs, terms, as: .purchased, original: nil, e), disagreement)
        }
        if let product, product != record.product {
            throw .violation(.duplicateTransaction, "transaction \(t) is for product \(record.product), not \(product)", e)
        }
        if let user, let recorded = record.user, user != recorded {
            throw .violation(.duplicateTransaction, "transaction \(t) belongs to another user than the one this purchase names", e)
        }
        switch try verdict(TransactionMachine.purchase, record, e) {
        case .apply:
            try checkNewDownloads(s, specs, e)
            let (owned, revoked) = (record.product, record.revoked)
            _ = consume record  // so the record below is changed in place, not copied
            let fixed = paid(terms, owned, s)
            s.transactions.update(t) { record in
                record.state = .purchased
                record.storeTransactionId = storeID
                record.purchasedAt = e.at
                record.paid = fixed
                if record.user == nil { record.user = user }
            }
            deliver(&s, t, specs ?? [])
            if !revoked { s.owners[owned, default: 0] += 1 }
            return flag(.applied, disagreement)
        case .redelivery:
            guard storeID == record.storeTransactionId, delivered(s, record) == (specs ?? []), !record.paid.contradicts(terms) else {
                throw .violation(
                    .duplicateTransaction, "transaction \(t) was already purchased with another store id, other downloads or other terms", e)
            }
            return .unchanged
        }
    }

    /// `transactionFailed`.
    static func fail(_ s: inout LedgerState, _ t: String, _ error: StoreError, _ e: Event) throws(LedgerError) -> Outcome {
        let record = try transaction(s, t, e)
        switch try verdict(TransactionMachine.failure, record, e) {
        case .apply:
            _ = consume record
            s.transactions.update(t) { record in
                record.state = .failed
                record.error = error
                record.failedAt = e.at
            }
            return .applied
        case .redelivery:
            guard record.error == error else {
                throw .violation(.illegalTransactionTransition, "transaction \(t) already failed with another error", e)
            }
            return .unchanged
        }
    }

    /// `transactionRestored`.
    static func restore(
        _ s: inout LedgerState, _ t: String, _ original: String, _ product: String, _ user: String?, _ storeID: String?, _ specs: [DownloadSpec]?, _ terms: PurchaseTerms,
        _ e: Event
    ) throws(LedgerError) -> Outcome {
        if let why = terms.unverified {
            throw .violation(.unverifiedTransaction, "transaction \(t)'s store signature did not verify (\(why)): kept, never applied", e)
        }
        if let record = s.transactions[t] {
            var same = record.state == .restored && record.originalTransaction == original && record.product == product
            same = same && (user == nil || user == record.user) && storeID == record.storeTransactionId
            same = same && delivered(s, record) == (specs ?? []) && !record.paid.contradicts(terms)
            guard same else {
                throw .violation(.duplicateTransaction, "transaction \(t) is already in the ledger, and not as this restore", e)
            }
            return .unchanged
        }
        let disagreement =
            terms.signedTransaction == nil
            ? nil
            : signedDisagreement(
                terms.signedTransaction, product: product, quantity: nil, storeID: storeID, original: s.transactions[original]?.storeTransactionId,
                terms: fixed(terms, paid(terms, product, s)))
        return flag(try arrive(&s, t, product, user, storeID, specs, terms, as: .restored, original: original, e), disagreement)
    }

    /// What a signed transaction an observation carries states otherwise than the observation
    /// (``SignedTransaction/Claims/differences(product:quantity:storeTransactionID:originalTransaction:terms:revoking:)``),
    /// as one sentence; nil when they agree, when it carries none, or when its body was erased
    /// (what it stated is gone with its user). `original`: the store id of the transaction a
    /// restore names, which Apple's `originalTransactionId` must be.
    static func signedDisagreement(
        _ jws: String?, product: String?, quantity: Int?, storeID: String?, original: String?, terms: PurchaseTerms, revoking: Bool = false
    ) -> String? {
        let found = signedDifferences(jws, product: product, quantity: quantity, storeID: storeID, original: original, terms: terms, revoking: revoking)
        return found.isEmpty ? nil : found.map(\.description).joined(separator: "; ")
    }

    static func signedDifferences(
        _ jws: String?, product: String?, quantity: Int?, storeID: String?, original: String?, terms: PurchaseTerms, revoking: Bool = false
    ) -> [SignedFieldDifference] {
        guard let jws, let parts = try? SignedTransaction.parts(ofJWS: jws),
            let claims = try? SignedTransaction.claims(payloadSegment: parts.payload)
        else { return [] }
        return claims.differences(
            product: product, quantity: quantity, storeTransactionID: storeID, originalTransaction: original, terms: terms, revoking: revoking)
    }

    /// `terms` with the price and currency the transaction is fixed at (``paid(_:_:_:)``: the
    /// event's own, else the catalog's): what Apple's statement must say, whichever gave it.
    static func fixed(_ terms: PurchaseTerms, _ paid: PaidTerms) -> PurchaseTerms {
        guard terms.price == nil, let price = paid.price, let currency = paid.currency else { return terms }
        var terms = terms
        terms.price = price
        terms.currency = currency
        return terms
    }

    /// A transaction's fixed terms as the terms an event would state.
    static func stated(_ paid: PaidTerms) -> PurchaseTerms {
        PurchaseTerms(
            price: paid.price, currency: paid.currency, storefront: paid.storefront, environment: paid.environment, ownership: paid.ownership,
            offer: paid.offer)
    }

    /// What a stored purchase, restore or revocation states otherwise than its own signed
    /// transaction, in `state` (the state after it): the comparison its rule made.
    static func signedDifferences(of body: EventBody, after state: LedgerState) -> [SignedFieldDifference] {
        switch body {
        case .transactionPurchased(let t, let product, _, let storeID, _, let terms):
            let record = state.transactions[t]
            return signedDifferences(
                terms.signedTransaction, product: product ?? record?.product, quantity: record?.quantity, storeID: storeID, original: nil,
                terms: record.map { fixed(terms, $0.paid) } ?? terms)
        case .transactionRestored(let t, let original, let product, _, let storeID, _, let terms):
            return signedDifferences(
                terms.signedTransaction, product: product, quantity: nil, storeID: storeID, original: state.transactions[original]?.storeTransactionId,
                terms: state.transactions[t].map { fixed(terms, $0.paid) } ?? terms)
        case .transactionRevoked(let t, _, let jws):
            let record = state.transactions[t]
            return signedDifferences(
                jws, product: record?.product, quantity: record?.quantity, storeID: record?.storeTransactionId, original: nil,
                terms: record.map { stated($0.paid) } ?? .none, revoking: true)
        default:
            return []
        }
    }

    /// `outcome`, flagged `signedFieldsDiffer` when the observation disagrees with its own signed
    /// transaction: applied as reported, never silently trusted.
    static func flag(_ outcome: Outcome, _ disagreement: String?) -> Outcome {
        guard disagreement != nil, outcome == .applied else { return outcome }
        return .flagged(.signedFieldsDiffer)
    }

    /// `transactionRevoked`.
    static func revoke(_ s: inout LedgerState, _ t: String, _ reason: String, _ jws: String?, _ e: Event) throws(LedgerError) -> Outcome {
        let record = try transaction(s, t, e)
        let disagreement =
            jws == nil
            ? nil
            : signedDisagreement(
                jws, product: record.product, quantity: record.quantity, storeID: record.storeTransactionId, original: nil, terms: stated(record.paid),
                revoking: true)
        if try verdict(TransactionMachine.revocation, record, e) == .redelivery {
            guard record.revocationReason == reason else {
                throw .violation(.illegalTransactionTransition, "transaction \(t) was already revoked for another reason", e)
            }
            return .unchanged
        }
        let product = record.product
        _ = consume record
        s.transactions.update(t) { record in
            record.revoked = true
            record.revocationReason = reason
            record.revokedAt = e.at
        }
        s.owners[product, default: 0] -= 1
        return flag(.applied, disagreement)
    }

    /// `transactionFinished`.
    static func finish(_ s: inout LedgerState, _ t: String, discard: Bool, _ e: Event) throws(LedgerError) -> Outcome {
        let record = try transaction(s, t, e)
        try checkFinish(s, record, discard: discard, e)
        let downloads = record.downloads
        _ = consume record
        var discarded = false
        for id in downloads {
            s.downloads.update(id) { download in
                if download.inFlight {
                    // Normally already cancelled by the events `plan` stored before this finish.
                    download.state = .cancelled
                    download.cancelReason = .transactionFinished
                    download.lastActivityAt = e.at
                } else if download.state == .finished && !download.copiedOut && discard {
                    download.discarded = true
                }
                download.contentURL = nil
                discarded = discarded || download.discarded
            }
        }
        s.transactions.update(t) { record in
            record.finished = true
            record.finishedAt = e.at
            if discard && discarded { record.discardedContent = true }
        }
        return .applied
    }

    /// The finish rules, in precedence order: alreadyFinished > finishWhilePurchasing /
    /// finishWhileDeferred > finishBeforeCopyOut.
    static func checkFinish(_ s: LedgerState, _ record: TransactionRecord, discard: Bool, _ e: Event) throws(LedgerError) {
        let t = record.transaction
        if record.finished {
            throw .violation(.alreadyFinished, "transaction \(t) was already finished", e)
        }
        switch record.state {
        case .purchasing:
            throw .violation(.finishWhilePurchasing, "transaction \(t) is still purchasing; the store throws when a purchasing transaction is finished", e)
        case .deferred:
            throw .violation(.finishWhileDeferred, "transaction \(t) is deferred (waiting for Ask to Buy); wait for it to be purchased or failed", e)
        default: break
        }
        if !discard {
            let uncopied = record.downloads.filter { id in
                guard let d = s.downloads[id] else { return false }
                return d.state == .finished && !d.copiedOut
            }
            if !uncopied.isEmpty {
                let list = uncopied.joined(separator: ", ")
                let noun = uncopied.count == 1 ? "download \(list) finished but its content was" : "downloads \(list) finished but their content was"
                throw .violation(
                    .finishBeforeCopyOut, "\(noun) never copied out; finishing now would delete it (copy it out first, or finish with discardContent)", e, downloads: uncopied)
            }
        }
    }

    /// A transition of a known transaction, looked up in ``TransactionMachine``: apply it, or
    /// compare a redelivery with the record; from any other state, `illegalTransactionTransition`.
    static func verdict(_ row: TransactionMachine.Transition, _ record: TransactionRecord, _ e: Event) throws(LedgerError) -> Applicable {
        switch row.verdict(record) {
        case .apply: return .apply
        case .redelivery: return .redelivery
        case .illegal: throw .violation(.illegalTransactionTransition, "transaction \(record.transaction) is \(record.state.rawValue); \(row.requirement)", e)
        }
    }

    /// A verdict the reducer can act on (the illegal one has thrown).
    enum Applicable {
        case apply, redelivery
    }

    /// What a purchase or restore fixes of its price (contract 5.1): the event's own price, else
    /// the registration of `product` in force now, at this point of the log; never changed after.
    static func paid(_ terms: PurchaseTerms, _ product: String, _ s: LedgerState) -> PaidTerms {
        var paid = PaidTerms()
        if let price = terms.price, let currency = terms.currency {
            (paid.price, paid.currency, paid.priceSource) = (price, currency, .event)
        } else if let registration = s.products[product]?.registration {
            (paid.price, paid.currency, paid.priceSource) = (registration.price, registration.currency, .catalog)
        }
        paid.storefront = terms.storefront
        paid.environment = terms.environment ?? .production
        paid.ownership = terms.ownership ?? .purchased
        paid.offer = terms.offer
        return paid
    }

    static func transaction(_ s: LedgerState, _ t: String, _ e: Event) throws(LedgerError) -> TransactionRecord {
        guard let record = s.transactions[t] else {
            throw .malformed("transaction \(t) is unknown to this ledger", event: e)
        }
        return record
    }

    /// A transaction the ledger first sees purchased or restored (not queued here before): it is
    /// created granting its product, with its downloads delivered.
    static func arrive(
        _ s: inout LedgerState, _ t: String, _ product: String, _ user: String?, _ storeID: String?, _ specs: [DownloadSpec]?,
        _ terms: PurchaseTerms, as state: TransactionStatus, original: String?, _ e: Event
    ) throws(LedgerError) -> Outcome {
        guard let product = registered(product, s) else {
            throw .violation(.unknownProduct, "product \(product) was never registered", e)
        }
        try checkNewDownloads(s, specs, e)
        var created = TransactionRecord(transaction: t, product: product, user: user, quantity: 1, state: state)
        created.originalTransaction = original
        created.storeTransactionId = storeID
        created.purchasedAt = e.at
        created.paid = paid(terms, product, s)
        s.transactions[t] = created
        deliver(&s, t, specs ?? [])
        s.owners[product, default: 0] += 1
        return .applied
    }

    /// A purchase or restore whose downloads reuse an id already in the ledger, or repeat one,
    /// breaks `duplicateDownload`.
    static func checkNewDownloads(_ s: LedgerState, _ specs: [DownloadSpec]?, _ e: Event) throws(LedgerError) {
        var seen = Set<String>()
        for spec in specs ?? [] {
            if AssetPacks.isReserved(spec.download) {
                throw .malformed("download id \(spec.download): ids starting with \(AssetPacks.prefix) are reserved for asset packs", event: e)
            }
            if s.downloads[spec.download] != nil || !seen.insert(spec.download).inserted {
                throw .violation(.duplicateDownload, "download id \(spec.download) is already in the ledger, or named twice", e)
            }
        }
    }

    static func deliver(_ s: inout LedgerState, _ t: String, _ specs: [DownloadSpec]) {
        for spec in specs {
            s.downloads[spec.download] = DownloadRecord(
                download: spec.download, transaction: t, content: spec.content,
                contentVersion: spec.contentVersion, contentLength: spec.contentLength)
        }
        guard !specs.isEmpty,
            let product = s.transactions.update(
                t,
                { record in
                    record.downloads = specs.map(\.download)
                    return record.product
                })
        else { return }
        publish(&s, product, specs.map { ($0.content, $0.contentVersion) })
    }

    /// The downloads a transaction was delivered with, as the store described them.
    static func delivered(_ s: LedgerState, _ record: TransactionRecord) -> [DownloadSpec] {
        record.downloads.compactMap { id in
            guard let d = s.downloads[id], let content = d.content, let version = d.contentVersion else { return nil }
            return DownloadSpec(download: id, content: content, contentVersion: version, contentLength: d.contentLength ?? 0)
        }
    }
}
