import Crypto
import Foundation
import GRDB

/// One row of `transaction_evidence` (migration 0008): what the signature of a transaction's
/// latest applied signed event says, whatever the trust roots. Reading it with roots
/// (``Ledger/appleEvidence(verifier:)``) turns `signed` into `apple` or `invalid`.
package struct EvidenceRow: Hashable, Sendable {
    package var transaction: String
    package var seq: Int64
    /// `signed`, `xcode` or `invalid`.
    package var level: String
    package var reason: String?
    /// The digest of its chain's header in `signing_headers`.
    package var header: [UInt8]?
    /// A keyed digest of Apple's transaction id (``EvidenceRows/key(_:secret:)``): one Apple
    /// transaction vouches for one ledger transaction. Nil for a row that is not `signed`, and
    /// once `forget` erased the signature.
    package var key: [UInt8]?
}

/// Computes, stores and compares the `transaction_evidence` rows. The append path adds the row
/// of each applied signed event; a rebuild and `verify` compute them all again from the log.
enum EvidenceRows {
    /// The root-independent check, per app (nil: any app), its chains' certificates parsed once
    /// per process.
    private static let checkers = Locked<[String: AppleSignatureVerifier]>([:])
    static func checker(_ bundleID: String?) -> AppleSignatureVerifier {
        checkers.withLock { checkers in
            if let known = checkers[bundleID ?? ""] { return known }
            let made = AppleSignatureVerifier(bundleID: bundleID)
            checkers[bundleID ?? ""] = made
            return made
        }
    }

    /// What the checks of one ledger use: its redaction secret (the keys) and its app.
    struct Context: Sendable {
        var secret: [UInt8]
        var bundleID: String?
    }

    /// How far an event's time may lie from the date its signed transaction states (a purchase's
    /// `purchaseDate`, a revocation's `revocationDate`): one day.
    static let dateTolerance: TimeInterval = 86_400

    /// What a stored event says of its transaction's evidence.
    enum Found: Sendable, Hashable {
        /// No signed transaction, or one the rules did not apply.
        case none
        /// Its signed transaction was erased with its user: the stored row stands.
        case erased(transaction: String)
        case row(EvidenceRow)
    }

    /// The fields whose values are personal: a reason names them, never their values.
    private static let personalFields: Set<String> = ["storeTransactionId", "originalTransaction"]

    /// The evidence `e` (stored with `outcome`, leaving `state`) gives its transaction, before
    /// the one-transaction-per-Apple-transaction check (``Collector``, ``Uniqueness``).
    static func found(_ e: RecordedEvent, outcome: Outcome, state: LedgerState, secret: Context) -> Found {
        switch pending(e, outcome: outcome, state: state, secret: secret) {
        case .none: .none
        case .erased(let t): .erased(transaction: t)
        case .check(let check): .row(check.row())
        }
    }

    /// What `found` computes, before the signature: the parse and the fields, which need the
    /// state; ``Check/row()`` then verifies the signature (the costly part, ES256), on any thread.
    enum Pending: Sendable {
        case none
        case erased(String)
        case check(Check)
    }

    struct Check: Sendable {
        var transaction: String
        var seq: Int64
        var header: [UInt8]?
        var signed: Result<SignedTransaction, SignedTransaction.FormError>
        var recordedAt: Date
        var revocation: Bool
        /// The transaction's store id in the ledger (after the event).
        var storeID: String?
        /// The fields the event states otherwise, described (personal ones by name only).
        var differences: [String]
        var key: [UInt8]?
        var bundleID: String?

