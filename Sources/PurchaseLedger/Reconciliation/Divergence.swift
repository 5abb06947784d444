import Foundation

/// One disagreement between what the device recorded and what Apple's signed record says
/// (docs/reconciling.md says what each kind means and what to do about it).
public struct Divergence: Sendable, Hashable {
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// Apple refunded the transaction; the device still grants its content.
        case refundNotSeen
        /// Apple revoked a Family Sharing transaction; the device still grants its content.
        case familyRevokeNotSeen
        /// Apple has a production purchase the device never recorded.
        case chargedNotRecorded
        /// A device purchase absent from a complete Apple history of its user.
        case recordedNotCharged
        case priceDiffers
        case ownershipDiffers
        case environmentDiffers
        /// A consumable the device finished that Apple's history still lists (only unfinished
        /// consumables are listed).
        case unfinishedAtApple
        /// A device transaction of one user names Apple's transaction of another: a forged,
        /// replayed or shared transaction id. It does not count as that user's purchase.
        case claimedByAnotherUser
        /// A record of Apple's in the log whose signature does not verify with the roots (written
        /// some other way than `apple-import`, or edited): it is compared with nothing.
        case appleRecordUnverified
    }

    public var kind: Kind
    /// In a fleet store: the device ledger whose transaction this is (nil in a ledger file).
    public var ledger: String? = nil
    /// The ledger's transaction, when the device recorded one.
    public var transaction: String?
    /// Apple's `transactionId` (the device's `storeTransactionId`).
    public var appleTransaction: String?
    public var user: String?
    public var product: String?
    /// What the device says, and what Apple says.
    public var device: String
    public var apple: String
    /// The seq of the device's event that shows its side (the purchase), if any.
    public var deviceSeq: Int64?
    /// The seq of the event that holds Apple's side (its record, or the complete history); in a
    /// fleet store, the number of Apple's record (`apple_transactions.record`).
    public var appleSeq: Int64?
    /// The notification that shows Apple's side, if one does.
    public var notification: String?
    /// The complete history that makes a `recordedNotCharged` (its revision).
    public var history: String?
}

/// Joins a ledger's device events and Apple's records (``EventBody/appleTransactionReceived(signedTransaction:source:user:)``
/// and the others) into ``Divergence`` rows: fed the events in log order, then asked.
///
/// ```swift
/// var reconciliation = Reconciliation()
/// try ledger.forEachEvent { e in reconciliation.add(e); return true }
/// let rows = await reconciliation.divergences(in: try ledger.state(atSeq: try ledger.lastSeq()), verifier: AppleSignatureVerifier())
/// ```
public struct Reconciliation: Sendable {
    private var records: [AppleRecord] = []
    private var histories: [(seq: Int64, revision: String, user: String?, at: Timestamp)] = []
    /// The seq of each transaction's purchase or restore event.
    private var arrivals: [String: Int64] = [:]
    /// When the ledger's first event happened: Apple's purchases before it predate the ledger.
    private var firstEventAt: Timestamp?

    public init() {}

    /// Takes one stored event, in log order.
    public mutating func add(_ e: RecordedEvent) {
        if e.event.body.subject != .apple, firstEventAt.map({ e.event.at < $0 }) ?? true { firstEventAt = e.event.at }
        switch e.event.body {
        case .transactionPurchased(let t, _, _, _, _, _), .transactionRestored(let t, _, _, _, _, _, _):
            if arrivals[t] == nil, e.anomaly == nil { arrivals[t] = e.seq }
        case .appleHistoryCompleted(let revision, let user):
            histories.append((e.seq, revision, user, e.event.at))
        case .appleTransactionReceived, .appleNotificationReceived:
            records.append(contentsOf: AppleRecord.records(in: e))
        default:
            break
        }
    }

    /// Whether any of Apple's records has been added.
    public var holdsAppleRecords: Bool { !records.isEmpty || !histories.isEmpty }

    /// Whether an event of Apple's record verifies as Apple's with `verifier`'s roots (its
    /// documents, at the time it was recorded): `apple`, or `invalid` with why; nil for another
    /// event. An erased record is `invalid` (its bodies are gone).
    public static func evidence(of e: RecordedEvent, verifier: AppleSignatureVerifier) async -> AppleEvidence? {
        switch e.event.body {
        case .appleTransactionReceived, .appleNotificationReceived: break
        default: return nil
        }
        guard let record = AppleRecord.records(in: e).first else { return .invalid("erased with its user, or not a signed document") }
        return await problem(record, AppleSignatureVerifier(roots: verifier.roots)).map { .invalid($0) } ?? .apple
    }

