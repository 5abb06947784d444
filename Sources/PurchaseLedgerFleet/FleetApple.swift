public import Foundation
import NIOCore
import PostgresNIO
public import PurchaseLedger

extension FleetStore {
    /// Stores Apple's record (history pages, transactions' info, notifications:
    /// ``AppleDocument``) in the store's own tables (migration 0009), after verifying every
    /// signature with `verifier`'s roots exactly as ``Ledger/importApple(_:verifier:user:at:)``
    /// does; anything not Apple's refuses the whole import with the file, the line and the
    /// reason, and nothing is written. The same rules decide what is new: a `notificationUUID`
    /// held, a statement held, or one of the same facts as the latest held of its transaction is
    /// not stored again.
    ///
    /// Each record names the fleet's user whose transaction it is: `user` for history pages,
    /// else the one user whose shipped transactions name Apple's `transactionId` or
    /// `originalTransactionId` as their `store_transaction_id` (an id two users claim credits
    /// neither), else `user`. A complete history needs `user`: any device could claim one of
    /// another customer's ids. A record held with no user yet is credited when an import knows
    /// whose it is. Imports take turns (an advisory lock), so two at once never store one
    /// statement twice.
    ///
    /// ```swift
    /// let fleet = try await FleetStore.connect("postgres://ledger_apple@db.internal/fleet")
    /// let documents = try AppleDocument.parse(Array(body), file: "notification")
    /// let summary = try await fleet.importApple(documents)
    /// ```
    @discardableResult
    public func importApple(
        _ documents: [PlacedAppleDocument], verifier: AppleSignatureVerifier = AppleSignatureVerifier(), user: String? = nil, at now: Date = Date()
    ) async throws -> AppleImportSummary {
        let verified = try await VerifiedAppleDocuments.verify(documents, verifier: verifier, at: now)
        var ids = Set<String>(), storeIDs = Set<String>()
        func note(_ claims: SignedTransaction.Claims) {
            if let id = claims.transactionId {
                ids.insert(id)
                storeIDs.insert(id)
            }
            if let original = claims.originalTransactionId { storeIDs.insert(original) }
        }
        for (signed, _) in verified.transactions { note(signed.claims) }
        for (_, _, inner) in verified.notifications { if let inner { note(inner.claims) } }
        let uuids = verified.notifications.map(\.notification.uuid)
        let idList = Array(ids), storeList = Array(storeIDs)
        let user = user.map(Identifier.normalize)
        return try await run {
            try await transaction { () -> AppleImportSummary in
                try await connection.query("SELECT pg_advisory_xact_lock(7074127451)", logger: logger)
                var holdings = AppleHoldings()
                let held = try await connection.query(
                    """
                    SELECT \(unescaped: Self.claimColumns), user_id, source FROM apple_transactions WHERE transaction_id = ANY(\(idList)::text[])
                    ORDER BY record
                    """, logger: logger)
                var heldStatements = Set<[UInt8]>()
                for try await row in held {
                    let r = row.makeRandomAccess()
                    let claims = try Self.claims(r, from: 0)
                    holdings.hold(claims, user: try r[16].decode(String?.self), fromHistory: try r[17].decode(String.self) == "history")
                    heldStatements.insert(AppleRecord.statementDigest(of: claims))
                }
                for try await uuid in try await connection.query(
                    "SELECT notification_uuid FROM apple_notifications WHERE notification_uuid = ANY(\(uuids)::text[])", logger: logger
                ).decode(String.self) {
                    holdings.notifications.insert(uuid)
                }
                if let revision = verified.completedRevision {
                    for try await holder in try await connection.query(
                        "SELECT user_id FROM apple_histories WHERE revision = \(revision)", logger: logger
                    ).decode(String.self) {
                        holdings.holdHistory(revision: revision, user: holder)
                    }
                }
                var userByStoreID: [String: String] = [:]
                for try await (store, owner) in try await connection.query(
                    """
                    SELECT store_transaction_id, min(user_id) FROM transactions
                    WHERE store_transaction_id = ANY(\(storeList)::text[]) AND user_id IS NOT NULL AND user_id NOT LIKE '[erased %'
                    GROUP BY store_transaction_id HAVING count(DISTINCT user_id) = 1
                    """, logger: logger
                ).decode((String, String).self) {
                    userByStoreID[store] = owner
                }
                // A complete history is the user's named for it: in a fleet any device could claim
                // one of another customer's ids, so matches do not say whose it is.
                if user == nil, verified.transactions.contains(where: { $0.source == .history }) {
                    throw AppleImportError(
                        file: verified.historyFile, line: nil,
                        message: "history pages in a fleet store are the customer's named for them: give its user (--user)")
                }
                let plan = try holdings.plan(verified, userByStoreID: userByStoreID, user: user, inferHistoryUser: false)
                var rows: [(SignedTransaction, String, String?, String?)] = plan.transactions.map { ($0.signed, $0.source.rawValue, nil, $0.user) }
                for n in plan.notifications {
                    if let inner = n.transaction { rows.append((inner, "notification", n.notification.uuid, n.user)) }
                }
                // A statement held (a notification's transaction a history listed) is not stored twice.
                rows = rows.filter { heldStatements.insert(AppleRecord.statementDigest(of: $0.0.claims)).inserted }
                // Each chain's header once (as ship keeps a device's): the rows keep its digest.
                var headers: [[UInt8]: String] = [:]
                for jws in rows.map(\.0.jws) + plan.notifications.map(\.signed.jws) {
                    let header = SignedTransaction.split(jws: jws).header ?? ""
                    headers[SignedParts.digest(ofHeader: header)] = String(header)
                }
                if !headers.isEmpty {
                    let digests = try await storeSigningHeaders(headers)
                    // A header row someone else wrote must be the header its digest names, or no
                    // record that refers to it could be checked again.
                    for try await (digest, header) in try await connection.query(
                        "SELECT encode(digest, 'hex'), header FROM signing_headers WHERE encode(digest, 'hex') = ANY(\(digests)::text[])",
                        logger: logger
                    ).decode((String, String).self) where Self.hex(SignedParts.digest(ofHeader: header[...])) != digest {
                        throw FleetError(
                            .server,
                            "\(address): signing_headers row \(digest) does not hold the header its digest names (altered in the store): "
                                + "the owner must delete it (DELETE FROM signing_headers WHERE digest = '\\x\(digest)'); nothing was written")
                    }
                }
                if !rows.isEmpty { try await copyAppleTransactions(rows) }
                for n in plan.notifications {
                    let (header, body) = SignedTransaction.split(jws: n.signed.jws)
                    try await connection.query(
                        """
                        INSERT INTO apple_notifications (notification_uuid, notification_type, subtype, transaction_id, user_id, signed_date_ms,
                            signing_header, signed_body)
                        VALUES (\(n.notification.uuid), \(n.notification.type), \(n.notification.subtype), \(n.transaction?.claims.transactionId),
                            \(n.user), \(n.notification.signedDate), decode(\(Self.hex(SignedParts.digest(ofHeader: header ?? ""))), 'hex'), \(String(body)))
                        """, logger: logger)
                }
                // Records held with no user yet (a notification of a purchase no device had
                // recorded) are credited to the user this import knows they are of.
                if let user, verified.transactions.contains(where: { $0.source == .history }) {
                    // The user named for a history is whose its transactions are, whatever a
                    // device's claim credited them to before.
                    let ids = verified.transactions.filter { $0.source == .history }.compactMap(\.signed.claims.transactionId)
                    try await connection.query(
                        """
                        WITH a AS (UPDATE apple_transactions SET user_id = \(user) WHERE transaction_id = ANY(\(ids)::text[]) AND user_id IS DISTINCT FROM \(user) RETURNING 1)
                        UPDATE apple_notifications SET user_id = \(user) WHERE transaction_id = ANY(\(ids)::text[]) AND user_id IS DISTINCT FROM \(user)
                        """, logger: logger)
                }
                if !plan.owners.isEmpty {
                    let ids = plan.owners.keys.sorted()
                    try await connection.query(
                        """
                        WITH k AS (SELECT * FROM unnest(\(ids)::text[], \(ids.map { plan.owners[$0]! })::text[]) AS k(transaction_id, user_id)),
                            a AS (UPDATE apple_transactions x SET user_id = k.user_id FROM k WHERE x.transaction_id = k.transaction_id AND x.user_id IS NULL RETURNING 1)
                        UPDATE apple_notifications x SET user_id = k.user_id FROM k WHERE x.transaction_id = k.transaction_id AND x.user_id IS NULL
                        """, logger: logger)
                }
                var summary = AppleImportSummary()
                summary.transactions = plan.transactions.count
                summary.notifications = plan.notifications.count
                summary.alreadyHeld = plan.alreadyHeld
                if let (revision, owner, signedAt) = plan.history, let owner {
                    try await connection.query(
                        """
                        INSERT INTO apple_histories (user_id, revision, signed_date_ms)
                        VALUES (\(owner), \(revision), \(signedAt ?? Int64((now.timeIntervalSince1970 * 1000).rounded(.down))))
                        """, logger: logger)
                    summary.histories = 1
                }
                return summary
            }
        }
    }

