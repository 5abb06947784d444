import Foundation
import GRDB

/// One row of `transaction_evidence` (migration 0008): what the signature of a transaction's
/// latest applied signed event says, whatever the trust roots. Reading it with roots
/// (``Ledger/appleEvidence(verifier:)``) turns `signed` into `apple` or `invalid`.
struct EvidenceRow: Hashable, Sendable {
    var transaction: String
    var seq: Int64
    /// `signed`, `xcode` or `invalid`.
    var level: String
    var reason: String?
    /// The digest of its chain's header in `signing_headers`.
    var header: [UInt8]?
}

/// Computes, stores and compares the `transaction_evidence` rows. The append path adds the row
/// of each applied signed event; a rebuild and `verify` compute them all again from the log.
enum EvidenceRows {
    /// The root-independent check, its chains' certificates parsed once per process.
    static let checker = AppleSignatureVerifier()

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

    /// The evidence `e` (stored with `outcome`, leaving `state`) gives its transaction.
    static func found(_ e: RecordedEvent, outcome: Outcome, state: LedgerState) -> Found {
        switch pending(e, outcome: outcome, state: state) {
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
        /// The fields the event states otherwise, described (personal ones by name only).
        var differences: [String]

        func row() -> EvidenceRow {
            func row(_ level: String, _ reason: String? = nil) -> EvidenceRow {
                EvidenceRow(transaction: transaction, seq: seq, level: level, reason: reason, header: header)
            }
            let signed: SignedTransaction
            switch self.signed {
            case .failure(let error): return row("invalid", "it is not a signed transaction: \(error.message)")
            case .success(let parsed): signed = parsed
            }
            switch checker.check(signed, recordedAt: recordedAt) {
            case .final(.xcode):
                return row("xcode")
            case .final(let evidence):
                return row("invalid", evidence.reason ?? evidence.name)
            case .signed:
                guard differences.isEmpty else {
                    return row("invalid", "the event states otherwise than its signed transaction: " + differences.joined(separator: "; "))
                }
                return row("signed")
            }
        }
    }

    static func pending(_ e: RecordedEvent, outcome: Outcome, state: LedgerState) -> Pending {
        guard outcome.changedState, let jws = e.event.body.signedTransaction, let t = e.event.body.transactionID else { return .none }
        if SignedTransaction.isErasedMarker(jws) { return .erased(t) }
        let header = SignedTransaction.split(jws: jws).header.map(SignedParts.digest(ofHeader:))
        let signed = Result { () throws(SignedTransaction.FormError) in try SignedTransaction(jws: jws) }
        let differences = Reducer.signedDifferences(of: e.event.body, after: state).map {
            personalFields.contains($0.field) ? "\($0.field) differs" : $0.description
        }
        return .check(
            Check(
                transaction: t, seq: e.seq, header: header, signed: signed,
                recordedAt: Date(timeIntervalSince1970: Double(e.event.at.nanosecondsSinceEpoch) / 1e9), differences: differences))
    }

    /// The rows of `checks`, their signatures verified on every core.
    static func rows(_ checks: [Check]) -> [EvidenceRow] {
        guard checks.count > 1 else { return checks.map { $0.row() } }
        let rows = Locked([EvidenceRow?](repeating: nil, count: checks.count))
        let chunks = min(checks.count, ProcessInfo.processInfo.activeProcessorCount * 2)
        DispatchQueue.concurrentPerform(iterations: chunks) { chunk in
            var i = chunk
            var done: [(Int, EvidenceRow)] = []
            while i < checks.count {
                done.append((i, checks[i].row()))
                i += chunks
            }
            rows.withLock { for (i, row) in done { $0[i] = row } }
        }
        return rows.withLock { $0.map { $0! } }
    }

    /// The rows by transaction, as a replay finds them (a later signed event replaces an earlier).
    struct Collector: Sendable {
        private(set) var found: [String: Found] = [:]

        mutating func add(_ f: Found) {
            switch f {
            case .none: break
            case .erased(let t): found[t] = f
            case .row(let r): found[r.transaction] = f
            }
        }
    }

    /// Inserts or replaces `rows`.
    static func write(_ rows: [EvidenceRow], _ db: Database) throws {
        guard !rows.isEmpty, try db.tableExists("transaction_evidence") else { return }
        let statement = try db.cachedStatement(
            sql: "INSERT OR REPLACE INTO transaction_evidence (transaction_id, seq, level, reason, signing_header) VALUES (?, ?, ?, ?, ?)")
        for r in rows {
            try statement.execute(arguments: [r.transaction, r.seq, r.level, r.reason, r.header.map { Data($0) }])
        }
    }

    /// The stored rows.
    static func stored(_ db: Database) throws -> [String: EvidenceRow] {
        guard try db.tableExists("transaction_evidence") else { return [:] }
        var rows: [String: EvidenceRow] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT transaction_id, seq, level, reason, signing_header FROM transaction_evidence") {
            let r = EvidenceRow(
                transaction: row[0], seq: row[1], level: row[2], reason: row[3], header: (row[4] as Data?).map { [UInt8]($0) })
            rows[r.transaction] = r
        }
        return rows
    }

    /// How the stored rows differ from what `collector` found: one sentence per transaction.
    /// A transaction whose signed transaction was erased keeps the row stored for it.
    static func differences(_ collector: Collector, stored: [String: EvidenceRow]) -> [(transaction: String, seq: Int64?, message: String)] {
        var found: [(String, Int64?, String)] = []
        func describe(_ r: EvidenceRow) -> String { r.level + (r.reason.map { " (\($0))" } ?? "") }
        for (t, f) in collector.found.sorted(by: { $0.key < $1.key }) {
            guard case .row(let computed) = f else { continue }
            guard let row = stored[t] else {
                found.append((t, computed.seq, "transaction \(t) has no evidence row, but its signed transaction at seq \(computed.seq) checks as \(describe(computed))"))
                continue
            }
            if row != computed {
                found.append(
                    (
                        t, computed.seq,
                        "transaction \(t)'s evidence is stored as \(describe(row)) (seq \(row.seq)), but its signed transaction at seq \(computed.seq) checks as \(describe(computed))"
                    ))
            }
        }
        for (t, row) in stored.sorted(by: { $0.key < $1.key }) where collector.found[t] == nil {
            found.append((t, row.seq, "transaction \(t) has an evidence row (\(describe(row))) but no signed event of the log gives it one: a row added"))
        }
        return found
    }

    /// Makes the table what `collector` found, keeping the rows of erased signatures.
    static func reconcile(_ collector: Collector, _ db: Database) throws {
        guard try db.tableExists("transaction_evidence") else { return }
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
        for t in stored.keys where !keep.contains(t) && !current.contains(t) {
            try db.execute(sql: "DELETE FROM transaction_evidence WHERE transaction_id = ?", arguments: [t])
        }
        try write(rows.filter { stored[$0.transaction] != $0 }, db)
    }
}
