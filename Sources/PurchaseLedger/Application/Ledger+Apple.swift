public import Foundation
import GRDB

/// What ``Ledger/importApple(_:verifier:user:at:)`` stored.
public struct AppleImportSummary: Sendable, Hashable {
    /// Apple transactions stored (new facts; a statement already held is not stored again).
    public var transactions = 0
    /// Notifications stored (a `notificationUUID` already held is not stored again).
    public var notifications = 0
    /// Complete histories recorded (pages down to `hasMore: false`).
    public var histories = 0
    /// Documents' statements that were already in the ledger.
    public var alreadyHeld = 0
    /// The seqs of the events stored, if any.
    public var firstSeq: Int64?
    public var lastSeq: Int64 = 0

    /// Nothing stored yet.
    public init() {}
}

extension Ledger {
    /// Stores Apple's record of this ledger's user (history pages, transactions' info and
    /// notifications: ``AppleDocument``) as events of the log, after verifying every signature
    /// with `verifier`'s roots: each JWS must be Apple's (`apple` evidence: ES256, Apple's chain
    /// with its marker extensions, valid at its `signedDate`, not after `at`) and, when the ledger
    /// is bound to an app, that app's. Anything else refuses the whole import with the file, the
    /// line and the reason, and nothing is written.
    ///
    /// Idempotent: a notification whose `notificationUUID` the ledger holds, a statement it holds,
    /// and a statement of the same facts as the latest one it holds of that transaction (Apple
    /// re-signs at every request) are not stored again. Each record names the ledger's user whose
    /// transaction it is (by Apple's `transactionId` or `originalTransactionId` against the
    /// transactions' `storeTransactionId`; in a history, the one user its matched transactions
    /// name), else `user`. When history pages end with one whose `hasMore` is false, an
    /// `appleHistoryCompleted` event records that Apple's record of that user is complete as of
    /// the latest `signedDate` of its pages.
    ///
    /// ```swift
    /// let documents = try AppleDocument.parse(Array(pageBytes), file: "history.json")
    /// let summary = try await ledger.importApple(documents)
    /// ```
    @discardableResult
    public func importApple(
        _ documents: [PlacedAppleDocument], verifier: AppleSignatureVerifier = AppleSignatureVerifier(), user: String? = nil, at now: Date = Date()
    ) async throws -> AppleImportSummary {
        let bundle = try read { db in try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'apple_bundle_id'") }
        // Every signature first: a refusal writes nothing.
        let verified = try await VerifiedAppleDocuments.verify(documents, verifier: verifier, bundleID: bundle, at: now)
        // What the ledger holds already, and whose each transaction is.
        var holdings = AppleHoldings()
        for e in try events(inStream: LedgerState.appleStream) {
            for record in AppleRecord.records(in: e) {
                var fromHistory = false
                if case .history = record.origin { fromHistory = true }
                holdings.hold(record.claims, user: record.user, fromHistory: fromHistory)
            }
            if case .appleNotificationReceived(let jws, _) = e.event.body, let signed = try? SignedTransaction(jws: jws),
                let n = try? AppleNotification(payloadOf: signed)
            {
                holdings.notifications.insert(n.uuid)
            }
            if case .appleHistoryCompleted(let revision, let u) = e.event.body { holdings.holdHistory(revision: revision, user: u) }
        }
        // Whose each store id is: only ids that one user's transactions name (an id two users
        // claim proves nothing about either).
        var usersByStoreID: [String: Set<String>] = [:]
        for t in try self.transactions() {
            if let store = t.storeTransactionId, let u = t.user, !SignedTransaction.isMarker(u) { usersByStoreID[store, default: []].insert(u) }
        }
        let userByStoreID = usersByStoreID.compactMapValues { $0.count == 1 ? $0.first : nil }
        let plan = try holdings.plan(verified, userByStoreID: userByStoreID, user: user)

        let stamp = Timestamp(millisecondsSinceEpoch: Int64((now.timeIntervalSince1970 * 1000).rounded(.down)))
        var events: [Event] = []
        var summary = AppleImportSummary()
        summary.alreadyHeld = plan.alreadyHeld
        for (signed, source, owner) in plan.transactions {
            events.append(Event(at: stamp, .appleTransactionReceived(signedTransaction: signed.jws, source: source, user: owner)))
        }
        for (signed, _, _, owner) in plan.notifications {
            events.append(Event(at: stamp, .appleNotificationReceived(signedPayload: signed.jws, user: owner)))
        }
        summary.transactions = plan.transactions.count
        summary.notifications = plan.notifications.count
        if let (revision, owner, signedAt) = plan.history {
            // Complete as of when Apple signed it, not when it was imported.
            events.append(Event(at: signedAt.map { Timestamp(millisecondsSinceEpoch: $0) } ?? stamp, .appleHistoryCompleted(revision: revision, user: owner)))
            summary.histories = 1
        }
        guard !events.isEmpty else {
            summary.lastSeq = try lastSeq()
            return summary
        }
        let result = try append(contentsOf: events)
        summary.lastSeq = result.lastSeq
        summary.firstSeq = result.events.first?.seq
        return summary
    }
}
