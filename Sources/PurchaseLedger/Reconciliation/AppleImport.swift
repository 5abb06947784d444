public import Foundation

/// Apple's documents with every signature verified: what an import into a ledger or a fleet
/// store is made from (``verify(_:verifier:bundleID:at:)``).
public struct VerifiedAppleDocuments: Sendable {
    /// Each signed transaction, in the documents' order, with where it came from.
    public var transactions: [(signed: SignedTransaction, source: AppleSource)] = []
    /// Each notification: its verified `signedPayload`, what it says, and the transaction it
    /// carries (verified too), if any.
    public var notifications: [(signed: SignedTransaction, notification: AppleNotification, transaction: SignedTransaction?)] = []
    /// The revision of the last history page whose `hasMore` is false, if one is.
    public var completedRevision: String?
    /// The file of the last history page (for errors about the history as a whole).
    package var historyFile = "-"
    /// Apple's ids of the transactions the history pages list.
    var historyTransactionIDs: [String] = []
    /// The latest `signedDate` of the history pages' transactions.
    var historySignedAt: Int64?

    /// The signed documents verified so far (each JWS once: a notification's payload and the
    /// transaction inside count two).
    public var signatures: Int { transactions.count + notifications.reduce(0) { $0 + 1 + ($1.transaction == nil ? 0 : 1) } }

    /// Verifies every JWS of `documents` as Apple's with `verifier`'s roots (ES256, Apple's chain
    /// with its marker extensions, valid at its `signedDate`, that date not after `now`); each
    /// transaction (a notification's too) must be the app `bundleID`'s when one is given, and a
    /// notification must name that app. Throws ``AppleImportError`` naming the file, the line and
    /// the reason for the first document that is not.
    ///
    /// The ES256 checks run on every core (`DispatchQueue.concurrentPerform`); each distinct
    /// chain is then validated once.
    public static func verify(
        _ documents: [PlacedAppleDocument], verifier: AppleSignatureVerifier, bundleID: String? = nil, at now: Date = Date()
    ) async throws(AppleImportError) -> VerifiedAppleDocuments {
        let transactionVerifier = AppleSignatureVerifier(roots: verifier.roots, bundleID: bundleID ?? verifier.bundleID)
        let notificationVerifier = AppleSignatureVerifier(roots: verifier.roots)
        // Every JWS with its place, in order; parsing first (cheap, and its errors come first).
        struct Item {
            var place: Int
            var what: String
            var signed: SignedTransaction
            /// Where a transaction came from; nil for a notification's payload or transaction.
            var source: AppleSource?
            var notification: Bool { source == nil && what == "signedPayload" }
        }
        var items: [Item] = []
        var placedNotifications: [(item: Int, notification: AppleNotification, inner: Int?)] = []
        var result = VerifiedAppleDocuments()
        func fail(_ index: Int, _ message: String) -> AppleImportError {
            AppleImportError(file: documents[index].file, line: documents[index].line, message: message)
        }
        func parse(_ jws: String, _ index: Int, _ what: String) throws(AppleImportError) -> SignedTransaction {
            let signed: SignedTransaction
            switch Self.parse(jws) {
            case .success(let parsed): signed = parsed
            case .failure(let error): throw fail(index, "\(what): not a JWS: \(error.message)")
            }
            if signed.isLocalTesting { throw fail(index, "\(what): environment \(signed.claims.environment ?? "Xcode"): signed by Xcode, not by Apple") }
            // A transaction is kept and compared by Apple's id (a notification's payload has its UUID).
            if what != "signedPayload", (signed.claims.transactionId ?? "").allSatisfy({ $0.isWhitespace }) {
                throw fail(index, "\(what): the signed transaction has no transactionId")
            }
            return signed
        }
        for (index, place) in documents.enumerated() {
            switch place.document {
            case .historyPage(let revision, let hasMore, let list):
                for (i, jws) in list.enumerated() {
                    let what = "signedTransactions[\(i)]"
                    items.append(Item(place: index, what: what, signed: try parse(jws, index, what), source: .history))
                }
                result.historyFile = place.file
                if !hasMore {
                    guard let revision, !revision.isEmpty else { throw fail(index, "the last history page has no revision") }
                    result.completedRevision = revision
                }
            case .transactionInfo(let jws):
                items.append(Item(place: index, what: "signedTransactionInfo", signed: try parse(jws, index, "signedTransactionInfo"), source: .transactionInfo))
            case .notification(let jws):
                let outer = try parse(jws, index, "signedPayload")
                let n: AppleNotification
                do { n = try AppleNotification(payloadOf: outer) } catch { throw fail(index, "signedPayload: \(error.message)") }
                // An import bound to its app takes only that app's notifications, named.
                if let bundle = bundleID ?? verifier.bundleID, n.bundleId != bundle {
                    throw fail(index, "signedPayload: a notification for the app \(n.bundleId ?? "(none named)"), not \(bundle)")
                }
                items.append(Item(place: index, what: "signedPayload", signed: outer, source: nil))
                var inner: Int?
                if let jws = n.signedTransaction {
                    inner = items.count
                    items.append(
                        Item(place: index, what: "data.signedTransactionInfo", signed: try parse(jws, index, "data.signedTransactionInfo"), source: nil))
                }
                placedNotifications.append((items.count - (inner == nil ? 1 : 2), n, inner))
            }
        }
        // The ES256 signatures, on every core; then each chain against the roots, once.
        let evidence = await evidence(of: items.map { ($0.signed, now, $0.notification ? notificationVerifier : transactionVerifier) })
        for (item, found) in zip(items, evidence) where found != .apple {
            throw fail(item.place, "\(item.what): not verified as Apple's: \(found.reason ?? found.name)")
        }
        for item in items {
            guard let source = item.source else { continue }
            result.transactions.append((item.signed, source))
            guard source == .history else { continue }
            if let id = item.signed.claims.transactionId { result.historyTransactionIDs.append(id) }
            if let date = item.signed.claims.signedDate { result.historySignedAt = max(result.historySignedAt ?? date, date) }
        }
        for (item, n, inner) in placedNotifications {
            result.notifications.append((items[item].signed, n, inner.map { items[$0].signed }))
        }
        return result
    }