    /// Why a signed document of `record` does not verify as Apple's with `verifier`'s roots, at
    /// the time it was recorded; nil when every one does.
    private static func problem(_ record: AppleRecord, _ verifier: AppleSignatureVerifier) async -> String? {
        for jws in record.documents {
            guard let signed = try? SignedTransaction(jws: jws) else { return "not a JWS" }
            let evidence = await verifier.evidence(of: signed, recordedAt: record.recordedAt.date)
            if evidence != .apple { return evidence.reason ?? evidence.name }
        }
        return nil
    }

    /// Why each record added so far does not verify as Apple's with `verifier`'s roots, by the
    /// seq of its event (none: every one does).
    public func problems(verifier: AppleSignatureVerifier) async -> [Int64: String] {
        // The app binding was checked at import; here, whose signature it is.
        let roots = AppleSignatureVerifier(roots: verifier.roots)
        var problems: [Int64: String] = [:]
        for record in records {
            if let problem = await Self.problem(record, roots) { problems[record.seq] = problem }
        }
        return problems
    }

    /// The disagreements between `state` (the device's transactions after the events added) and
    /// Apple's records, ordered by kind, then by the device's seq. Only the records whose
    /// signatures verify again with `verifier`'s roots count: one written into the log some other
    /// way than `apple-import` (an `append` of a forged JWS, an edited file) compares nothing.
    public func divergences(in state: LedgerState, verifier: AppleSignatureVerifier) async -> [Divergence] {
        divergences(in: state, problems: await problems(verifier: verifier))
    }

    /// ``divergences(in:verifier:)`` with the records' verification done beforehand
    /// (``problems(verifier:)``, which may cover more records than added so far).
    public func divergences(in state: LedgerState, problems: [Int64: String]) -> [Divergence] {
        var records: [AppleRecord] = []
        var unverified: [Divergence] = []
        for record in self.records {
            guard let problem = problems[record.seq] else {
                records.append(record)
                continue
            }
            var notification: String?
            if case .notification(let uuid, _, _) = record.origin { notification = uuid }
            unverified.append(
                Divergence(
                    kind: .appleRecordUnverified, transaction: nil, appleTransaction: record.claims.transactionId, user: record.user,
                    product: record.claims.productId, device: "-", apple: "its signature does not verify: " + problem, deviceSeq: nil,
                    appleSeq: record.seq, notification: notification))
        }
        var transactions: [DeviceTransaction] = []
        let consumables = Set(state.products.values.filter { $0.registration.kind == .consumable }.map(\.registration.product))
        for (_, t) in state.transactions {
            transactions.append(
                DeviceTransaction(
                    ledger: nil, transaction: t.transaction, user: t.user, product: t.product, state: t.state.rawValue, revoked: t.revoked,
                    finished: t.finished, finishedAt: t.finishedAt, purchasedAt: t.purchasedAt, storeTransactionId: t.storeTransactionId,
                    paid: PurchaseTerms(price: t.paid.price, currency: t.paid.currency, environment: t.paid.environment, ownership: t.paid.ownership),
                    consumable: consumables.contains(t.product), arrival: arrivals[t.transaction]))
        }
        let first = firstEventAt ?? Timestamp(millisecondsSinceEpoch: 0)
        let marks = histories.map { HistoryMark(seq: $0.seq, revision: $0.revision, user: $0.user, at: $0.at) }
        return Self.compare(records: records, transactions: transactions, histories: marks, firstEventAt: { _ in first }, leading: unverified)
    }

    /// Whose each Apple transaction of `records` (in their order) is: a history's user (a history
    /// is one customer's, named by whoever imported it), else the user its first credited record
    /// names.
    package static func owners(of records: [AppleRecord]) -> [String: String] {
        var historyOwner: [String: String] = [:], firstOwner: [String: String] = [:]
        for r in records {
            guard let id = r.claims.transactionId, let user = r.user else { continue }
            if case .history = r.origin, historyOwner[id] == nil { historyOwner[id] = user }
            if firstOwner[id] == nil { firstOwner[id] = user }
        }
        return firstOwner.merging(historyOwner) { _, history in history }
    }

