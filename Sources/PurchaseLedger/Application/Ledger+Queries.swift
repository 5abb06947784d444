import GRDB
import GRDBSQLite

/// Reads of the current state, from the projection tables: they never wait for a writer and
/// always see the last commit of any process.
extension Ledger {
    /// Current transactions, sorted by id; only `user`'s when given.
    public func transactions(user: String? = nil) throws -> [TransactionRecord] {
        let user = Identifier.normalize(user)
        return try readProjections { db in
            var records = try StatementColumns.fetchAll(
                db,
                sql: user == nil
                    ? "SELECT * FROM transactions ORDER BY transaction_id"
                    : "SELECT * FROM transactions WHERE user_id = ? ORDER BY transaction_id", arguments: user.map { [$0] } ?? []
            ) { TransactionRecord(columns: $0) }
            for i in records.indices {
                records[i].downloads = try Ledger.downloadIDs(transaction: records[i].transaction, db)
            }
            return records
        }
    }

    /// One transaction, or nil.
    public func transaction(_ id: String) throws -> TransactionRecord? {
        let id = Identifier.normalize(id)
        return try readProjections { db in
            guard let row = try Row.fetchOne(db.cachedStatement(sql: "SELECT * FROM transactions WHERE transaction_id = ?"), arguments: [id]) else { return nil }
            var record = TransactionRecord(row: row)
            record.downloads = try Ledger.downloadIDs(transaction: id, db)
            return record
        }
    }

    /// A transaction's download ids, in delivery order, through a statement prepared once.
    static func downloadIDs(transaction: String, _ db: Database) throws -> [String] {
        try String.fetchAll(
            db.cachedStatement(sql: "SELECT download_id FROM downloads WHERE transaction_id = ? ORDER BY position"), arguments: [transaction])
    }

    /// Current downloads, sorted by id; only `transaction`'s (in delivery order) when given.
    public func downloads(transaction: String? = nil) throws -> [DownloadRecord] {
        let transaction = Identifier.normalize(transaction)
        return try readProjections { db in
            return try StatementColumns.fetchAll(
                db,
                sql: transaction == nil
                    ? "SELECT * FROM downloads ORDER BY download_id"
                    : "SELECT * FROM downloads WHERE transaction_id = ? ORDER BY position", arguments: transaction.map { [$0] } ?? []
            ) { DownloadRecord(columns: $0) }
        }
    }

    /// Whether a purchased or restored, not revoked transaction grants `product`, itself or
    /// through a related product (declared on either side).
    public func owns(product: String) throws -> Bool {
        try readProjections { db in try Ledger.owns(Identifier.normalize(product), db) }
    }

    static func owns(_ product: String, _ db: Database) throws -> Bool {
        // Prepared once per connection: a report asks this for every owned content (117 times for
        // one user of the 1,000,000-event workload), and preparing it each time (a view of a
        // join, since migration 0012) cost about 0.3 ms.
        try Bool.fetchOne(
            db.cachedStatement(
                sql: """
                    SELECT EXISTS (SELECT 1 FROM transactions
                        WHERE state IN ('purchased', 'restored') AND revoked = 0
                          AND (product = :p
                               OR product IN (SELECT related_product FROM related_products WHERE product = :p)
                               OR product IN (SELECT product FROM related_products WHERE related_product = :p)))
                    """), arguments: ["p": product]) ?? false
    }

    /// The owned content versions: the latest copy-out of each product the user owns, sorted by
    /// product and content.
    public func ownedContent() throws -> [OwnedContent] {
        try readProjections { db in
            let rows = try StatementColumns.fetchAll(db, sql: "SELECT * FROM owned_content ORDER BY product, content") { c in
                var o = OwnedContent.blank
                OwnedContent.schema.read(&o, from: c)
                return o
            }
            var owned: [OwnedContent] = []
            var owns: [String: Bool] = [:]
            for o in rows {
                if owns[o.product] == nil { owns[o.product] = try Ledger.owns(o.product, db) }
                if owns[o.product] == true { owned.append(o) }
            }
            return owned
        }
    }

    /// The content URL of a finished download whose transaction is not finished; nil otherwise,
    /// and always nil after the finish.
    public func contentURL(for download: String) throws -> String? {
        let download = Identifier.normalize(download)
        return try readProjections { db in
            try String.fetchOne(db.cachedStatement(sql: "SELECT content_url FROM downloads WHERE download_id = ? AND state = 'finished'"), arguments: [download])
        }
    }

    /// Whether a version newer than the owned one was published for that product and content.
    public func updateAvailable(product: String, content: String) throws -> Bool {
        let (product, content) = (Identifier.normalize(product), Identifier.normalize(content))
        return try readProjections { db in
            guard
                let row = try Row.fetchOne(
                    db,
                    sql: """
                        SELECT o.content_version, c.latest_version FROM owned_content o
                        JOIN product_contents c ON c.product = o.product AND c.content = o.content
                        WHERE o.product = ? AND o.content = ?
                        """, arguments: [product, content]),
                let owned = ContentVersion(row[0]), let latest = ContentVersion(row[1])
            else { return false }
            return latest.isNewer(than: owned)
        }
    }

    /// The download registered for a content URL (`contentRegistered`); throws
    /// ``LedgerError/Code/unregisteredURL`` when there is none.
    public func download(forURL url: String) throws -> String {
        let url = Identifier.normalize(url)
        guard let id = try read({ db in try String.fetchOne(db.cachedStatement(sql: "SELECT download_id FROM downloads WHERE url = ?"), arguments: [url]) }) else {
            throw LedgerError(.unregisteredURL, "no download is registered for this URL")
        }
        return id
    }

    /// One step of a transaction's life: the event and the state right after it.
    public struct TimelineEntry: Sendable {
        /// The stored event, with its seq.
        public var event: RecordedEvent
        /// The transaction right after the event; nil while the ledger holds no record of it (an event
        /// stored as an anomaly, such as an unverified purchase, creates none).
        public var transaction: TransactionRecord?
        /// The transaction's downloads after the event, in delivery order.
        public var downloads: [DownloadRecord]
    }

    /// Every event of a transaction and its downloads, each with the state after it.
    public func timeline(transaction id: String) throws -> [TimelineEntry] {
        let id = Identifier.normalize(id)
        guard let entries = try timelines(transactions: [id])[id], !entries.isEmpty else {
            throw LedgerError.malformed("transaction \(id) is not in this ledger")
        }
        return entries
    }
}
