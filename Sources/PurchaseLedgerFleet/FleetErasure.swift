import PostgresNIO
import PurchaseLedger

/// What ``FleetStore/forget(user:)`` erased.
public struct FleetErasure: Sendable, Hashable {
    /// Ledgers that held the user.
    public var ledgers: Int
    /// Projection rows whose personal values were replaced.
    public var rows: Int
    /// Apple's records of the user deleted (their transactions, notifications and histories).
    public var appleRecords: Int = 0
}

extension FleetStore {
    /// Erases a user from every ledger's rows in the store (contract 5.3): in each transaction of
    /// the user, and in its downloads and owned content, the user id becomes `[erased <ref>]`
    /// (the ledger's own marker for it) and every other personal value `[erased]`. The store
    /// remembers each ledger's ref for the user (`erased_users`, never the id), so a later ship
    /// of a device that still holds the user sends those rows with markers: the user does not
    /// come back. The user's records of Apple's are deleted. Then the tables are vacuumed, so no
    /// dead row version keeps the values.
    ///
    /// The shipped logs hold no personal value (only refs and salted commitments), except the
    /// logs of ledgers written before their migration 0007: a user any of those holds is refused
    /// (``LedgerError/Code/notErasable``), and nothing changes. Run it as the owner role (it
    /// updates rows and vacuums); docs/fleet.md says what the operator must do about WAL
    /// archives, replicas and backups, which PostgreSQL keeps beyond any of this.
    ///
    /// ```swift
    /// let erased = try await fleet.forget(user: "u-04217")
    /// print("erased from \(erased.ledgers) ledgers, \(erased.rows) rows")
    /// ```
    public func forget(user: String) async throws -> FleetErasure {
        let user = Identifier.normalize(user)
        // VACUUM by a role that does not own a table only warns and skips it, which would leave
        // the old values in dead row versions: refuse such a role before changing anything.
        let owns = try await run {
            var owns = false
            for try await row in try await connection.query(
                """
                SELECT coalesce(bool_and(pg_has_role(current_user, c.relowner, 'MEMBER')), false)
                FROM pg_class c WHERE c.relname IN ('transactions', 'downloads', 'owned_content', 'owned_content_history',
                    'apple_transactions', 'apple_notifications', 'apple_histories', 'personal_values')
                    AND c.relnamespace = 'public'::regnamespace
                """, logger: logger)
            {
                owns = try row.decode(Bool.self)
            }
            return owns
        }
        guard owns else {
            throw FleetError(
                .permission,
                "\(address): forget must run as the role that owns the fleet's tables (the one that ran migrate): it vacuums them, "
                    + "and PostgreSQL lets only their owner do that; nothing was changed")
        }
        let erasure = try await run {
            try await transaction { () -> FleetErasure in
                try await connection.query(
                    """
                    CREATE TEMPORARY TABLE erased_transactions ON COMMIT DROP AS
                    SELECT ledger_id, transaction_id FROM transactions WHERE user_id = \(user)
                    """, logger: logger)
                // Each ledger's ref for the user id, from the payloads that name it.
                var refs: [String: Int64] = [:]
                var inline = Set<String>()
                // Read from every block of each such ledger, past its head too (a head moved back
                // must not hide a ledger); the first event naming the user gives its ref, and the
                // ledger's stored user id row (migration 0010), where it has one, wins.
                var streams: [String: Set<String>] = [:]
                for try await (ledger, transaction) in try await connection.query(
                    "SELECT ledger_id::text, transaction_id FROM pg_temp.erased_transactions", logger: logger
                ).decode((String, String).self) {
                    streams[ledger, default: []].insert("transaction:" + transaction)
                }
                for (ledger, events) in try await eventsOfEveryBlock(of: streams.keys.sorted()) {
                    // The ledger's chain of blocks first; a block off it only where the chain names no ref.
                    var found: (chain: Int64?, other: Int64?) = (nil, nil)
                    for (e, onChain) in events.sorted(by: { $0.event.seq < $1.event.seq })
                    where [.paymentQueued, .transactionPurchased, .transactionRestored].contains(e.type) {
                        guard let subject = e.subject, streams[ledger]?.contains("transaction:" + subject) == true else { continue }
                        switch PayloadUser(type: e.type, payload: e.payload) {
                        case .ref(let ref):
                            if onChain { found.chain = found.chain ?? ref } else { found.other = found.other ?? ref }
                        case .inline: inline.insert(ledger)
                        case .none: break
                        }
                    }
                    if let ref = found.chain ?? found.other { refs[ledger] = ref }
                }
                for try await (ledger, ref) in try await connection.query(
                    """
                    SELECT v.ledger_id::text, v.ref FROM personal_values v
                    WHERE v.ledger_id = ANY(\(streams.keys.sorted())::text[]::uuid[]) AND v.owner = v.ref AND v.value = convert_to(\(user), 'UTF8')
                    """, logger: logger
                ).decode((String, Int64).self) {
                    refs[ledger] = ref
                }
                if !inline.isEmpty {
                    throw LedgerError.make(
                        .notErasable,
                        "the shipped logs of \(inline.count) ledger(s) (\(inline.sorted().prefix(5).joined(separator: ", "))) hold this user inside their hash chain: "
                            + "they were written before personal values were kept apart (migration 0007), so the store cannot erase the user "
                            + "without breaking their chains; nothing was changed")
                }
                // Apple's record of the user: what names the user, and what names no one yet but
                // is about the user's transactions (a notification stored before their ledger).
                var apple = 0
                for try await count in try await connection.query(
                    """
                    WITH mine AS (
                            -- The user's store ids that no other user's transaction names.
                            SELECT t.store_transaction_id FROM transactions t JOIN pg_temp.erased_transactions e
                                ON t.ledger_id = e.ledger_id AND t.transaction_id = e.transaction_id
                            WHERE t.store_transaction_id IS NOT NULL
                            EXCEPT
                            SELECT store_transaction_id FROM transactions
                            WHERE store_transaction_id IS NOT NULL AND user_id IS DISTINCT FROM \(user)),
                        a AS (DELETE FROM apple_transactions WHERE user_id = \(user)
                            OR (user_id IS NULL AND (transaction_id IN (SELECT store_transaction_id FROM mine)
                                OR original_transaction_id IN (SELECT store_transaction_id FROM mine)))
                            RETURNING transaction_id, user_id),
                        n AS (DELETE FROM apple_notifications WHERE user_id = \(user)
                            OR (user_id IS NULL AND transaction_id IN (SELECT transaction_id FROM a UNION SELECT store_transaction_id FROM mine))
                            RETURNING 1),
                        h AS (DELETE FROM apple_histories WHERE user_id = \(user) RETURNING 1)
                    SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM n) + (SELECT count(*) FROM h)
                    """, logger: logger
                ).decode(Int64.self) {
                    apple = Int(count)
                }
                guard !refs.isEmpty else {
                    if apple > 0 {
                        // Remembered as every erasure is, so a device that still holds the user
                        // and ships later sends the user masked.
                        try await connection.query(
                            "INSERT INTO erased_subjects (digest, erased_at) VALUES (erased_subject_digest(\(user)), now()) ON CONFLICT DO NOTHING",
                            logger: logger)
                        return FleetErasure(ledgers: 0, rows: 0, appleRecords: apple)
                    }
                    throw LedgerError.make(.unknownUser, "the fleet store holds no transaction of that user (never shipped, or already erased)")
                }
                let ledgers = refs.keys.sorted()
                func set(_ table: String) -> String {
                    (ErasedRows.personalColumns[table] ?? []).filter { $0 != "user_id" }
                        .map { "\($0) = CASE WHEN \($0) IS NULL THEN NULL ELSE '\(ErasedRows.valueMarker)' END" }
                        .joined(separator: ", ")
                }
                let counts = try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            WITH t AS (
                                UPDATE transactions x SET user_id = '[erased ' || k.ref || ']', \(set("transactions"))
                                FROM unnest($1::text[]::uuid[], $2::int8[]) AS k(ledger_id, ref)
                                WHERE x.ledger_id = k.ledger_id AND x.user_id = $3 RETURNING 1),
                            d AS (
                                UPDATE downloads x SET \(set("downloads")) FROM pg_temp.erased_transactions e
                                WHERE x.ledger_id = e.ledger_id AND x.transaction_id = e.transaction_id RETURNING x.ledger_id, x.download_id),
                            o AS (
                                UPDATE owned_content x SET \(set("owned_content")) FROM pg_temp.erased_transactions e
                                WHERE x.ledger_id = e.ledger_id AND x.transaction_id = e.transaction_id RETURNING 1),
                            h AS (
                                UPDATE owned_content_history x SET \(set("owned_content_history"))
                                WHERE (x.ledger_id, x.download_id) IN (
                                    SELECT d.ledger_id, d.download_id FROM downloads d JOIN pg_temp.erased_transactions e
                                    ON d.ledger_id = e.ledger_id AND d.transaction_id = e.transaction_id)
                                RETURNING 1),
                            s AS (
                                INSERT INTO erased_subjects (digest, erased_at) VALUES (erased_subject_digest($3), now())
                                ON CONFLICT DO NOTHING RETURNING 1),
                            p AS (
                                DELETE FROM personal_values x USING unnest($1::text[]::uuid[], $2::int8[]) AS k(ledger_id, ref)
                                WHERE x.ledger_id = k.ledger_id AND (x.ref = k.ref OR x.owner = k.ref) RETURNING 1),
                            u AS (
                                INSERT INTO erased_users (ledger_id, user_ref, erased_at)
                                SELECT k.ledger_id, k.ref, now() FROM unnest($1::text[]::uuid[], $2::int8[]) AS k(ledger_id, ref)
                                ON CONFLICT DO NOTHING RETURNING 1)
                            SELECT (SELECT count(*) FROM t) + (SELECT count(*) FROM d) + (SELECT count(*) FROM o) + (SELECT count(*) FROM h)
                                + 0 * (SELECT count(*) FROM s) + 0 * (SELECT count(*) FROM p)
                            """,
                        binds: try binds(ledgers, ledgers.map { refs[$0]! }, user)),
                    logger: logger)
                var rows = 0
                for try await row in counts { rows = Int(try row.decode(Int64.self)) }
                return FleetErasure(ledgers: ledgers.count, rows: rows, appleRecords: apple)
            }
        }
        // The old row versions are dead but still in the table files until VACUUM.
        _ = try await run {
            try await connection.query(
                "VACUUM transactions, downloads, owned_content, owned_content_history, apple_transactions, apple_notifications, apple_histories, personal_values",
                logger: logger)
        }
        return erasure
    }

    private func binds(_ ledgers: [String], _ refs: [Int64], _ user: String) throws -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(ledgers)
        binds.append(refs)
        binds.append(user)
        return binds
    }
}