    /// The statements `rows` (transaction, source, notification, user), none held, by binary COPY
    /// (the record numbers are the table's own). No temporary table: the shipping role may not
    /// make one (docs/fleet.md).
    private func copyAppleTransactions(_ rows: [(signed: SignedTransaction, source: String, notification: String?, user: String?)]) async throws {
        let columns = [
            "transaction_id", "signed_date_ms", "statement", "source", "notification_uuid", "user_id", "original_transaction_id", "bundle_id",
            "product", "type", "ownership", "environment", "storefront", "quantity", "price", "currency", "offer_type", "purchase_date_ms",
            "revocation_date_ms", "revocation_reason", "signing_header", "signed_body",
        ]
        try await copyBinary(into: "apple_transactions", columns: columns) { writer in
            var out = CopyBinary()
            for (signed, source, notification, user) in rows {
                let c = signed.claims
                out.startRow(fields: columns.count)
                out.field(c.transactionId)
                out.field(c.signedDate ?? 0)
                out.field(bytes: AppleRecord.statementDigest(of: c))
                out.field(source)
                out.field(notification)
                out.field(user)
                out.field(c.originalTransactionId)
                out.field(c.bundleId)
                out.field(c.productId)
                out.field(c.type)
                out.field(c.inAppOwnershipType)
                out.field(c.environment)
                out.field(c.storefront)
                out.optional(c.quantity.map(Int64.init))
                out.optional(c.price)
                out.field(c.currency)
                out.optional(c.offerType.map(Int64.init))
                out.optional(c.purchaseDate)
                out.optional(c.revocationDate)
                out.optional(c.revocationReason.map(Int64.init))
                let (header, body) = SignedTransaction.split(jws: signed.jws)
                out.field(bytes: SignedParts.digest(ofHeader: header ?? ""))
                out.field(String(body))
                if out.buffer.readableBytes > 1 << 20 { try await writer.write(out.take()) }
            }
            try await writer.write(out.finish())
        }
    }

