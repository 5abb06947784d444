public import Foundation
import GRDB

/// What one user has: owned products and content, and what they paid.
public struct UserSummary: Sendable {
    /// The user id asked about (normalized to NFC).
    public var user: String
    /// Products a purchased or restored, not revoked transaction grants (related products count).
    public var ownedProducts: [String]
    /// Owned content versions, with whether a newer version was published.
    public var ownedContent: [(content: OwnedContent, updateAvailable: Bool)]
    /// Paid per currency (purchases at the prices fixed when they were made; restores, sandbox,
    /// Xcode and family-shared purchases excluded), refunds deducted.
    public var netSpent: [String: Decimal]
    /// Refunded per currency: revoked purchases among those ``netSpent`` counts, at the prices paid.
    public var refunded: [String: Decimal]
}

/// Payment failures of one error code.
public struct FailureRate: Sendable, Hashable {
    /// The error's domain (`SKErrorDomain`).
    public var domain: String
    /// The error's code in its domain.
    public var code: Int64
    /// One message recorded with this domain and code (failures of one code may word it differently).
    public var message: String
    /// Transactions that failed with this domain and code in the period asked.
    public var count: Int
    /// Of all transactions that reached a final state (purchased or failed).
    public var share: Double

    /// The failures `rows` count by error (columns `error_domain`, `error_code`, `message`, `n`),
    /// each a share of `total` transactions in a final state: SQLite's rows and the fleet's.
    package static func rates(_ rows: [some ProjectionColumns], total: Int) -> [FailureRate] {
        rows.map { row in
            let count = row.int("n") ?? 0
            return FailureRate(
                domain: row.string("error_domain") ?? "", code: row.int64("error_code") ?? 0, message: row.string("message") ?? "",
                count: count, share: total == 0 ? 0 : Double(count) / Double(total))
        }
    }
}

/// Revenue of one day in one currency.
public struct DailyRevenue: Sendable, Hashable {
    /// The day, at 00:00 UTC.
    public var day: Timestamp
    /// The ISO 4217 code of ``net``.
    public var currency: String
    /// Gross minus refunds that day, in currency units.
    public var net: Decimal

    /// Revenue lines of days (``RevenuePeriod/day``) as one net figure per day and currency,
    /// sorted by day, then currency: a ledger's ``Ledger/dailyRevenue(from:to:)``, or a fleet
    /// store's from its revenue by day.
    public static func perDay(_ lines: [RevenueLine]) -> [DailyRevenue] {
        Dictionary(grouping: lines) { [$0.period ?? "", $0.currency] }
            .compactMap { key, lines in
                // Lines without a day (not grouped by day) have no place here.
                (try? Timestamp.parse(key[0] + "T00:00:00Z")).map { DailyRevenue(day: $0, currency: key[1], net: lines.map(\.net).reduce(0, +)) }
            }
            .sorted { ($0.day, $0.currency) < ($1.day, $1.currency) }
    }
}

extension Ledger {
    /// A user's owned products and content, and totals paid per currency minus refunds.
    public func userSummary(_ user: String) throws -> UserSummary {
        let user = Identifier.normalize(user)
        let history = try purchaseHistory(PurchaseHistoryQuery(user: user, limit: .max))
        var owned = Set<String>()
        var net: [String: Decimal] = [:]
        var refunded: [String: Decimal] = [:]
        let related = try readProjections { db in
            try Row.fetchAll(db, sql: "SELECT product, related_product FROM related_products").map { ($0[0] as String, $0[1] as String) }
        }
        for entry in history {
            let t = entry.transaction
            if t.grantsOwnership {
                owned.insert(t.product)
                for (a, b) in related where a == t.product || b == t.product { owned.insert(a == t.product ? b : a) }
            }
            guard t.state == .purchased, t.paid.countsAsRevenue, let currency = entry.currency,
                let price = Decimal(string: entry.price ?? "", locale: Locale(identifier: "en_US_POSIX"))
            else { continue }
            let amount = price * Decimal(t.quantity)
            net[currency, default: 0] += amount
            if t.revoked {
                net[currency, default: 0] -= amount
                refunded[currency, default: 0] += amount
            }
        }
        let transactions = Set(history.map(\.transaction.transaction))
        let content = try ownedContent().filter { transactions.contains($0.transaction) }
        return UserSummary(
            user: user, ownedProducts: owned.sorted(),
            ownedContent: try content.map { ($0, try updateAvailable(product: $0.product, content: $0.content)) },
            netSpent: net, refunded: refunded)
    }