    /// The users whose first event ``compare(records:transactions:histories:firstEventAt:revokedByFamily:leading:)``
    /// asks for: the owners of Apple's transactions no device transaction of theirs holds.
    package static func usersAskedForFirstEvents(records: [AppleRecord], transactions: [DeviceTransaction]) -> Set<String> {
        var claimants: [String: [String?]] = [:]
        for t in transactions { if let store = t.storeTransactionId { claimants[store, default: []].append(t.user) } }
        var users = Set<String>()
        for (id, owner) in owners(of: records) where !(claimants[id] ?? []).contains(where: { $0 == nil || $0 == owner }) { users.insert(owner) }
        return users
    }

    /// A device's transaction as reconciliation compares it: from a ledger's state, or a fleet
    /// store's row.
    package struct DeviceTransaction: Sendable {
        package var ledger: String?
        package var transaction: String
        package var user: String?
        package var product: String
        /// As ``TransactionState``'s raw value: `purchased`, `restored`...
        package var state: String
        package var revoked: Bool
        package var finished: Bool
        package var finishedAt: Timestamp?
        package var purchasedAt: Timestamp?
        package var storeTransactionId: String?
        /// Price, currency, environment and ownership as paid.
        package var paid: PurchaseTerms
        package var consumable: Bool
        /// The seq of its purchase or restore event.
        package var arrival: Int64?

        package init(
            ledger: String?, transaction: String, user: String?, product: String, state: String, revoked: Bool, finished: Bool,
            finishedAt: Timestamp?, purchasedAt: Timestamp?, storeTransactionId: String?, paid: PurchaseTerms, consumable: Bool, arrival: Int64?
        ) {
            self.ledger = ledger
            self.transaction = transaction
            self.user = user
            self.product = product
            self.state = state
            self.revoked = revoked
            self.finished = finished
            self.finishedAt = finishedAt
            self.purchasedAt = purchasedAt
            self.storeTransactionId = storeTransactionId
            self.paid = paid
            self.consumable = consumable
            self.arrival = arrival
        }
    }

    /// A complete history of Apple's: its user, revision and when Apple signed it (and, in a
    /// ledger, the seq that recorded it).
    package struct HistoryMark: Sendable {
        package var seq: Int64?
        package var revision: String
        package var user: String?
        package var at: Timestamp

        package init(seq: Int64?, revision: String, user: String?, at: Timestamp) {
            self.seq = seq
            self.revision = revision
            self.user = user
            self.at = at
        }
    }

