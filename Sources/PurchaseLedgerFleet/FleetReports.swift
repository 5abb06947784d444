import Foundation
import GRDB
import NIOCore
import NIOFoundationCompat
import PostgresNIO
import PurchaseLedger

/// A purchase-history entry of the fleet: the entry and the ledger (device) it came from.
public struct FleetHistoryEntry: Sendable, Hashable {
    public var ledgerID: String
    public var entry: PurchaseHistoryEntry
}

/// A download of the fleet, with its ledger.
public struct FleetDownload: Sendable, Hashable {
    public var ledgerID: String
    public var download: DownloadRecord
}

/// A transaction of the fleet, with its ledger.
public struct FleetTransaction: Sendable, Hashable {
    public var ledgerID: String
    public var transaction: TransactionRecord
}

/// The fleet's reports: the same views as a single ledger's (``Ledger/purchaseHistory(_:)`` and
/// the others), computed in SQL on PostgreSQL over every shipped ledger, with bound parameters
/// only. Each gives the figures the same view gives over all those ledgers merged. Sort orders
/// are the single ledger's, ties broken by id and then ledger id; text is compared bytewise
/// (`COLLATE "C"`), as SQLite does.
extension FleetStore {
    /// Transactions matching `query` across the fleet (a user's history from every device),
    /// sorted by purchase date (queue date when never purchased), with their downloads.
    public func purchaseHistory(_ query: PurchaseHistoryQuery = PurchaseHistoryQuery()) async throws -> [FleetHistoryEntry] {
        var conditions: [String] = []
        var binds = PostgresBindings()
        func bind(_ value: some PostgresNonThrowingEncodable & Sendable) -> String {
            binds.append(value)
            return "$\(binds.count)"
        }
        if let user = query.user { conditions.append("t.user_id = \(bind(Identifier.normalize(user)))") }
        if let product = query.product { conditions.append("t.product = \(bind(Identifier.normalize(product)))") }
        if let from = query.from { conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) >= \(bind(Projector.ms(from)))") }
        if let to = query.to { conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) < \(bind(Projector.ms(to)))") }
        if !query.kinds.isEmpty { conditions.append("p.kind = ANY(\(bind(query.kinds.map(\.rawValue))))") }
        let sql = """
            SELECT t.*, p.kind AS product_kind, p.price AS product_price, p.currency AS product_currency
            FROM transactions t LEFT JOIN products p ON p.product = t.product
            \(conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND "))
            ORDER BY coalesce(t.purchased_at_ms, t.queued_at_ms) NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            LIMIT \(bind(Int64(query.limit))) OFFSET \(bind(Int64(query.offset)))
            """
        return try await historyEntries(PostgresQuery(unsafeSQL: sql, binds: binds))
    }

    /// Paid but never delivered, across the fleet: purchased or restored, not revoked, with
    /// hosted content never copied out.
    public func undelivered(limit: Int = 1000) async throws -> [FleetHistoryEntry] {
        try await historyEntries(
            """
            SELECT t.*, p.kind AS product_kind, p.price AS product_price, p.currency AS product_currency
            FROM transactions t LEFT JOIN products p ON p.product = t.product
            WHERE t.state IN ('purchased', 'restored') AND NOT t.revoked
              AND EXISTS (SELECT 1 FROM downloads d WHERE d.ledger_id = t.ledger_id AND d.transaction_id = t.transaction_id AND NOT d.copied_out)
            ORDER BY t.purchased_at_ms NULLS FIRST, t.transaction_id COLLATE "C", t.ledger_id
            LIMIT \(Int64(limit))
            """)
    }

    /// Revenue per product and currency over the fleet (``Ledger/revenue(from:to:groupBy:)``):
    /// summed per day, product and price in SQL, made into lines by the same Swift code.
    public func revenue(from: Timestamp? = nil, to: Timestamp? = nil, groupBy: RevenuePeriod? = nil) async throws -> [RevenueLine] {
        let rows = try await fetch(
            """
            SELECT CASE WHEN \(groupBy != nil) THEN floor(t.purchased_at_ms / 86400000.0)::bigint ELSE 0 END AS day,
                   t.product, p.currency, p.price, count(*) AS purchases, sum(t.quantity)::bigint AS units,
                   sum(CASE WHEN t.revoked THEN t.quantity ELSE 0 END)::bigint AS refunded
            FROM transactions t JOIN products p ON p.product = t.product
            WHERE t.state = 'purchased' AND t.purchased_at_ms >= \(from.map(Projector.ms) ?? Int64.min) AND t.purchased_at_ms < \(to.map(Projector.ms) ?? Int64.max)
            GROUP BY 1, t.product, p.currency, p.price
            """)
        return RevenueLine.lines(
            rows.map(RevenueGroup.init(row:)), groupBy: groupBy)
    }

    /// Started downloads with no progress for `idle` as of `asOf` (by default, the fleet's latest
    /// download activity), oldest first.
    public func stuckDownloads(idle: Duration = .seconds(3600), asOf: Timestamp? = nil) async throws -> [FleetDownload] {
        var now = asOf.map(Projector.ms)
        if now == nil {
            now = try await fetch("SELECT coalesce(max(last_activity_at_ms), 0) AS now FROM downloads").first?["now"] ?? 0
        }
        return try await fetch(
            """
            SELECT * FROM downloads WHERE started AND state IN ('waiting', 'active') AND last_activity_at_ms <= \(StuckCutoff.milliseconds(now: now!, idle: idle))
            ORDER BY last_activity_at_ms, download_id COLLATE "C", ledger_id
            """
        ).map { FleetDownload(ledgerID: $0["ledger_id"], download: DownloadRecord(row: $0)) }
    }

