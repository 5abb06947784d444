import GRDB

/// Reads of the current state, from the projection tables: they never wait for a writer and
/// always see the last commit of any process.
extension Ledger {
    /// Current transactions, sorted by id; only `user`'s when given.
    public func transactions(user: String? = nil) throws -> [TransactionRecord] {
        let user = Identifier.normalize(user)
        return try read { db in
            let rows = try Row.fetchAll(
                db,
                sql: user == nil
                    ? "SELECT * FROM transactions ORDER BY transaction_id"
                    : "SELECT * FROM transactions WHERE user_id = ? ORDER BY transaction_id", arguments: user.map { [$0] } ?? [])
            var records = ColumnPositions.decode(rows, TransactionRecord.init(row:columns:))
            for i in records.indices {
                records[i].downloads = try Ledger.downloadIDs(transaction: records[i].transaction, db)
            }
            return records
        }
    }

    /// One transaction, or nil.
    public func transaction(_ id: String) throws -> TransactionRecord? {
        let id = Identifier.normalize(id)
        return try read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT * FROM transactions WHERE transaction_id = ?", arguments: [id]) else { return nil }
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
        return try read { db in
            let rows = try Row.fetchAll(
                db,
                sql: transaction == nil
                    ? "SELECT * FROM downloads ORDER BY download_id"
                    : "SELECT * FROM downloads WHERE transaction_id = ? ORDER BY position", arguments: transaction.map { [$0] } ?? [])
            return ColumnPositions.decode(rows, DownloadRecord.init(row:columns:))
        }
    }

    /// Whether a purchased or restored, not revoked transaction grants `product`, itself or
    /// through a related product (declared on either side).
    public func owns(product: String) throws -> Bool {
        try read { db in try Ledger.owns(Identifier.normalize(product), db) }
    }

    static func owns(_ product: String, _ db: Database) throws -> Bool {
        try Bool.fetchOne(
            db,
            sql: """
                SELECT EXISTS (SELECT 1 FROM transactions
                    WHERE state IN ('purchased', 'restored') AND revoked = 0
                      AND (product = :p
                           OR product IN (SELECT related_product FROM related_products WHERE product = :p)
                           OR product IN (SELECT product FROM related_products WHERE related_product = :p)))
                """, arguments: ["p": product]) ?? false
    }

    /// The owned content versions: the latest copy-out of each product the user owns, sorted by
    /// product and content.
    public func ownedContent() throws -> [OwnedContent] {
        try read { db in
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM owned_content ORDER BY product, content")
            var owned: [OwnedContent] = []
            var owns: [String: Bool] = [:]
            for row in rows {
                let product: String = row["product"]
                if owns[product] == nil { owns[product] = try Ledger.owns(product, db) }
                guard owns[product] == true, let version = ContentVersion(row["content_version"]) else { continue }
                owned.append(
                    OwnedContent(
                        product: product, content: row["content"], contentVersion: version,
                        destination: row["destination"], transaction: row["transaction_id"],
                        download: row["download_id"], copiedAt: Timestamp(millisecondsSinceEpoch: row["copied_at_ms"])))
            }
            return owned
        }
    }

    /// The content URL of a finished download whose transaction is not finished; nil otherwise,
    /// and always nil after the finish.
    public func contentURL(for download: String) throws -> String? {
        let download = Identifier.normalize(download)
        return try read { db in
            try String.fetchOne(db, sql: "SELECT content_url FROM downloads WHERE download_id = ? AND state = 'finished'", arguments: [download])
        }
    }