        func row() -> EvidenceRow {
            func row(_ level: String, _ reason: String? = nil) -> EvidenceRow {
                EvidenceRow(transaction: transaction, seq: seq, level: level, reason: reason, header: header, key: level == "signed" ? key : nil)
            }
            let signed: SignedTransaction
            switch self.signed {
            case .failure(let error): return row("invalid", "it is not a signed transaction: \(error.message)")
            case .success(let parsed): signed = parsed
            }
            switch checker(bundleID).check(signed, recordedAt: recordedAt) {
            case .final(.xcode):
                return row("xcode")
            case .final(let evidence):
                return row("invalid", evidence.reason ?? evidence.name)
            case .signed:
                guard differences.isEmpty else {
                    return row("invalid", "the event states otherwise than its signed transaction: " + differences.joined(separator: "; "))
                }
                // Apple vouches for money only where its statement names it, and for this
                // transaction only where it names its store id.
                let claims = signed.claims
                let unstated = [
                    ("transactionId", claims.transactionId == nil), ("productId", claims.productId == nil), ("price", claims.price == nil),
                    ("currency", claims.currency == nil),
                ].filter(\.1).map(\.0)
                if !unstated.isEmpty { return row("invalid", "its signed transaction does not state \(unstated.joined(separator: ", "))") }
                guard let storeID, !storeID.isEmpty else {
                    return row("invalid", "the transaction has no storeTransactionId, so nothing ties its signed transaction to it")
                }
                if storeID != claims.transactionId { return row("invalid", "its signed transaction is another store transaction's") }
                let stated = revocation ? claims.revocationDate : claims.purchaseDate
                guard let stated else { return row("invalid", "its signed transaction states no \(revocation ? "revocationDate" : "purchaseDate")") }
                let gap = abs(recordedAt.timeIntervalSince1970 - Double(stated) / 1000)
                if gap > EvidenceRows.dateTolerance {
                    return row(
                        "invalid",
                        "the event's time is \(Int(gap / 3600)) hours from its signed transaction's \(revocation ? "revocationDate" : "purchaseDate") (at most 24)")
                }
                return row("signed")
            }
        }
    }

    static func pending(_ e: RecordedEvent, outcome: Outcome, state: LedgerState, secret context: Context) -> Pending {
        guard outcome.changedState, let jws = e.event.body.signedTransaction, let t = e.event.body.transactionID else { return .none }
        if SignedTransaction.isErasedMarker(jws) { return .erased(t) }
        let header = SignedTransaction.split(jws: jws).header.map(SignedParts.digest(ofHeader:))
        let signed = Result { () throws(SignedTransaction.FormError) in try SignedTransaction(jws: jws) }
        let differences = Reducer.signedDifferences(of: e.event.body, after: state).map {
            personalFields.contains($0.field) ? "\($0.field) differs" : $0.description
        }
        var revocation = false
        if case .transactionRevoked = e.event.body { revocation = true }
        let key = (try? signed.get())?.claims.transactionId.map { Self.key($0, secret: context.secret) }
        return .check(
            Check(
                transaction: t, seq: e.seq, header: header, signed: signed,
                recordedAt: e.event.at.date, revocation: revocation,
                storeID: state.transactions[t]?.storeTransactionId, differences: differences, key: key, bundleID: context.bundleID))
    }

    /// The keyed digest of Apple's transaction id a row keeps: HMAC-SHA-256 under the ledger's
    /// redaction secret, cut to 16 bytes. Comparable within one ledger, and nothing without the
    /// secret (the file's holder has the secret, and the personal values with it).
    static func key(_ transactionID: String, secret: [UInt8]) -> [UInt8] {
        let mac = HMAC<SHA256>.authenticationCode(
            for: Array("purchase-ledger apple transaction v1".utf8) + [0] + Array(transactionID.utf8), using: SymmetricKey(data: secret))
        return Array(mac.prefix(16))
    }