    /// Transactions that reached a final state but were never finished, across the fleet.
    public func unfinishedTransactions() async throws -> [FleetTransaction] {
        let rows = try await fetch(
            """
            SELECT * FROM transactions WHERE NOT finished AND state IN ('purchased', 'restored', 'failed')
            ORDER BY coalesce(purchased_at_ms, failed_at_ms) NULLS FIRST, transaction_id COLLATE "C", ledger_id
            """)
        return try await withDownloadIDs(rows.map { FleetTransaction(ledgerID: $0["ledger_id"], transaction: TransactionRecord(row: $0)) })
    }

    /// Payment failures by error code across the fleet, most frequent first.
    public func failureRates(from: Timestamp? = nil, to: Timestamp? = nil) async throws -> [FailureRate] {
        let low = from.map(Projector.ms) ?? Int64.min, high = to.map(Projector.ms) ?? Int64.max
        let total: Int64 =
            try await fetch(
                """
                SELECT count(*) AS n FROM transactions WHERE state IN ('purchased', 'failed')
                AND coalesce(purchased_at_ms, failed_at_ms) >= \(low) AND coalesce(purchased_at_ms, failed_at_ms) < \(high)
                """
            ).first?["n"] ?? 0
        return try await fetch(
            """
            SELECT error_domain, error_code, min(error_message COLLATE "C") AS message, count(*) AS n FROM transactions
            WHERE state = 'failed' AND failed_at_ms >= \(low) AND failed_at_ms < \(high)
            GROUP BY error_domain, error_code ORDER BY n DESC, error_domain COLLATE "C", error_code
            """
        ).map { row in
            let count: Int = row["n"]
            return FailureRate(
                domain: row["error_domain"], code: row["error_code"], message: row["message"], count: count,
                share: total == 0 ? 0 : Double(count) / Double(total))
        }
    }

    /// How many ledgers and events the store holds.
    public func counts() async throws -> (ledgers: Int, events: Int) {
        let row = try await fetch("SELECT (SELECT count(*) FROM ledgers) AS ledgers, (SELECT count(*) FROM events) AS events").first
        return (row?["ledgers"] ?? 0, row?["events"] ?? 0)
    }

    // MARK: - Rows

    /// History entries from transaction rows joined with their product, with their downloads.
    private func historyEntries(_ query: PostgresQuery) async throws -> [FleetHistoryEntry] {
        let rows = try await fetch(query)
        let transactions = rows.map { FleetTransaction(ledgerID: $0["ledger_id"], transaction: TransactionRecord(row: $0)) }
        let downloads = try await downloads(of: transactions)
        return zip(rows, transactions).map { row, t in
            var record = t.transaction
            let own = downloads[DownloadOwner(ledger: t.ledgerID, transaction: record.transaction)] ?? []
            record.downloads = own.map(\.download)
            return FleetHistoryEntry(
                ledgerID: t.ledgerID,
                entry: PurchaseHistoryEntry(
                    transaction: record, kind: (row["product_kind"] as String?).flatMap(ProductKind.init(rawValue:)),
                    price: row["product_price"], currency: row["product_currency"], downloads: own))
        }
    }

    private func withDownloadIDs(_ transactions: [FleetTransaction]) async throws -> [FleetTransaction] {
        let downloads = try await downloads(of: transactions)
        return transactions.map { t in
            var t = t
            t.transaction.downloads = (downloads[DownloadOwner(ledger: t.ledgerID, transaction: t.transaction.transaction)] ?? []).map(\.download)
            return t
        }
    }

    private struct DownloadOwner: Hashable {
        var ledger: String
        var transaction: String
    }

    /// The downloads of these transactions, in delivery order: one query.
    private func downloads(of transactions: [FleetTransaction]) async throws -> [DownloadOwner: [DownloadRecord]] {
        guard !transactions.isEmpty else { return [:] }
        let rows = try await fetch(
            """
            SELECT d.* FROM downloads d
            JOIN unnest(\(transactions.map(\.ledgerID))::text[], \(transactions.map(\.transaction.transaction))::text[]) AS k(ledger_id, transaction_id)
              ON d.ledger_id = k.ledger_id::uuid AND d.transaction_id = k.transaction_id
            ORDER BY d.position
            """)
        var result: [DownloadOwner: [DownloadRecord]] = [:]
        for row in rows {
            let record = DownloadRecord(row: row)
            result[DownloadOwner(ledger: row["ledger_id"], transaction: record.transaction ?? ""), default: []].append(record)
        }
        return result
    }

    /// Runs a query and converts its rows to GRDB rows, so the ledger's own row decoders read them.
    func fetch(_ query: PostgresQuery) async throws -> [Row] {
        try await run {
            var rows: [Row] = []
            for try await row in try await connection.query(query, logger: logger) {
                var values: [String: (any DatabaseValueConvertible)?] = [:]
                for cell in row {
                    values[cell.columnName] = try FleetStore.value(of: cell)
                }
                rows.append(Row(values))
            }
            return rows
        }
    }

    private static func value(of cell: PostgresCell) throws -> (any DatabaseValueConvertible)? {
        guard cell.bytes != nil else { return nil }
        switch cell.dataType {
        case .int2, .int4, .int8: return try cell.decode(Int64.self)
        case .bool: return try cell.decode(Bool.self) ? Int64(1) : Int64(0)
        case .float4, .float8: return try cell.decode(Double.self)
        case .uuid: return try cell.decode(UUID.self).uuidString.lowercased()
        case .bytea: return Data(buffer: try cell.decode(ByteBuffer.self))
        default: return try cell.decode(String.self)
        }
    }
}