    /// Paid but never delivered: purchased or restored, not revoked, with hosted content never
    /// copied out (lost to an early finish, discarded, failed, or still pending).
    public func undelivered(limit: Int = 1000) throws -> [PurchaseHistoryEntry] {
        try readProjections { db in
            try Ledger.historyEntries(
                db,
                where: """
                    WHERE t.state IN ('purchased', 'restored') AND t.revoked = 0
                      AND EXISTS (SELECT 1 FROM downloads d WHERE d.transaction_id = t.transaction_id AND d.copied_out = 0)
                    """,
                orderedBy: "t.purchased_at_ms, t.transaction_id", suffix: "LIMIT ?", arguments: [limit])
        }
    }

    /// Started downloads with no progress for `idle` as of `asOf` (by default, the ledger's
    /// latest activity), oldest first.
    public func stuckDownloads(idle: Duration = .seconds(3600), asOf: Timestamp? = nil) throws -> [DownloadRecord] {
        try readProjections { db in
            let now = try asOf.map(Projector.ms) ?? Int64.fetchOne(db, sql: "SELECT max(last_activity_at_ms) FROM downloads") ?? 0
            let cutoff = StuckCutoff.milliseconds(now: now, idle: idle)
            return try StatementColumns.fetchAll(
                db,
                sql: """
                    SELECT * FROM downloads WHERE started = 1 AND state IN ('waiting', 'active') AND last_activity_at_ms <= ?
                    ORDER BY last_activity_at_ms, download_id
                    """, arguments: [cutoff]
            ) { DownloadRecord(columns: $0) }
        }
    }

    /// Transactions that reached a final state but were never finished: the store redelivers them
    /// at every launch. Oldest first.
    public func unfinishedTransactions() throws -> [TransactionRecord] {
        try readProjections { db in
            var records = try StatementColumns.fetchAll(
                db,
                sql: """
                    SELECT * FROM transactions WHERE finished = 0 AND state IN ('purchased', 'restored', 'failed')
                    ORDER BY coalesce(purchased_at_ms, failed_at_ms), transaction_id
                    """
            ) { TransactionRecord(columns: $0) }
            for i in records.indices {
                records[i].downloads = try Ledger.downloadIDs(transaction: records[i].transaction, db)
            }
            return records
        }
    }