    /// The columns ``claims(_:from:)`` reads, in its order.
    static let claimColumns =
        "transaction_id, original_transaction_id, bundle_id, product, purchase_date_ms, quantity, type, ownership, environment, storefront, "
        + "price, currency, offer_type, revocation_date_ms, revocation_reason, signed_date_ms"

    /// The claims in a row's ``claimColumns``, starting at column `first`.
    static func claims(_ row: PostgresRandomAccessRow, from first: Int) throws -> SignedTransaction.Claims {
        func text(_ i: Int) throws -> String? { try row[first + i].decode(String?.self) }
        func number(_ i: Int) throws -> Int64? { try row[first + i].decode(Int64?.self) }
        return SignedTransaction.Claims(
            transactionId: try text(0), originalTransactionId: try text(1), bundleId: try text(2), productId: try text(3), purchaseDate: try number(4),
            quantity: try number(5).map { Int($0) }, type: try text(6), inAppOwnershipType: try text(7), environment: try text(8), storefront: try text(9),
            price: try number(10), currency: try text(11), offerType: try number(12).map { Int($0) }, transactionReason: nil,
            revocationDate: try number(13), revocationReason: try number(14).map { Int($0) }, signedDate: try number(15))
    }

    /// The disagreements between the fleet's devices and Apple's record in the store, joined
    /// across every ledger: a transaction Apple charged is recorded when any ledger holds it
    /// (the iPad's purchase is not missing from the iPhone's ledger), and each device that
    /// still grants refunded content is a row of its own. Rows are ordered by kind, then
    /// ledger and seq. Apple's records were verified when stored; the store's roles keep others
    /// from writing them (docs/fleet.md).
    ///
    /// ```swift
    /// for d in try await fleet.divergences() { print(d.kind, d.ledger ?? "-", d.transaction ?? "-") }
    /// ```
    public func divergences() async throws -> [Divergence] {
        try await divergences(partSize: Self.divergencePart)
    }

