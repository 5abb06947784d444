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
        let transactionVerifier = AppleSignatureVerifier(roots: verifier.roots, bundleID: bundle ?? verifier.bundleID)
        let notificationVerifier = AppleSignatureVerifier(roots: verifier.roots)
        func verified(_ jws: String, _ place: PlacedAppleDocument, _ what: String, _ v: AppleSignatureVerifier) async throws -> SignedTransaction {
            func fail(_ message: String) -> AppleImportError { AppleImportError(file: place.file, line: place.line, message: "\(what): \(message)") }
            let signed: SignedTransaction
            do { signed = try SignedTransaction(jws: jws) } catch { throw fail("not a JWS: \(error.message)") }
            if signed.isLocalTesting { throw fail("environment \(signed.claims.environment ?? "Xcode"): signed by Xcode, not by Apple") }
            let evidence = await v.evidence(of: signed, recordedAt: now)
            guard evidence == .apple else { throw fail("not verified as Apple's: \(evidence.reason ?? evidence.name)") }
            return signed
        }

        // Every signature first: a refusal writes nothing.
        var transactions: [(SignedTransaction, AppleSource)] = []
        var notifications: [(SignedTransaction, AppleNotification)] = []
        var completedRevisions: [String] = []
        var historyTransactionIDs: [String] = []
        var historySignedDates: [Int64] = []
        for place in documents {
            switch place.document {
            case .historyPage(let revision, let hasMore, let list):
                for (i, jws) in list.enumerated() {
                    let signed = try await verified(jws, place, "signedTransactions[\(i)]", transactionVerifier)
                    transactions.append((signed, .history))
                    if let id = signed.claims.transactionId { historyTransactionIDs.append(id) }
                    if let date = signed.claims.signedDate { historySignedDates.append(date) }
                }
                if !hasMore {
                    guard let revision, !revision.isEmpty else {
                        throw AppleImportError(file: place.file, line: place.line, message: "the last history page has no revision")
                    }
                    completedRevisions.append(revision)
                }
            case .transactionInfo(let jws):
                transactions.append((try await verified(jws, place, "signedTransactionInfo", transactionVerifier), .transactionInfo))
            case .notification(let jws):
                let outer = try await verified(jws, place, "signedPayload", notificationVerifier)
                let n: AppleNotification
                do { n = try AppleNotification(payloadOf: outer) } catch {
                    throw AppleImportError(file: place.file, line: place.line, message: "signedPayload: \(error.message)")
                }
                // A ledger bound to its app takes only that app's notifications, named.
                if let bundle, n.bundleId != bundle {
                    throw AppleImportError(
                        file: place.file, line: place.line, message: "signedPayload: a notification for the app \(n.bundleId ?? "(none named)"), not \(bundle)")
                }
                if let inner = n.signedTransaction { _ = try await verified(inner, place, "data.signedTransactionInfo", transactionVerifier) }
                notifications.append((outer, n))
            }
        }

        // What the ledger holds already, and whose each transaction is.
        // Per Apple transaction, its latest statement held (by signedDate): a statement is new
        // unless it states the same facts as that one (a refund reversed states the purchase's
        // facts again, and is new).
        var latestHeld: [String: (signedDate: Int64, key: String)] = [:]
        var statements = Set<String>()
        func hold(_ record: AppleRecord) {
            let id = record.claims.transactionId ?? ""
            let date = record.claims.signedDate ?? 0
            statements.insert(record.contentKey + "|\(date)")
            if latestHeld[id].map({ $0.signedDate <= date }) ?? true { latestHeld[id] = (date, record.contentKey) }
        }
        func isHeld(_ record: AppleRecord) -> Bool {
            // The very statement again (Apple's retries, a page fetched twice).
            if statements.contains(record.contentKey + "|\(record.claims.signedDate ?? 0)") { return true }
            guard let held = latestHeld[record.claims.transactionId ?? ""], held.key == record.contentKey else { return false }
            // A consumable listed by a later history is a new fact: still unfinished at Apple then.
            if case .history = record.origin, record.claims.type == "Consumable" { return (record.claims.signedDate ?? 0) <= held.signedDate }
            return true
        }
        var heldNotifications = Set<String>()
        var heldHistories = Set<String>()
        for e in try events(inStream: LedgerState.appleStream) {
            for record in AppleRecord.records(in: e) { hold(record) }
            if case .appleNotificationReceived(let jws, _) = e.event.body, let signed = try? SignedTransaction(jws: jws),
                let n = try? AppleNotification(payloadOf: signed)
            {
                heldNotifications.insert(n.uuid)
            }
            if case .appleHistoryCompleted(let revision, let u) = e.event.body { heldHistories.insert(revision + "\u{0}" + (u ?? "")) }
        }
        var userByStoreID: [String: String] = [:]
        for t in try self.transactions() {
            if let store = t.storeTransactionId, let u = t.user { userByStoreID[store] = u }
        }
        // A history is one Apple customer's: when its matched transactions name one user, its
        // other transactions are that user's too.
        let historyUsers = Set(historyTransactionIDs.compactMap { userByStoreID[$0] })
        let historyUser = historyUsers.count == 1 ? historyUsers.first : nil
        func owner(_ claims: SignedTransaction.Claims, inHistory: Bool = false) -> String? {
            claims.transactionId.flatMap { userByStoreID[$0] } ?? claims.originalTransactionId.flatMap { userByStoreID[$0] }
                ?? (inHistory ? historyUser : nil) ?? user
        }

        let stamp = Timestamp(millisecondsSinceEpoch: Int64((now.timeIntervalSince1970 * 1000).rounded(.down)))
        var events: [Event] = []
        var summary = AppleImportSummary()
        for (signed, source) in transactions {
            let record = AppleRecord(claims: signed.claims, origin: source == .history ? .history : .transactionInfo, seq: 0, user: nil)
            guard !isHeld(record) else {
                summary.alreadyHeld += 1
                continue
            }
            hold(record)
            events.append(Event(at: stamp, .appleTransactionReceived(signedTransaction: signed.jws, source: source, user: owner(signed.claims, inHistory: source == .history))))
            summary.transactions += 1
        }
        for (signed, n) in notifications {
            guard heldNotifications.insert(n.uuid).inserted else {
                summary.alreadyHeld += 1
                continue
            }
            let inner = n.signedTransaction.flatMap { try? SignedTransaction(jws: $0) }
            events.append(Event(at: stamp, .appleNotificationReceived(signedPayload: signed.jws, user: inner.flatMap { owner($0.claims) } ?? user)))
            summary.notifications += 1
        }
        if let revision = completedRevisions.last {
            // The user the history's transactions belong to (else the one given). A history is one
            // customer's: pages matching several users are not known to make one history.
            guard historyUsers.count <= 1 else {
                throw AppleImportError(
                    file: documents.last { if case .historyPage = $0.document { true } else { false } }?.file ?? "-", line: nil,
                    message: "the history pages name transactions of several users (\(historyUsers.sorted().joined(separator: ", "))): import each user's history on its own")
            }
            let historyOwner = historyUser ?? user
            // Complete as of when Apple signed it, not when it was imported.
            let signedAt = historySignedDates.max().map { Timestamp(millisecondsSinceEpoch: $0) } ?? stamp
            if heldHistories.insert(revision + "\u{0}" + (historyOwner ?? "")).inserted {
                events.append(Event(at: signedAt, .appleHistoryCompleted(revision: revision, user: historyOwner)))
                summary.histories += 1
            } else {
                summary.alreadyHeld += 1
            }
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