    /// The ledger's redaction secret (made on the first writable open; empty when it has none)
    /// and the app it checks Apple's signatures for (``LedgerConfiguration/appleBundleID``).
    static func secret(_ db: Database) throws -> Context {
        Context(
            secret: (try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'redaction_secret'")).map { [UInt8]($0) } ?? [],
            bundleID: try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'apple_bundle_id'"))
    }

    /// The rows of `checks`, their signatures verified on every core.
    static func rows(_ checks: [Check]) -> [EvidenceRow] {
        checks.concurrentMap { $0.row() }
    }

    /// One Apple transaction vouches for one ledger transaction, the first (in log order) whose
    /// row says so: a later one's row becomes `invalid`.
    struct Uniqueness: Sendable {
        private var holders: [[UInt8]: String] = [:]

        /// `row`, invalid when another transaction holds its key; `stored` looks a key up among
        /// the rows already stored (nil: none).
        mutating func apply(_ row: EvidenceRow, stored: ([UInt8], String) throws -> String?) rethrows -> EvidenceRow {
            guard let key = row.key else { return row }
            let holder = try holders[key] ?? stored(key, row.transaction)
            if let holder, holder != row.transaction {
                var taken = row
                taken.level = "invalid"
                taken.reason = "its signed transaction (the same Apple transaction) already vouches for transaction \(holder)"
                taken.key = nil
                return taken
            }
            holders[key] = row.transaction
            return row
        }
    }

    /// The rows by transaction, as a replay finds them (a later signed event replaces an earlier),
    /// each Apple transaction vouching for the first transaction that held it.
    struct Collector: Sendable {
        private(set) var found: [String: Found] = [:]
        private var uniqueness = Uniqueness()

        mutating func add(_ f: Found) {
            switch f {
            case .none: break
            case .erased(let t): found[t] = f
            case .row(let r): found[r.transaction] = .row(uniqueness.apply(r) { _, _ in nil })
            }
        }
    }

    /// Inserts or replaces `rows`.
    static func write(_ rows: [EvidenceRow], _ db: Database) throws {
        guard !rows.isEmpty, try db.tableExists("transaction_evidence") else { return }
        let statement = try db.cachedStatement(
            sql: "INSERT OR REPLACE INTO transaction_evidence (transaction_id, seq, level, reason, signing_header, signed_key) VALUES (?, ?, ?, ?, ?, ?)")
        for r in rows {
            try statement.execute(arguments: [r.transaction, r.seq, r.level, r.reason, r.header.map { Data($0) }, r.key.map { Data($0) }])
        }
    }

    /// The transaction another stored row gives `key` to, if any.
    static func holder(of key: [UInt8], besides transaction: String, _ db: Database) throws -> String? {
        try String.fetchOne(
            db.cachedStatement(
                sql: "SELECT transaction_id FROM transaction_evidence INDEXED BY transaction_evidence_by_key WHERE signed_key = ? AND transaction_id <> ?"),
            arguments: [Data(key), transaction])
    }

    /// The stored rows.
    static func stored(_ db: Database) throws -> [String: EvidenceRow] {
        guard try db.tableExists("transaction_evidence") else { return [:] }
        var rows: [String: EvidenceRow] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT transaction_id, seq, level, reason, signing_header, signed_key FROM transaction_evidence") {
            let r = EvidenceRow(
                transaction: row[0], seq: row[1], level: row[2], reason: row[3], header: (row[4] as Data?).map { [UInt8]($0) },
                key: (row[5] as Data?).map { [UInt8]($0) })
            rows[r.transaction] = r
        }
        return rows
    }

    /// How the stored rows differ from what `collector` found: one sentence per transaction.
    /// A transaction whose signed transaction was erased keeps the row stored for it.
    static func differences(_ collector: Collector, stored: [String: EvidenceRow]) -> [(transaction: String, seq: Int64?, message: String)] {
        var found: [(String, Int64?, String)] = []
        func describe(_ r: EvidenceRow) -> String {
            r.level + (r.reason.map { " (\(String($0.map { $0.isNewline ? " " : $0 })))" } ?? "")
        }
        for (t, f) in collector.found.sorted(by: { $0.key < $1.key }) {
            guard case .row(let computed) = f else { continue }
            guard let row = stored[t] else {
                found.append((t, computed.seq, "transaction \(t) has no evidence row, but its signed transaction at seq \(computed.seq) checks as \(describe(computed))"))
                continue
            }
            if row != computed {
                let what =
                    row.level == computed.level && row.reason == computed.reason
                    ? "its evidence row was edited (seq, chain or key): stored for seq \(row.seq), computed for seq \(computed.seq)"
                    : "its evidence is stored as \(describe(row)) (seq \(row.seq)), but its signed transaction at seq \(computed.seq) checks as \(describe(computed))"
                found.append((t, computed.seq, "transaction \(t)'s " + what.dropFirst(4)))
            }
        }
        for (t, row) in stored.sorted(by: { $0.key < $1.key }) where collector.found[t] == nil {
            found.append((t, row.seq, "transaction \(t) has an evidence row (\(describe(row))) but no signed event of the log gives it one: a row added"))
        }
        return found
    }

    /// Makes the table what `collector` found, keeping the rows of erased signatures. Returns
    /// how many rows it wrote or deleted.
    @discardableResult
    static func reconcile(_ collector: Collector, _ db: Database) throws -> Int {
        guard try db.tableExists("transaction_evidence") else { return 0 }
        let stored = try stored(db)
        var keep = Set<String>()
        var rows: [EvidenceRow] = []
        for (t, f) in collector.found {
            switch f {
            case .none: break
            case .erased: keep.insert(t)
            case .row(let r): rows.append(r)
            }
        }
        let current = Set(rows.map(\.transaction))
        var changed = 0
        for t in stored.keys where !keep.contains(t) && !current.contains(t) {
            try db.execute(sql: "DELETE FROM transaction_evidence WHERE transaction_id = ?", arguments: [t])
            changed += 1
        }
        let different = rows.filter { stored[$0.transaction] != $0 }
        try write(different, db)
        return changed + different.count
    }
}