    /// ``divergences()`` in parts of about `partSize` statements (tests ask for small ones).
    func divergences(partSize: Int64) async throws -> [Divergence] {
        try await run {
            var total: Int64 = 0
            for try await n in try await connection.query("SELECT count(*) FROM apple_transactions", logger: logger).decode(Int64.self) { total = n }
            guard total > 0 else { return [] }
            var family = Set<String>()
            for try await id in try await connection.query(
                "SELECT DISTINCT transaction_id FROM apple_notifications WHERE notification_type = 'REVOKE' AND transaction_id IS NOT NULL", logger: logger
            ).decode(String.self) {
                family.insert(id)
            }
            var histories: [Reconciliation.HistoryMark] = []
            for try await (owner, revision, signed) in try await connection.query(
                "SELECT user_id, revision, signed_date_ms FROM apple_histories ORDER BY signed_date_ms, user_id, revision", logger: logger
            ).decode((String, String, Int64).self) {
                histories.append(Reconciliation.HistoryMark(seq: nil, revision: revision, user: owner, at: Timestamp(millisecondsSinceEpoch: signed)))
            }
            // In parts of at most about 25,000 of Apple's statements, by a hash of Apple's
            // transaction id: a part holds every statement of its transactions and every device
            // transaction naming them, so the parts compare on their own and memory stays flat
            // as the store grows.
            let parts = Int32(min((total + partSize - 1) / max(partSize, 1), 1 << 16))
            var rows: [Divergence] = []
            for part in 0..<parts {
                rows += try await divergences(part: part, of: parts, family: family, histories: histories)
            }
            // The seq of each row's purchase or restore event in its ledger.
            let keyed = rows.filter { $0.ledger != nil && $0.transaction != nil }
            if !keyed.isEmpty {
                // Read from the blocks of the ledgers named (a block that does not decode leaves its
                // transactions without a seq: the fleet audit names it).
                var seqs: [String: Int64] = [:]
                var wanted: [String: Set<String>] = [:]
                for row in keyed { wanted[row.ledger!, default: []].insert(row.transaction!) }
                let ledgers = wanted.keys.sorted()
                // (Frames only: the links, half of a block's bytes, are not fetched.)
                try await forEachFramesBlock(of: ledgers) { block in
                    guard let transactions = wanted[block.ledger] else { return }
                    try? FleetBlock.scan(
                        firstSeq: block.firstSeq, lastSeq: block.lastSeq, rawSize: block.rawSize, frames: block.frames,
                        subjectOf: [.transactionPurchased, .transactionRestored]
                    ) { seq, _, anomaly, subject in
                        guard anomaly == nil, let subject, transactions.contains(subject) else { return }
                        let key = block.ledger + "\u{0}transaction:" + subject
                        seqs[key] = min(seqs[key] ?? .max, seq)
                    }
                }
                for i in rows.indices {
                    guard let ledger = rows[i].ledger, let transaction = rows[i].transaction else { continue }
                    rows[i].deviceSeq = seqs[ledger + "\u{0}transaction:" + transaction]
                }
            }
            let order = Dictionary(uniqueKeysWithValues: Divergence.Kind.allCases.enumerated().map { ($1, $0) })
            return rows.sorted {
                (order[$0.kind]!, $0.ledger ?? "", $0.deviceSeq ?? .max, $0.appleTransaction ?? "")
                    < (order[$1.kind]!, $1.ledger ?? "", $1.deviceSeq ?? .max, $1.appleTransaction ?? "")
            }
        }
    }

