import GRDB

/// Which transactions a purchase-history report covers. Every filter reaches SQL as a bound
/// parameter, never as spliced text.
public struct PurchaseHistoryQuery: Sendable, Hashable {
    /// Only this user's transactions (`report --user`); nil: every user's.
    public var user: String?
    /// Only transactions of this product id; nil: every product's.
    public var product: String?
    /// Purchased (or queued, if never purchased) at or after this time.
    public var from: Timestamp?
    /// ... and before this time.
    public var to: Timestamp?
    /// Only products of these kinds; empty: every kind.
    public var kinds: [ProductKind] = []
    /// Page size and offset, for large ledgers.
    public var limit: Int = 1000
    /// Entries to skip before the first returned.
    public var offset: Int = 0

    /// A query with these filters; the defaults select everything, 1,000 entries at a time.
    public init(
        user: String? = nil, product: String? = nil, from: Timestamp? = nil, to: Timestamp? = nil,
        kinds: [ProductKind] = [], limit: Int = 1000, offset: Int = 0
    ) {
        self.user = user
        self.product = product
        self.from = from
        self.to = to
        self.kinds = kinds
        self.limit = limit
        self.offset = offset
    }
}

/// One transaction of a purchase history, with what the user paid and what they received.
public struct PurchaseHistoryEntry: Sendable, Hashable {
    /// The transaction, as it is now.
    public var transaction: TransactionRecord
    /// Its product's kind, from the registration; nil when the ledger holds none.
    public var kind: ProductKind?
    /// The unit price, a decimal string in `currency` units (see `quantity`): as fixed when it was
    /// purchased or restored (`transaction.paid`, contract 5.1); for a transaction never
    /// purchased, the product's registration as it is now.
    public var price: String?
    /// The ISO 4217 code of ``price``; nil with it.
    public var currency: String?
    /// Its downloads, in delivery order.
    public var downloads: [DownloadRecord]

    /// An entry with these values.
    public init(transaction: TransactionRecord, kind: ProductKind?, price: String?, currency: String?, downloads: [DownloadRecord]) {
        self.transaction = transaction
        self.kind = kind
        self.price = price
        self.currency = currency
        self.downloads = downloads
    }

    /// An entry whose price is the transaction's fixed one, else (never purchased) the catalog's.
    package init(transaction: TransactionRecord, kind: ProductKind?, catalogPrice: String?, catalogCurrency: String?, downloads: [DownloadRecord]) {
        let fixed = transaction.paid.price != nil
        self.init(
            transaction: transaction, kind: kind, price: fixed ? transaction.paid.price : catalogPrice,
            currency: fixed ? transaction.paid.currency : catalogCurrency, downloads: downloads)
    }

    /// How it ended: purchased, restored, failed, deferred (still waiting) or purchasing; revoked
    /// transactions say so.
    public var outcome: String {
        transaction.revoked ? "revoked" : transaction.state.rawValue
    }

    /// Whether it is a restore (state `restored`), not a purchase.
    public var isRestore: Bool { transaction.state == .restored }
    /// Some of its hosted content will never arrive: a download was cancelled by an early finish.
    public var contentLost: Bool { downloads.contains { $0.lost } }
}

extension Ledger {
    /// Transactions matching `query`, sorted by purchase date (queue date when never purchased),
    /// with their downloads.
    public func purchaseHistory(_ query: PurchaseHistoryQuery = PurchaseHistoryQuery()) throws -> [PurchaseHistoryEntry] {
        try readProjections { db in
            var conditions: [String] = []
            var arguments = StatementArguments()
            if let user = query.user { conditions.append("t.user_id = ?"); _ = arguments.append(contentsOf: [Identifier.normalize(user)]) }
            if let product = query.product { conditions.append("t.product = ?"); _ = arguments.append(contentsOf: [Identifier.normalize(product)]) }
            if let from = query.from {
                conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) >= ?")
                _ = arguments.append(contentsOf: [Projector.ms(from)])
            }
            if let to = query.to {
                conditions.append("coalesce(t.purchased_at_ms, t.queued_at_ms) < ?")
                _ = arguments.append(contentsOf: [Projector.ms(to)])
            }
            if !query.kinds.isEmpty {
                conditions.append("p.kind IN (\(Array(repeating: "?", count: query.kinds.count).joined(separator: ", ")))")
                _ = arguments.append(contentsOf: StatementArguments(query.kinds.map(\.rawValue)))
            }
            _ = arguments.append(contentsOf: [query.limit, query.offset])
            return try Ledger.historyEntries(
                db,
                where: conditions.isEmpty ? "" : "WHERE " + conditions.joined(separator: " AND "),
                orderedBy: "coalesce(t.purchased_at_ms, t.queued_at_ms), t.transaction_id", suffix: "LIMIT ? OFFSET ?", arguments: arguments)
        }
    }

    /// The purchase-history entries of the transactions `where` selects (`t` the transactions,
    /// `p` their products), in `orderedBy` order, each with its downloads.
    ///
    /// Two statements, whatever the number of entries: the transactions, then the downloads of
    /// the same selection in one pass of the index on their transaction. One downloads query per
    /// entry cost about 10 µs each even prepared once (GRDB's preparation of a `SELECT *` walks
    /// every column through its authorizer: prepared for each of 100,000 entries, it took most
    /// of a 14 s report). Rows are read by column positions found once per statement.
    static func historyEntries(
        _ db: Database, where condition: String, orderedBy order: String, suffix: String = "", arguments: StatementArguments
    ) throws -> [PurchaseHistoryEntry] {
        let selection = """
            FROM transactions t LEFT JOIN products p ON p.product = t.product
            \(condition)
            ORDER BY \(order)
            \(suffix)
            """
        var entries = try StatementColumns.fetchAll(
            db, sql: "SELECT t.*, p.kind AS product_kind, p.price AS product_price, p.currency AS product_currency " + selection,
            arguments: arguments
        ) { c in
            PurchaseHistoryEntry(
                transaction: TransactionRecord(columns: c), kind: c.string("product_kind").flatMap(ProductKind.init(rawValue:)),
                catalogPrice: c.string("product_price"), catalogCurrency: c.string("product_currency"), downloads: [])
        }
        guard !entries.isEmpty else { return [] }
        var downloads: [String: [DownloadRecord]] = [:]
        for record in try StatementColumns.fetchAll(
            db,
            sql: """
                SELECT * FROM downloads
                WHERE transaction_id IN (SELECT t.transaction_id \(selection))
                ORDER BY transaction_id, position
                """, arguments: arguments, { DownloadRecord(columns: $0) })
        {
            downloads[record.transaction ?? "", default: []].append(record)
        }
        for i in entries.indices {
            let own = downloads[entries[i].transaction.transaction] ?? []
            entries[i].transaction.downloads = own.map(\.download)
            entries[i].downloads = own
        }
        return entries
    }
}