    /// Whether a version newer than the owned one was published for that product and content.
    public func updateAvailable(product: String, content: String) throws -> Bool {
        let (product, content) = (Identifier.normalize(product), Identifier.normalize(content))
        return try read { db in
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
        guard let id = try read({ db in try String.fetchOne(db, sql: "SELECT download_id FROM downloads WHERE url = ?", arguments: [url]) }) else {
            throw LedgerError(.unregisteredURL, "no download is registered for this URL")
        }
        return id
    }

    /// One step of a transaction's life: the event and the state right after it.
    public struct TimelineEntry: Sendable {
        public var event: RecordedEvent
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

/// Where the columns of one query's rows are, found by name once.
///
/// GRDB finds a column by name again at every read, lowercasing the name and every column's
/// name to compare them: decoding the transactions and downloads of a 100,000-row history report
/// by name spent about 1 s there. The row decoders below read through this instead: a query
/// resolves the positions from its first row and reads every row by position.
package struct ColumnPositions: Sendable {
    private let positions: [String: Int]

    /// The positions of `row`'s columns (by lowercase name; the first of a repeated name, as GRDB
    /// reads it).
    package init(_ row: Row) {
        var positions: [String: Int] = [:]
        for (i, name) in row.columnNames.enumerated() {
            let name = name.lowercased()
            if positions[name] == nil { positions[name] = i }
        }
        self.positions = positions
    }

    /// `rows`, all from one query, each decoded by `decode` with the positions resolved once,
    /// from the first row.
    static func decode<T>(_ rows: [Row], _ decode: (Row, ColumnPositions) throws -> T) rethrows -> [T] {
        guard let first = rows.first else { return [] }
        let positions = ColumnPositions(first)
        return try rows.map { try decode($0, positions) }
    }

    /// A column's value in `row` (`columnName` in lowercase), decoded as GRDB decodes it by name.
    func value<Value: DatabaseValueConvertible>(_ row: Row, _ columnName: String) -> Value {
        guard let i = positions[columnName] else { return row[columnName] }
        return row[i]
    }
}

extension TransactionRecord {
    /// A `transactions` projection row (SQLite's, or the fleet store's as a GRDB row).
    package init(row: Row) {
        self.init(row: row, columns: ColumnPositions(row))
    }

    /// A `transactions` projection row whose columns are at `columns`.
    package init(row: Row, columns c: ColumnPositions) {
        self.init(
            transaction: c.value(row, "transaction_id"), product: c.value(row, "product"), user: c.value(row, "user_id"),
            quantity: c.value(row, "quantity"), state: TransactionStatus(rawValue: c.value(row, "state")) ?? .purchasing)
        self.finished = c.value(row, "finished")
        self.revoked = c.value(row, "revoked")
        self.revocationReason = c.value(row, "revocation_reason")
        self.originalTransaction = c.value(row, "original_transaction")
        self.storeTransactionId = c.value(row, "store_transaction_id")
        self.error = StoreError(row: row, columns: c)
        self.wasDeferred = c.value(row, "was_deferred")
        self.discardedContent = c.value(row, "discarded_content")
        self.queuedAt = Timestamp(ms: c.value(row, "queued_at_ms"))
        self.purchasedAt = Timestamp(ms: c.value(row, "purchased_at_ms"))
        self.failedAt = Timestamp(ms: c.value(row, "failed_at_ms"))
        self.finishedAt = Timestamp(ms: c.value(row, "finished_at_ms"))
        self.revokedAt = Timestamp(ms: c.value(row, "revoked_at_ms"))
        self.events = c.value(row, "events")
    }
}

extension DownloadRecord {
    /// A `downloads` projection row (SQLite's, or the fleet store's as a GRDB row).
    package init(row: Row) {
        self.init(row: row, columns: ColumnPositions(row))
    }

    /// A `downloads` projection row whose columns are at `columns`.
    package init(row: Row, columns c: ColumnPositions) {
        self.init(
            download: c.value(row, "download_id"), transaction: c.value(row, "transaction_id"), url: c.value(row, "url"),
            content: c.value(row, "content"))
        self.contentVersion = (c.value(row, "content_version") as String?).flatMap(ContentVersion.init)
        self.contentLength = c.value(row, "content_length")
        self.state = DownloadStatus(rawValue: c.value(row, "state")) ?? .waiting
        self.started = c.value(row, "started")
        self.progress = c.value(row, "progress")
        self.bytesWritten = c.value(row, "bytes_written")
        self.contentURL = c.value(row, "content_url")
        self.copiedOut = c.value(row, "copied_out")
        self.destination = c.value(row, "destination")
        self.discarded = c.value(row, "discarded")
        self.cancelReason = (c.value(row, "cancel_reason") as String?).flatMap(CancelReason.init(rawValue:))
        self.error = StoreError(row: row, columns: c)
        self.attempts = c.value(row, "attempts")
        self.startedAt = Timestamp(ms: c.value(row, "started_at_ms"))
        self.lastActivityAt = Timestamp(ms: c.value(row, "last_activity_at_ms"))
        self.finishedAt = Timestamp(ms: c.value(row, "finished_at_ms"))
        self.copiedOutAt = Timestamp(ms: c.value(row, "copied_out_at_ms"))
        self.events = c.value(row, "events")
    }
}

extension StoreError {
    /// The `error_domain`, `error_code`, `error_message` columns of a projection row.
    init?(row: Row, columns c: ColumnPositions) {
        guard let domain: String = c.value(row, "error_domain") else { return nil }
        self.init(domain: domain, code: c.value(row, "error_code") ?? 0, message: c.value(row, "error_message") ?? "")
    }
}

extension Timestamp {
    init?(ms: Int64?) {
        guard let ms else { return nil }
        self.init(millisecondsSinceEpoch: ms)
    }
}