    /// How many of Apple's statements one part of the divergence report compares at most (about).
    static let divergencePart: Int64 = 25_000

    /// The divergences of one part (``divergences()``): Apple's statements whose transaction id
    /// hashes to `part`, and the device transactions they, or a complete history, concern.
    private func divergences(part: Int32, of parts: Int32, family: Set<String>, histories: [Reconciliation.HistoryMark]) async throws -> [Divergence] {
        let inPart = "(hashtext(transaction_id) & 2147483647) % \(parts) = \(part)"
        var records: [AppleRecord] = []
        let recordRows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT a.record, a.source, a.notification_uuid, n.notification_type, n.subtype, a.user_id, a.transaction_id, a.product,
                        a.purchase_date_ms, a.type, a.ownership, a.environment, a.price, a.currency, a.revocation_date_ms, a.revocation_reason,
                        a.signed_date_ms
                    FROM apple_transactions a LEFT JOIN apple_notifications n ON n.notification_uuid = a.notification_uuid
                    WHERE \(inPart.replacingOccurrences(of: "transaction_id", with: "a.transaction_id"))
                    ORDER BY a.record
                    """), logger: logger)
        for try await row in recordRows {
            let r = row.makeRandomAccess()
            func text(_ i: Int) throws -> String? { try r[i].decode(String?.self) }
            func number(_ i: Int) throws -> Int64? { try r[i].decode(Int64?.self) }
            let origin: AppleRecord.Origin
            switch try r[1].decode(String.self) {
            case "history": origin = .history
            case "notification": origin = .notification(uuid: try text(2) ?? "", type: try text(3) ?? "", subtype: try text(4))
            default: origin = .transactionInfo
            }
            // The facts the comparison reads; the others stay in the table.
            let claims = SignedTransaction.Claims(
                transactionId: try text(6), originalTransactionId: nil, bundleId: nil, productId: try text(7), purchaseDate: try number(8), quantity: nil,
                type: try text(9), inAppOwnershipType: try text(10), environment: try text(11), storefront: nil, price: try number(12),
                currency: try text(13), offerType: nil, transactionReason: nil, revocationDate: try number(14),
                revocationReason: try number(15).map { Int($0) }, signedDate: try number(16))
            records.append(AppleRecord(claims: claims, origin: origin, seq: try r[0].decode(Int64.self), user: try text(5)))
        }
        // The device transactions Apple's statements name, and the purchases of users whose
        // complete history may lack them.
        let columns =
            "t.ledger_id::text, t.transaction_id, t.user_id, t.product, t.state, t.revoked, t.finished, t.finished_at_ms, t.purchased_at_ms, "
            + "t.store_transaction_id, t.price, t.currency, t.environment, t.ownership, t.product_kind"
        var transactions: [Reconciliation.DeviceTransaction] = []
        let deviceRows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    SELECT \(columns) FROM transactions t
                    WHERE t.store_transaction_id IN (SELECT transaction_id FROM apple_transactions WHERE \(inPart))
                    UNION
                    SELECT \(columns) FROM transactions t
                    JOIN (SELECT user_id, max(signed_date_ms) AS signed FROM apple_histories GROUP BY user_id) h ON h.user_id = t.user_id
                    WHERE t.state = 'purchased' AND t.environment IS NULL AND t.store_transaction_id IS NOT NULL AND t.purchased_at_ms <= h.signed
                        AND \(inPart.replacingOccurrences(of: "transaction_id", with: "t.store_transaction_id"))
                    """), logger: logger)
        var ledgers: [String: String] = [:]  // one copy of each ledger id's text
        for try await row in deviceRows {
            let r = row.makeRandomAccess()
            func text(_ i: Int) throws -> String? { try r[i].decode(String?.self) }
            func number(_ i: Int) throws -> Int64? { try r[i].decode(Int64?.self) }
            let paid = PurchaseTerms(
                price: try text(10), currency: try text(11), environment: try text(12).flatMap(StoreEnvironment.init(rawValue:)) ?? .production,
                ownership: try text(13).flatMap(Ownership.init(rawValue:)) ?? .purchased)
            let ledger = try text(0).map { id in ledgers[id, default: id] }
            if let ledger { ledgers[ledger] = ledger }
            transactions.append(
                Reconciliation.DeviceTransaction(
                    ledger: ledger, transaction: try text(1) ?? "", user: try text(2), product: try text(3) ?? "", state: try text(4) ?? "",
                    revoked: try r[5].decode(Bool.self), finished: try r[6].decode(Bool.self), finishedAt: try number(7).map(Timestamp.init(millisecondsSinceEpoch:)),
                    purchasedAt: try number(8).map(Timestamp.init(millisecondsSinceEpoch:)), storeTransactionId: try text(9), paid: paid,
                    consumable: try text(14) == ProductKind.consumable.rawValue, arrival: nil))
        }
        // From when each user's devices could have recorded a purchase: the first event of the
        // earliest of their ledgers. A user with no ledger in the store is not compared.
        let unmatchedUsers = Array(Reconciliation.usersAskedForFirstEvents(records: records, transactions: transactions))
        var firstEvents: [String: Timestamp] = [:]
        if !unmatchedUsers.isEmpty {
            // Each ledger's first event opens its first block.
            var owners: [String: [String]] = [:]
            for try await (ledger, owner) in try await connection.query(
                "SELECT DISTINCT ledger_id::text, user_id FROM transactions WHERE user_id = ANY(\(unmatchedUsers)::text[])", logger: logger
            ).decode((String, String).self) {
                owners[ledger, default: []].append(owner)
            }
            try await forEachFramesBlock(of: owners.keys.sorted(), where: "e.first_seq = 1") { block in
                guard let at = try? FleetBlock.firstEventAt(firstSeq: block.firstSeq, lastSeq: block.lastSeq, rawSize: block.rawSize, frames: block.frames) else { return }
                for owner in owners[block.ledger] ?? [] {
                    firstEvents[owner] = min(firstEvents[owner] ?? Timestamp(nanosecondsSinceEpoch: .max), Timestamp(nanosecondsSinceEpoch: at))
                }
            }
        }
        return Reconciliation.compare(
            records: records, transactions: transactions, histories: histories, firstEventAt: { $0.flatMap { firstEvents[$0] } }, revokedByFamily: family)
    }
}