    /// Payment failures by error code, most frequent first.
    public func failureRates(from: Timestamp? = nil, to: Timestamp? = nil) throws -> [FailureRate] {
        try readProjections { db in
            let range: StatementArguments = [from.map(Projector.ms) ?? Int64.min, to.map(Projector.ms) ?? Int64.max]
            let total =
                try Int.fetchOne(
                    db,
                    sql: """
                        SELECT count(*) FROM transactions WHERE state IN ('purchased', 'failed')
                        AND coalesce(purchased_at_ms, failed_at_ms) >= ? AND coalesce(purchased_at_ms, failed_at_ms) < ?
                        """, arguments: range) ?? 0
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT error_domain, error_code, min(error_message) AS message, count(*) AS n FROM transactions
                    WHERE state = 'failed' AND failed_at_ms >= ? AND failed_at_ms < ?
                    GROUP BY error_domain, error_code ORDER BY n DESC, error_domain, error_code
                    """, arguments: range)
            return FailureRate.rates(rows.map(RowColumns.init), total: total)
        }
    }

    /// Store product views per item and style (``ProductViewSummary``), of the views presented
    /// in `from..<to` (every one when nil), from the `product_views` projection: presented,
    /// loaded, failed, dismissed without loading, the median and 95th percentile time to load,
    /// and the campaign tokens seen. What `report --view product-views` shows.
    ///
    /// ```swift
    /// for s in try ledger.productViewSummary() {
    ///     print(s.item, s.style, s.presented, s.loaded, s.medianLoadMilliseconds ?? -1)
    /// }
    /// ```
    public func productViewSummary(from: Timestamp? = nil, to: Timestamp? = nil) throws -> [ProductViewSummary] {
        try readProjections { db in
            // A ledger opened read-only before its migration 0009 has no view to count.
            guard try db.tableExists("product_views") else { return [] }
            let rows = try Row.fetchAll(
                db, sql: "SELECT * FROM product_views WHERE presented_at_ms >= ? AND presented_at_ms < ?",
                arguments: [from.map(Projector.ms) ?? Int64.min, to.map(Projector.ms) ?? Int64.max])
            return ProductViewSummary.summaries(rows.map { ProductViewRecord(columns: RowColumns($0)).fields })
        }
    }

    /// Net revenue per day and currency, for charts: production purchases their buyer paid for,
    /// at the prices fixed when they were made.
    public func dailyRevenue(from: Timestamp? = nil, to: Timestamp? = nil) throws -> [DailyRevenue] {
        DailyRevenue.perDay(try revenue(from: from, to: to, groupBy: .day))
    }

    /// One transaction as a history entry.
    public func purchaseHistory(transactionID id: String) throws -> PurchaseHistoryEntry? {
        let id = Identifier.normalize(id)
        return try readProjections { db in
            try Ledger.historyEntries(db, where: "WHERE t.transaction_id = ?", orderedBy: "t.transaction_id", arguments: [id]).first
        }
    }

    /// One step of a store product view's life (``Ledger/productViewTimeline(view:item:)``).
    public struct ProductViewStep: Sendable {
        /// The stored event, with its seq (and its anomaly, if flagged).
        public var event: RecordedEvent
        /// The view right after it; nil when the ledger holds no record of it (an event for a view
        /// never presented).
        public var view: ProductViewRecord?
    }

    /// Every store product view event of view `view`, or of the views of `item` (every view's
    /// when both are nil), each with the view after it, in log order: one pass over the log.
    public func productViewTimeline(view: String? = nil, item: String? = nil) throws -> [ProductViewStep] {
        let view = view.map(Identifier.normalize)
        var steps: [ProductViewStep] = []
        var items: [String: String] = [:]  // view id -> its item, once presented
        try read { db in
            var replay = LogReplay()
            try replay.run(db) { step, _, state in
                guard let id = step.event.event.body.productViewID, view == nil || id == view else { return true }
                let record = state.productViews[id]
                if let record { items[id] = record.item }
                steps.append(ProductViewStep(event: step.event, view: record))
                return true
            }
        }
        // By item: the events of its views, those that came before the view's presentation too
        // (a load reported before it: an anomaly, and part of the story).
        guard let item else { return steps }
        return steps.filter { step in step.event.event.body.productViewID.flatMap { items[$0] } == item }
    }

    /// The timelines of several transactions, in one pass over the log: from the latest snapshot
    /// before any of them has an event, to the end.
    public func timelines(transactions ids: Set<String>) throws -> [String: [TimelineEntry]] {
        let ids = Set(ids.map(Identifier.normalize))
        var result: [String: [TimelineEntry]] = [:]
        try read { db in
            var replay = LogReplay(from: try Ledger.stateBefore(transactions: ids, db, cache: pageCache, chain: chain))
            try replay.run(db) { step, _, state in
                let e = step.event
                if e.event.body.subject == .apple {
                    // Apple's records beside the device's events: those about a transaction asked
                    // for (by its store id), and the complete histories of its user.
                    var about = Set<String>()
                    if case .appleHistoryCompleted(_, let user) = e.event.body {
                        about = ids.filter { id in user != nil && state.transactions[id].map { $0.user == user } ?? false }
                    } else {
                        let apple = Set(AppleRecord.records(in: e).compactMap(\.claims.transactionId))
                        about = ids.filter { id in state.transactions[id]?.storeTransactionId.map(apple.contains) ?? false }
                    }
                    for owner in about {
                        let t = state.transactions[owner]
                        result[owner, default: []].append(TimelineEntry(event: e, transaction: t, downloads: (t?.downloads ?? []).compactMap { state.downloads[$0] }))
                    }
                    return true
                }
                let owner = e.event.body.transactionID ?? e.event.body.downloadID.flatMap { state.downloads[$0]?.transaction }
                if let owner, ids.contains(owner) {
                    let t = state.transactions[owner]
                    result[owner, default: []].append(TimelineEntry(event: e, transaction: t, downloads: (t?.downloads ?? []).compactMap { state.downloads[$0] }))
                }
                return true
            }
        }
        return result
    }
}

/// The last activity time (ms) at or before which a download counts as stuck: `now - idle`,
/// saturating, so an idle time of centuries (or a negative one) gives an answer, never a trap.
package enum StuckCutoff {
    package static func milliseconds(now: Int64, idle: Duration) -> Int64 {
        let (seconds, overflow) = idle.components.seconds.multipliedReportingOverflow(by: 1000)
        if overflow { return idle.components.seconds > 0 ? Int64.min : Int64.max }
        let (idleMs, overflow2) = seconds.addingReportingOverflow(idle.components.attoseconds / 1_000_000_000_000_000)
        if overflow2 { return idle.components.seconds > 0 ? Int64.min : Int64.max }
        let (cutoff, overflow3) = now.subtractingReportingOverflow(idleMs)
        if overflow3 { return idleMs > 0 ? Int64.min : Int64.max }
        return cutoff
    }
}