    /// The disagreements between device transactions and Apple's verified `records` (after
    /// `leading`), ordered by kind, then by the device's seq: the one comparison a ledger and a
    /// fleet store share. `firstEventAt` says, for a user, from when the devices could have
    /// recorded a purchase (nil: not known, so no `chargedNotRecorded` is claimed).
    package static func compare(
        records: [AppleRecord], transactions: [DeviceTransaction], histories: [HistoryMark], firstEventAt: (String?) -> Timestamp?,
        revokedByFamily: Set<String> = [], leading: [Divergence] = []
    ) -> [Divergence] {
        // Positions, not copies: a fleet compares 100,000 records at a time.
        var byStore: [String: [Int]] = [:]
        for (i, t) in transactions.enumerated() {
            if let store = t.storeTransactionId { byStore[store, default: []].append(i) }
        }
        // Apple's latest statement of each transaction (by signedDate, then seq), and whether a
        // notification says the revocation was a Family Sharing one.
        var latestAt: [String: Int] = [:]
        var familyRevoked = revokedByFamily
        var listedAt: [String: Int] = [:]
        let owners = Self.owners(of: records)
        for (i, r) in records.enumerated() {
            guard let id = r.claims.transactionId else { continue }
            if latestAt[id].map({ (records[$0].claims.signedDate ?? 0, records[$0].seq) < (r.claims.signedDate ?? 0, r.seq) }) ?? true { latestAt[id] = i }
            if case .notification(_, "REVOKE", _) = r.origin { familyRevoked.insert(id) }
            if case .history = r.origin, (listedAt[id].flatMap { records[$0].claims.signedDate } ?? .min) < (r.claims.signedDate ?? 0) { listedAt[id] = i }
        }
        var rows = leading
        func row(_ kind: Divergence.Kind, _ t: DeviceTransaction?, _ r: AppleRecord?, device: String, apple: String) -> Divergence {
            var notification: String?
            if case .notification(let uuid, _, _) = r?.origin { notification = uuid }
            return Divergence(
                kind: kind, ledger: t?.ledger, transaction: t?.transaction, appleTransaction: r?.claims.transactionId ?? t?.storeTransactionId,
                user: t?.user ?? r?.user, product: t?.product ?? r?.claims.productId, device: device, apple: apple, deviceSeq: t?.arrival,
                appleSeq: r?.seq, notification: notification)
        }
        for (id, index) in latestAt.sorted(by: { $0.key < $1.key }) {
            var r = records[index]
            r.user = owners[id] ?? r.user
            let c = r.claims
            // A device transaction is Apple's transaction only for the user Apple's record is of
            // (a record of no known user, or a device transaction naming no user, matches any).
            var matched: [DeviceTransaction] = []
            for t in (byStore[id] ?? []).map({ transactions[$0] }) {
                if let owner = r.user, let claimant = t.user, owner != claimant {
                    rows.append(row(.claimedByAnotherUser, t, r, device: "\(t.state), of \(claimant)", apple: "Apple's transaction of \(owner)"))
                } else {
                    matched.append(t)
                }
            }
            if matched.isEmpty {
                // Before the devices' first event they could not have recorded it.
                guard c.environment == "Production", r.user.map({ !SignedTransaction.isMarker($0) }) ?? true, let first = firstEventAt(r.user)
                else { continue }
                if c.purchaseDate.map({ Timestamp(millisecondsSinceEpoch: $0) >= first }) ?? true {
                    rows.append(row(.chargedNotRecorded, nil, r, device: "no transaction", apple: describe(c)))
                }
                continue
            }
            for t in matched {
                if let revoked = c.revocationDate, !t.revoked {
                    let family = familyRevoked.contains(id) || c.inAppOwnershipType == "FAMILY_SHARED"
                    rows.append(
                        row(
                            family ? .familyRevokeNotSeen : .refundNotSeen, t, r, device: "\(t.state), not revoked",
                            apple: (family ? "revoked " : "refunded ") + Timestamp(millisecondsSinceEpoch: revoked).description
                                + (c.revocationReason.map { " (revocationReason \($0))" } ?? "")))
                }
                // The fields the evidence rules compare, compared the same way.
                let differences = c.differences(product: nil, quantity: nil, storeTransactionID: nil, originalTransaction: nil, terms: t.paid)
                if let price = t.paid.price, let currency = t.paid.currency, let applePrice = c.price, let appleCurrency = c.currency,
                    differences.contains(where: { $0.field == "price" || $0.field == "currency" })
                {
                    rows.append(
                        row(.priceDiffers, t, r, device: "\(price) \(currency)", apple: "\(SignedTransaction.Claims.decimal(milliunits: applePrice)) \(appleCurrency)"))
                }
                for d in differences {
                    if d.field == "ownership" { rows.append(row(.ownershipDiffers, t, r, device: d.observed, apple: d.signed)) }
                    if d.field == "environment" { rows.append(row(.environmentDiffers, t, r, device: d.observed, apple: d.signed)) }
                }
                if c.type == "Consumable", t.finished, let listed = listedAt[id].map({ records[$0] }), let finishedAt = t.finishedAt,
                    let signed = listed.claims.signedDate, Timestamp(millisecondsSinceEpoch: signed) > finishedAt
                {
                    rows.append(
                        row(
                            .unfinishedAtApple, t, listed, device: "finished \(finishedAt)",
                            apple: "listed unfinished in a history signed \(Timestamp(millisecondsSinceEpoch: signed))"))
                }
            }
        }
        // Device purchases Apple never charged, by a complete history of their user made after them.
        var historiesByUser: [String: [HistoryMark]] = [:]
        // An erased user's history stands for no one: the device's markers would match it.
        for h in histories where !(h.user.map(SignedTransaction.isMarker) ?? false) { historiesByUser[h.user ?? "", default: []].append(h) }
        let candidates = transactions.indices.filter { transactions[$0].state == "purchased" }.sorted { a, b in
            let (x, y) = (transactions[a], transactions[b])
            return (x.arrival ?? 0, x.ledger ?? "", x.transaction) < (y.arrival ?? 0, y.ledger ?? "", y.transaction)
        }
        for t in candidates.lazy.map({ transactions[$0] }) {
            // A restore names its own id for a purchase of before: the purchase is what Apple lists.
            guard let store = t.storeTransactionId, latestAt[store] == nil, t.state == "purchased",
                t.paid.environment == .production, let purchasedAt = t.purchasedAt
            else { continue }
            // A history omits finished consumables: such a purchase is no disagreement.
            if t.finished && t.consumable { continue }
            guard
                let history = historiesByUser[t.user ?? ""]?.first(where: { h in
                    h.at >= purchasedAt && (h.seq == nil || t.arrival.map { h.seq! > $0 } ?? false)
                })
            else { continue }
            var found = row(.recordedNotCharged, t, nil, device: "\(t.state) \(purchasedAt)", apple: "absent from the complete history \(history.revision)")
            found.appleSeq = history.seq
            found.history = history.revision
            rows.append(found)
        }
        let order = Dictionary(uniqueKeysWithValues: Divergence.Kind.allCases.enumerated().map { ($1, $0) })
        return rows.enumerated().sorted { a, b in
            (order[a.element.kind]!, a.element.deviceSeq ?? .max, a.offset) < (order[b.element.kind]!, b.element.deviceSeq ?? .max, b.offset)
        }.map(\.element)
    }