extension FleetStore {
    /// The fleet audit's part on Apple's record (``audit(witness:appleVerifier:progress:problem:)``,
    /// on its connection and snapshot): every statement and notification is its kept JWS (header
    /// from `signing_headers`), verifies as Apple's with `verifier`'s roots at its import time, and
    /// its columns are what that JWS states (by the statement digest, which covers every fact
    /// kept). Returns how many rows passed; reports each other.
    func auditAppleRecords(verifier: AppleSignatureVerifier, report: (FleetAuditProblem) -> Void) async throws -> Int {
        let roots = AppleSignatureVerifier(roots: verifier.roots)
        // Verifies kept JWSs, each named for its problem line; returns how many are Apple's.
        func verify(_ pending: [(signed: SignedTransaction, at: Date, name: String)]) async -> Int {
            let evidence = await VerifiedAppleDocuments.evidence(of: pending.map { ($0.signed, $0.at, roots) })
            for (item, found) in zip(pending, evidence) where found != .apple {
                report(FleetAuditProblem(ledgerID: "", seq: nil, message: "\(item.name): not verified as Apple's: \(found.reason ?? found.name)"))
            }
            return evidence.filter { $0 == .apple }.count
        }
        var passed = 0
        var after: Int64 = 0
        // Every chain's header row holds the header its digest names (the shipping role writes them too).
        for try await (digest, header) in try await connection.query(
            "SELECT encode(digest, 'hex'), header FROM signing_headers ORDER BY digest", logger: logger
        ).decode((String, String).self) where Self.hex(SignedParts.digest(ofHeader: header[...])) != digest {
            report(
                FleetAuditProblem(
                    ledgerID: "", seq: nil,
                    message: "signing_headers row \(digest) does not hold the header its digest names: altered in the store (every record of that chain then fails)"))
        }
        while true {
            var batch: [(record: Int64, id: String, statement: [UInt8], columns: SignedTransaction.Claims, jws: String?, at: Date)] = []
            let rows = try await connection.query(
                """
                SELECT a.record, a.statement, h.header, a.signed_body, extract(epoch FROM a.imported_at)::float8, \(unescaped: Self.claimColumns.split(separator: ",").map { "a." + $0.trimmingCharacters(in: .whitespaces) }.joined(separator: ", "))
                FROM apple_transactions a LEFT JOIN signing_headers h ON h.digest = a.signing_header
                WHERE a.record > \(after) ORDER BY a.record LIMIT 10000
                """, logger: logger)
            for try await row in rows {
                let r = row.makeRandomAccess()
                let header = try r[2].decode(String?.self), body = try r[3].decode(String.self)
                let columns = try Self.claims(r, from: 5)
                batch.append(
                    (
                        try r[0].decode(Int64.self), columns.transactionId ?? "", Array(buffer: try r[1].decode(ByteBuffer.self)), columns,
                        header.map { $0 + "." + body }, Date(timeIntervalSince1970: try r[4].decode(Double.self))
                    ))
            }
            guard let last = batch.last else { break }
            after = last.record
            var pending: [(signed: SignedTransaction, at: Date, name: String)] = []
            for row in batch {
                let name = "Apple's record \(row.record) (transaction \(row.id))"
                func problem(_ message: String) { report(FleetAuditProblem(ledgerID: "", seq: nil, message: "\(name): \(message)")) }
                guard let jws = row.jws else {
                    problem("its header is not in signing_headers: the JWS cannot be checked")
                    continue
                }
                guard let signed = try? SignedTransaction(jws: jws) else {
                    problem("what it keeps is not a signed transaction")
                    continue
                }
                if AppleRecord.statementDigest(of: signed.claims) != row.statement || AppleRecord.statementDigest(of: row.columns) != row.statement {
                    problem("its columns are not what its JWS states: altered in the store")
                    continue
                }
                pending.append((signed, row.at, name))
            }
            passed += await verify(pending)
        }
        // Notifications: the kept JWS, Apple's, of the UUID and type the row says.
        var notes: [(uuid: String, type: String, subtype: String?, transaction: String?, signedDate: Int64?, jws: String?, at: Date)] = []
        for try await (uuid, type, subtype, transaction, signedDate, header, body, at) in try await connection.query(
            """
            SELECT n.notification_uuid, n.notification_type, n.subtype, n.transaction_id, n.signed_date_ms, h.header, n.signed_body,
                extract(epoch FROM n.imported_at)::float8
            FROM apple_notifications n LEFT JOIN signing_headers h ON h.digest = n.signing_header ORDER BY 1
            """, logger: logger
        ).decode((String, String, String?, String?, Int64?, String?, String, Double).self) {
            notes.append((uuid, type, subtype, transaction, signedDate, header.map { $0 + "." + body }, Date(timeIntervalSince1970: at)))
        }
        var pending: [(signed: SignedTransaction, at: Date, name: String)] = []
        for n in notes {
            func problem(_ message: String) { report(FleetAuditProblem(ledgerID: "", seq: nil, message: "Apple's notification \(n.uuid): \(message)")) }
            guard let jws = n.jws, let signed = try? SignedTransaction(jws: jws), let said = try? AppleNotification(payloadOf: signed) else {
                problem("what it keeps is not a signed notification (or its header is not in signing_headers)")
                continue
            }
            let inner = said.signedTransaction.flatMap { try? SignedTransaction(jws: $0) }
            guard said.uuid == n.uuid, said.type == n.type, said.subtype == n.subtype, said.signedDate == n.signedDate,
                inner?.claims.transactionId == n.transaction
            else {
                problem("its columns are not what its JWS states: altered in the store")
                continue
            }
            pending.append((signed, n.at, "Apple's notification \(n.uuid)"))
        }
        return passed + (await verify(pending))
    }
}

extension CopyBinary {
    /// A bigint field, NULL when nil.
    mutating func optional(_ number: Int64?) {
        if let number { field(number) } else { null() }
    }
}