    /// The evidence of each signed document, as recorded at its date, by its verifier: the
    /// ES256 checks on every core, then each distinct chain judged once.
    package static func evidence(of items: [(signed: SignedTransaction, recordedAt: Date, verifier: AppleSignatureVerifier)]) async -> [AppleEvidence] {
        let checks = items.concurrentMap { $0.verifier.check($0.signed, recordedAt: $0.recordedAt) }
        var result: [AppleEvidence] = []
        for (item, check) in zip(items, checks) {
            switch check {
            case .final(let evidence): result.append(evidence)
            case .signed(let leaf, let intermediate): result.append(await item.verifier.judge(leaf: leaf, intermediate: intermediate))
            }
        }
        return result
    }

    private static func parse(_ jws: String) -> Result<SignedTransaction, SignedTransaction.FormError> {
        do throws(SignedTransaction.FormError) { return .success(try SignedTransaction(jws: jws)) } catch { return .failure(error) }
    }
}

/// What a ledger or fleet store already holds of Apple's record, and so what an import of
/// verified documents adds (``plan(_:userByStoreID:user:at:)``): the same rules for both.
package struct AppleHoldings {
    /// Per Apple transaction, its latest statement held (by `signedDate`): a statement is new
    /// unless it states the same facts as that one (a refund reversed states the purchase's
    /// facts again, and is new).
    private var latest: [String: (signedDate: Int64, key: String)] = [:]
    private var statements = Set<String>()
    /// The `notificationUUID`s held.
    package var notifications = Set<String>()
    /// The complete histories held, as revision and user.
    private var histories = Set<String>()

    package init() {}

    /// Whose each Apple transaction held is: its history's user, else the first user credited.
    private var owners: [String: (user: String, fromHistory: Bool)] = [:]

    /// Holds a statement, of `user` (from a history page or not) when known.
    package mutating func hold(_ claims: SignedTransaction.Claims, user: String? = nil, fromHistory: Bool = false) {
        if let user, let id = claims.transactionId, owners[id].map({ !$0.fromHistory && fromHistory }) ?? true { owners[id] = (user, fromHistory) }
        let key = AppleRecord.contentKey(of: claims)
        let id = claims.transactionId ?? ""
        let date = claims.signedDate ?? 0
        statements.insert(key + "|\(date)")
        if latest[id].map({ $0.signedDate <= date }) ?? true { latest[id] = (date, key) }
    }

    package mutating func holdHistory(revision: String, user: String?) { histories.insert(revision + "\u{0}" + (user ?? "")) }

    /// Whether the statement `claims` (from a history page or not) adds nothing.
    package func isHeld(_ claims: SignedTransaction.Claims, fromHistory: Bool) -> Bool {
        let key = AppleRecord.contentKey(of: claims)
        // The very statement again (Apple's retries, a page fetched twice).
        if statements.contains(key + "|\(claims.signedDate ?? 0)") { return true }
        guard let held = latest[claims.transactionId ?? ""], held.key == key else { return false }
        // A consumable listed by a later history is a new fact: still unfinished at Apple then.
        if fromHistory, claims.type == "Consumable" { return (claims.signedDate ?? 0) <= held.signedDate }
        return true
    }

    /// What storing `verified` adds to what is held: each record with the user it is matched to
    /// (by Apple's `transactionId` or `originalTransactionId` in `userByStoreID`; in a history,
    /// the one user its matched transactions name), else `user`. Throws when history pages
    /// name transactions of several users.
    ///
    /// `inferHistoryUser`: whether a history whose matched transactions name one user is that
    /// user's without `user` (a ledger's: one device's users). A fleet store's is not: there any
    /// device could claim one of another customer's ids, so a history is the user's given.
    package mutating func plan(
        _ verified: VerifiedAppleDocuments, userByStoreID: [String: String], user: String?, inferHistoryUser: Bool = true
    ) throws(AppleImportError) -> AppleImportPlan {
        // A history is one Apple customer's: the user given, else the one user its matched
        // transactions name (its other transactions are that user's too).
        let historyUsers = Set(verified.historyTransactionIDs.compactMap { userByStoreID[$0] })
        let historyUser = user ?? (inferHistoryUser && historyUsers.count == 1 ? historyUsers.first : nil)
        let heldOwners = owners
        func owner(_ claims: SignedTransaction.Claims, inHistory: Bool = false) -> String? {
            // The user given for a history says whose it is, whatever a device claims; then
            // whose the records already held of the transaction are.
            if inHistory, let user { return user }
            if let id = claims.transactionId, let held = heldOwners[id] { return held.user }
            return claims.transactionId.flatMap { userByStoreID[$0] } ?? claims.originalTransactionId.flatMap { userByStoreID[$0] }
                ?? (inHistory ? historyUser : nil) ?? user
        }
        if verified.completedRevision != nil, user == nil, inferHistoryUser, historyUsers.count > 1 {
            // Pages matching several users are not known to make one customer's history.
            throw AppleImportError(
                file: verified.historyFile, line: nil,
                message:
                    "the history pages name transactions of several users (\(historyUsers.sorted().joined(separator: ", "))): import each user's history on its own, naming its user (--user)"
            )
        }
        var plan = AppleImportPlan()
        for (signed, source) in verified.transactions {
            let found = owner(signed.claims, inHistory: source == .history)
            if let id = signed.claims.transactionId, let found { plan.owners[id] = found }
            guard !isHeld(signed.claims, fromHistory: source == .history) else {
                plan.alreadyHeld += 1
                continue
            }
            hold(signed.claims, user: found, fromHistory: source == .history)
            plan.transactions.append((signed, source, found))
        }
        for (signed, n, inner) in verified.notifications {
            let found = inner.flatMap { owner($0.claims) } ?? user
            if let id = inner?.claims.transactionId, let found, plan.owners[id] == nil { plan.owners[id] = found }
            guard notifications.insert(n.uuid).inserted else {
                plan.alreadyHeld += 1
                continue
            }
            plan.notifications.append((signed, n, inner, found))
        }
        if let revision = verified.completedRevision {
            if histories.insert(revision + "\u{0}" + (historyUser ?? "")).inserted {
                plan.history = (revision, historyUser, verified.historySignedAt)
            } else {
                plan.alreadyHeld += 1
            }
        }
        return plan
    }
}

/// What an import stores: the output of ``AppleHoldings/plan(_:userByStoreID:user:)``.
package struct AppleImportPlan {
    package var transactions: [(signed: SignedTransaction, source: AppleSource, user: String?)] = []
    package var notifications: [(signed: SignedTransaction, notification: AppleNotification, transaction: SignedTransaction?, user: String?)] = []
    /// A history completed: its revision, its user, and the latest `signedDate` of its pages.
    package var history: (revision: String, user: String?, signedAt: Int64?)?
    package var alreadyHeld = 0
    /// Whose each Apple transaction of the documents is, where known (stored or already held):
    /// a store credits its records that had no user yet.
    package var owners: [String: String] = [:]
}