    static func describe(_ c: SignedTransaction.Claims) -> String {
        var text = "purchased"
        if let price = c.price, let currency = c.currency { text += " for \(SignedTransaction.Claims.decimal(milliunits: price)) \(currency)" }
        if let date = c.purchaseDate { text += " \(Timestamp(millisecondsSinceEpoch: date))" }
        if c.revocationDate != nil { text += ", since revoked" }
        return text
    }

}

extension Ledger {
    /// The disagreements between the device's record and Apple's in this ledger, as of `seq`
    /// (default: the last event). Reads the log once.
    ///
    /// ```swift
    /// for d in try await ledger.divergences() { print(d.kind, d.transaction ?? "-", d.device, "/", d.apple) }
    /// ```
    ///
    /// Apple's records count only when their signatures verify as Apple's with `verifier`'s roots.
    public func divergences(throughSeq seq: Int64 = .max, verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> [Divergence] {
        var reconciliation = Reconciliation()
        var last: Int64 = 0
        try forEachEvent(through: seq) { e in
            reconciliation.add(e)
            last = e.seq
            return true
        }
        guard reconciliation.holdsAppleRecords else { return [] }
        return await reconciliation.divergences(in: try state(atSeq: last), verifier: verifier)
    }

    /// The first seq after which the device's record and Apple's disagree, with the
    /// disagreements there; nil when they never do (or the ledger holds nothing of Apple's).
    /// A disagreement settled later (a refund the device recorded a day late) still counts: this
    /// is where the log first shows one.
    ///
    /// ```swift
    /// if let (seq, rows) = try await ledger.firstDivergence() { print(seq, rows.map(\.kind)) }
    /// ```
    public func firstDivergence(verifier: AppleSignatureVerifier = AppleSignatureVerifier()) async throws -> (seq: Int64, divergences: [Divergence])? {
        var all = Reconciliation()
        var firstApple: Int64?
        try forEachEvent { e in
            all.add(e)
            if firstApple == nil, e.event.body.subject == .apple { firstApple = e.seq }
            return true
        }
        guard let firstApple, all.holdsAppleRecords else { return nil }
        // Every record verified once; then one walk, comparing after each event that can change
        // the answer (from Apple's first record on).
        let problems = await all.problems(verifier: verifier)
        var running = Reconciliation()
        var found: [Divergence] = []
        let seq = try firstSeq { state, e in
            running.add(e)
            guard e.seq >= firstApple else { return false }
            switch e.event.body {
            case .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted, .transactionPurchased, .transactionRestored,
                .transactionRevoked, .transactionFinished, .personalDataErased:
                found = running.divergences(in: state, problems: problems)
                return !found.isEmpty
            default:
                return false
            }
        }
        return seq.map { ($0, found) }
    }
}
