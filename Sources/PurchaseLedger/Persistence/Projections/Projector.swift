import Foundation
import GRDB

/// One row of `owned_content_history`: a version copied out, and what became of it.
public struct OwnedContentHistoryEntry: Sendable, Hashable {
    /// The seq of the `contentCopiedOut` event.
    public var seq: Int64
    public var owned: OwnedContent
    public var supersededAt: Timestamp?
    public var deletedAt: Timestamp?
}

/// Keeps the projection tables equal to the reducer's state.
///
/// Live appends mark what each event touched and write those rows once per append; `rebuild`
/// writes every row from a state replayed in memory. Both use the same row writers, so the two
/// can never disagree.
package enum Projector {
    /// Bumped when the projection tables' meaning changes; with ``Reducer/version`` it forms the
    /// stamp a ledger's projections carry. A mismatch rebuilds them on open.
    static let version = 2
    static var stamp: String { "reducer \(Reducer.version), projections \(version)" }

    static var tables: [String] { Table.all.map(\.name) }

    /// What an append touched.
    struct Dirty {
        /// Products whose rows may have changed: their `products` row and `product_contents`
        /// rows are written when they differ from what is stored.
        var products: Set<String> = []
        /// Products registered (again): their `related_products` rows are replaced too.
        var registered: Set<String> = []
        var transactions: Set<String> = []
        var downloads: Set<String> = []

        mutating func touch(_ event: Event, state: LedgerState) {
            switch event.body {
            case .productRegistered(let p):
                products.insert(p.product)
                registered.insert(p.product)
            case .contentVersionPublished(let product, _, _), .contentDeleted(let product):
                products.insert(product)
            case .transactionPurchased(let t, _, _, _, _, _), .transactionRestored(let t, _, _, _, _, _, _), .transactionFinished(let t, _):
                transactions.insert(t)
                if let record = state.transactions[t] {
                    downloads.formUnion(record.downloads)
                    products.insert(record.product)
                }
            case .paymentQueued, .transactionDeferred, .transactionFailed, .transactionRevoked, .downloadStarted, .downloadProgressed,
                .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished, .downloadFailed, .contentCopiedOut,
                .restoreStarted, .restoreCompleted, .restoreFailed, .contentRegistered, .assetPackBegan, .assetPackProgressed,
                .assetPackPaused, .assetPackFailed, .assetPackOpened, .storePaymentPromoted, .personalDataErased:
                if let t = event.body.transactionID { transactions.insert(t) }
                if let d = event.body.downloadID { downloads.insert(d) }
            case .assetPackPublished(let pack, _, let unlockedBy):
                products.formUnion(unlockedBy)
                products.formUnion(state.unlockingProducts(ofPack: pack))
            case .assetPackFinished(let pack, _), .assetPackRemoved(let pack):
                // The version finished or removed, and the one it replaced: every download of
                // the pack (a rare event; a scan).
                let content = AssetPacks.contentID(pack: pack)
                state.downloads.forEachUnordered { id, record in
                    if record.content == content && record.transaction == nil { downloads.insert(id) }
                }
            }
        }
    }

    /// The change an accepted event makes to owned content and its history.
    enum OwnedChange {
        case copied(OwnedContentHistoryEntry)
        case deleted(product: String, at: Timestamp)
        /// One content gone (an asset pack removed from the device).
        case removed(ContentKey, at: Timestamp)
    }

    static func ownedChange(_ e: RecordedEvent, outcome: Outcome, state: LedgerState) -> OwnedChange? {
        guard outcome == .applied else { return nil }
        switch e.event.body {
        case .contentCopiedOut(let d, _, _, _):
            guard let download = state.downloads[d], let t = download.transaction, let content = download.content,
                let product = state.transactions[t]?.product,
                let owned = state.copiedContent[ContentKey(product: product, content: content)]
            else { return nil }
            return .copied(OwnedContentHistoryEntry(seq: e.seq, owned: owned))
        case .contentDeleted(let product):
            return .deleted(product: product, at: e.event.at)
        case .assetPackFinished(let pack, _):
            guard let owned = state.copiedContent[AssetPacks.key(pack: pack)] else { return nil }
            return .copied(OwnedContentHistoryEntry(seq: e.seq, owned: owned))
        case .assetPackRemoved(let pack):
            return .removed(AssetPacks.key(pack: pack), at: e.event.at)
        case .productRegistered, .contentVersionPublished, .paymentQueued, .transactionDeferred, .transactionPurchased,
            .transactionFailed, .transactionRestored, .transactionRevoked, .transactionFinished, .downloadStarted,
            .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished, .downloadFailed,
            .restoreStarted, .restoreCompleted, .restoreFailed, .contentRegistered, .assetPackPublished, .assetPackBegan,
            .assetPackProgressed, .assetPackPaused, .assetPackFailed, .assetPackOpened, .storePaymentPromoted, .personalDataErased:
            return nil
        }
    }

    // MARK: - Live

    private static let supersede = PreparedSQL(
        """
        UPDATE owned_content_history SET superseded_at_ms = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
        """)
    private static let markDeleted = PreparedSQL(
        """
        UPDATE owned_content_history SET deleted_at_ms = ?
        WHERE seq IN (SELECT history_seq FROM owned_content WHERE product = ?)
        """)
    private static let deleteOwned = PreparedSQL("DELETE FROM owned_content WHERE product = ?")
    private static let markRemoved = PreparedSQL(
        """
        UPDATE owned_content_history SET deleted_at_ms = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
        """)
    private static let deleteOneOwned = PreparedSQL("DELETE FROM owned_content WHERE product = ? AND content = ?")
    private static let deleteRelated = PreparedSQL("DELETE FROM related_products WHERE product = ?")

    private static let storedDestination = PreparedSQL("SELECT destination FROM downloads WHERE download_id = ?")
    /// The download's previous latest copy-out gets its destination back. Usually it is still the
    /// copy its content's owner row points to, found by key; otherwise (another download of the
    /// same content copied since) by a scan, as the history has no index on `download_id`.
    private static let keepOwnerDestination = PreparedSQL(
        """
        UPDATE owned_content_history SET destination = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
          AND download_id = ? AND destination IS NULL
        """)
    private static let keepDestination = PreparedSQL(
        "UPDATE owned_content_history SET destination = ? WHERE download_id = ? AND destination IS NULL")

    /// Applies an owned-content change directly to the tables. `copied` holds, for each download
    /// copied out earlier in the same append, the destination of its latest copy-out (the
    /// `downloads` rows are written after the changes, so they still hold what the append found).
    static func apply(_ change: OwnedChange, copied: inout [String: String], _ db: Database, _ statements: PreparedStatements) throws {
        switch change {
        case .copied(let entry):
            let o = entry.owned
            let before: String?
            if let earlier = copied[o.download] {
                before = earlier
            } else {
                before = try String.fetchOne(statements(storedDestination, db), arguments: [o.download])
            }
            if let before {
                // Before `supersede`, while the owner row still points to the copy it replaces.
                let values = [before.columnValue, o.product.columnValue, o.content.columnValue, o.download.columnValue]
                try statements(keepOwnerDestination, db).execute(values: values, db)
                if db.changesCount == 0 {
                    try statements(keepDestination, db).execute(values: [before.columnValue, o.download.columnValue], db)
                }
            }
            copied[o.download] = o.destination
            try statements(supersede, db).execute(values: [ms(o.copiedAt).columnValue, o.product.columnValue, o.content.columnValue], db)
            try insert(into: Table.ownedContentHistory, historyRow(entry, latest: true), db, statements, upsert: false)
            try insert(into: Table.ownedContent, ownedRow(o, historySeq: entry.seq), db, statements)
        case .deleted(let product, let at):
            try statements(markDeleted, db).execute(values: [ms(at).columnValue, product.columnValue], db)
            try statements(deleteOwned, db).execute(values: [product.columnValue], db)
        case .removed(let key, let at):
            try statements(markRemoved, db).execute(values: [ms(at).columnValue, key.product.columnValue, key.content.columnValue], db)
            try statements(deleteOneOwned, db).execute(values: [key.product.columnValue, key.content.columnValue], db)
        }
    }

    /// Writes the rows an append touched, from the state after it.
    static func flush(_ dirty: Dirty, state: LedgerState, _ db: Database, _ statements: PreparedStatements) throws {
        for product in dirty.products {
            try writeProduct(product, state: state, related: dirty.registered.contains(product), db, statements)
        }
        // In key order: each insert lands next to the previous one in the table's B-tree.
        if !dirty.transactions.isEmpty {
            let transactions = try statements(Table.transactions.preparedUpsert, db)
            for t in dirty.transactions.sorted(by: Projector.keyOrder) {
                if let record = state.transactions[t] { try transactions.execute(values: transactionRow(record), db) }
            }
        }
        if !dirty.downloads.isEmpty {
            let downloads = try statements(Table.downloads.preparedUpsert, db)
            for d in dirty.downloads.sorted(by: Projector.keyOrder) {
                if let record = state.downloads[d] { try downloads.execute(values: downloadRow(record, state: state), db) }
            }
        }
    }

    /// What `projection_seq` holds while the projections are written in the same transaction as
    /// every event, so they reflect the whole log whatever its last seq.
    static let inStepWithTheLog = "log"

    /// Records that the projections reflect the whole log, as written by this version. Writes
    /// nothing when that is already recorded: an append then leaves `ledger_info` alone, one page
    /// fewer to write and fsync per commit. (Builds before this one stored the seq itself, and
    /// treat the marker as projections to rebuild, which they then do.)
    static func markInStep(_ db: Database) throws {
        try db.cachedStatement(
            sql: """
                INSERT INTO ledger_info (key, value) VALUES ('projection_seq', ?), ('projection_stamp', ?)
                ON CONFLICT(key) DO UPDATE SET value = excluded.value WHERE value IS NOT excluded.value
                """
        ).execute(arguments: [inStepWithTheLog, stamp])
    }

    /// The seq the projections reflect, and whether they were written by this version.
    static func status(_ db: Database) throws -> (seq: Int64, current: Bool) {
        let stored = try DatabaseValue.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'projection_seq'") ?? .null
        let seq: Int64
        switch stored.storage {
        case .string(inStepWithTheLog): seq = try EventStore.lastSeq(db)
        case .int64(let n): seq = n  // what builds before the marker stored
        case .string, .null, .double, .blob: seq = 0
        }
        let stamp = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'projection_stamp'")
        return (seq, stamp == Projector.stamp)
    }

    // MARK: - Rebuild

    /// Collects owned-content history in memory during a replay, as the live path writes it.
    package struct HistoryCollector {
        package var entries: [OwnedContentHistoryEntry] = []
        private var current: [ContentKey: Int] = [:]
        package private(set) var currentSeq: [ContentKey: Int64] = [:]
        /// The seq of each download's latest copy-out: its row's destination is the download's.
        package private(set) var latestCopy: [String: Int64] = [:]

        mutating func apply(_ change: OwnedChange) {
            switch change {
            case .copied(let entry):
                let key = ContentKey(product: entry.owned.product, content: entry.owned.content)
                if let index = current[key] { entries[index].supersededAt = entry.owned.copiedAt }
                current[key] = entries.count
                currentSeq[key] = entry.seq
                latestCopy[entry.owned.download] = entry.seq
                entries.append(entry)
            case .deleted(let product, let at):
                for (key, index) in current where key.product == product {
                    entries[index].deletedAt = at
                    current[key] = nil
                    currentSeq[key] = nil
                }
            case .removed(let key, let at):
                guard let index = current[key] else { return }
                entries[index].deletedAt = at
                current[key] = nil
                currentSeq[key] = nil
            }
        }
    }

    /// Makes the projection tables equal to rows written from `state` and `history`, writing only
    /// what differs from `stored` (each table's ``storedRowHashes(_:_:)``, in ``Table/all``
    /// order, read before anything was written): missing, different or extra rows. A table
    /// mostly wrong (or empty) is replaced in bulk instead, and so is every table when `stored`
    /// is nil: secondary indexes dropped, rows inserted in the order of the primary key, indexes
    /// built again after them (all in the caller's transaction). Fills in the summary's row counts.
    static func reconcile(state: LedgerState, history: HistoryCollector, stored: [RowsByKey<Int>]?, _ db: Database) throws -> RebuildSummary {
        var result = RebuildSummary()
        // Each table's rows are built and hashed on other threads while this one writes the
        // tables before.
        let builders = rowBuilders(state: state, history: history, ordered: false)
        let pipeline = Pipeline(
            builders.map { builder in
                { () -> (rows: [[ColumnValue]], hashes: [Int]) in
                    let rows = builder.build()
                    return (rows, rows.map { RowHash($0, from: builder.table.keyColumns).finalize() })
                }
            }, width: 2)
        for (index, table) in builders.map(\.table).enumerated() {
            let expected = pipeline.take(index)
            defer { releaseInBackground(expected) }
            guard var rows = stored?[index] else {
                try replaceAll(table, with: table.inKeyOrder(expected.rows), db)
                result.rowsWritten += expected.rows.count
                continue
            }
            let storedCount = rows.count
            var write: [Int] = []
            for (i, row) in expected.rows.enumerated() where rows.take(row[..<table.keyColumns]) != expected.hashes[i] {
                write.append(i)
            }
            let delete = rows.keys
            if write.count + delete.count > storedCount / 2 {
                // Rewriting row by row with the indexes in place costs more than starting afresh.
                try replaceAll(table, with: table.inKeyOrder(expected.rows), db)
                result.rowsWritten += expected.rows.count
                result.rowsDeleted += delete.count
                continue
            }
            let deleteRow = try db.makeStatement(
                sql: "DELETE FROM \(table.name) WHERE " + table.columns.prefix(table.keyColumns).map { "\($0) = ?" }.joined(separator: " AND "))
            for key in delete { try deleteRow.execute(values: key, db) }
            let replace = try db.makeStatement(sql: table.replace)
            for i in write.sorted(by: { table.keyLess(expected.rows[$0], expected.rows[$1]) }) {
                try replace.execute(values: expected.rows[i], db)
            }
            result.rowsWritten += write.count
            result.rowsDeleted += delete.count
            result.rowsUnchanged += expected.rows.count - write.count
        }
        try markInStep(db)
        return result
    }

    /// Deletes every row of `table`, then inserts `rows` (in key order) with the table's
    /// secondary indexes dropped, and builds them again.
    private static func replaceAll(_ table: Table, with rows: [[ColumnValue]], _ db: Database) throws {
        try replaceAll(table, db) { insert in
            for row in rows { try insert(row) }
        }
    }

    /// Deletes every row of `table` and drops its secondary indexes, lets `body` insert rows (in
    /// key order) through the function it is given, then builds the indexes again: one sort per
    /// index instead of an index update per row.
    ///
    /// A `WITHOUT ROWID` table is a B-tree keyed by its primary key, which SQLite does not pack
    /// as it packs a rowid table filled in order: filled in key order, its pages end about 11%
    /// empty (1.8 MB of the transactions of a 1,000,000-event ledger). So its rows go to a
    /// temporary table first, and are copied over with `INSERT INTO ... SELECT *`, which SQLite
    /// carries out as a transfer of whole records into full pages, as VACUUM does.
    private static func replaceAll(_ table: Table, _ db: Database, _ body: (_ insert: ([ColumnValue]) throws -> Void) throws -> Void) throws {
        let indexes = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name = ?", arguments: [table.name]
        ).map { (name: $0[0] as String, sql: $0[1] as String) }
        for index in indexes { try db.execute(sql: "DROP INDEX \(index.name)") }
        try db.execute(sql: "DELETE FROM \(table.name)")
        let create = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table.name]) ?? ""
        if create.hasSuffix("WITHOUT ROWID"), let columns = create.firstIndex(of: "(") {
            let staging = "projection_staging"
            try db.execute(sql: "DROP TABLE IF EXISTS temp.\(staging)")
            try db.execute(sql: "CREATE TEMP TABLE \(staging) " + create[columns...])
            let statement = try db.makeStatement(sql: table.upsertSQL(into: "temp.\(staging)"))
            try body { row in try statement.execute(values: row, db) }
            try db.execute(sql: "INSERT INTO main.\(table.name) SELECT * FROM temp.\(staging)")
            try db.execute(sql: "DROP TABLE temp.\(staging)")
        } else {
            let statement = try db.cachedStatement(sql: table.upsert)
            try body { row in try statement.execute(values: row, db) }
        }
        for index in indexes { try db.execute(sql: index.sql) }
    }

    /// Writes every projection table from the state an import reached and the owned-content
    /// history it collected, replacing whatever the tables hold. For an import into an empty
    /// ledger, where every row is new: each table is filled in key order with its secondary
    /// indexes dropped and built again after, as `rebuild --full` does, instead of one upsert
    /// per row with every index updated (1.7 s of a 1,000,000-event import's 8). Transaction,
    /// download and history rows are built on two other threads a chunk at a time while this one
    /// inserts them; at most a few chunks wait, so memory stays flat whatever the import's size.
    static func writeAll(state: LedgerState, history: HistoryCollector, _ db: Database) throws {
        let chunked = [Table.transactions.name, Table.downloads.name, Table.ownedContentHistory.name]
        for (table, build) in rowBuilders(state: state, history: history, ordered: false) where !chunked.contains(table.name) {
            try replaceAll(table, with: table.inKeyOrder(build()), db)
        }
        try replaceAll(Table.transactions, inChunks: state.transactions.values, db) { transactionRow($0) }
        try replaceAll(Table.downloads, inChunks: state.downloads.values, db) { downloadRow($0, state: state) }
        // The history's entries are in seq order, its key.
        let latest = history.latestCopy
        try replaceAll(Table.ownedContentHistory, inChunks: history.entries, db) { historyRow($0, latest: latest[$0.owned.download] == $0.seq) }
        try markInStep(db)
    }

    private static func replaceAll<Record: Sendable>(
        _ table: Table, inChunks records: [Record], _ db: Database, row: @escaping @Sendable (Record) -> [ColumnValue]
    ) throws {
        let chunk = 1024
        let jobs = stride(from: 0, to: records.count, by: chunk).map { start in
            { @Sendable () -> [[ColumnValue]] in records[start..<min(start + chunk, records.count)].map(row) }
        }
        let pipeline = Pipeline(jobs, width: 2, ahead: 2)
        try replaceAll(table, db) { insert in
            for i in jobs.indices {
                let rows = pipeline.take(i)
                for r in rows { try insert(r) }
                releaseInBackground(rows)
            }
        }
    }

    /// Text keys in SQLite's BINARY order (their UTF-8 bytes).
    static func keyOrder(_ a: String, _ b: String) -> Bool {
        // memcmp over the UTF-8 bytes: the generic `utf8.lexicographicallyPrecedes` walks them
        // one at a time, and sorting a large import's keys spent most of its time there.
        var a = a, b = b
        return a.withUTF8 { x in
            b.withUTF8 { y in
                let common = min(x.count, y.count)
                let order = common == 0 ? 0 : memcmp(x.baseAddress!, y.baseAddress!, common)
                return order != 0 ? order < 0 : x.count < y.count
            }
        }
    }

    // MARK: - Rows

    package static func ms(_ t: Timestamp) -> Int64 {
        // Floor division, so times before 1970 round down like those after.
        let ns = t.nanosecondsSinceEpoch
        return ns >= 0 ? ns / 1_000_000 : -((-ns + 999_999) / 1_000_000)
    }

    private static func ms(_ t: Timestamp?) -> Int64? { t.map(ms) }

    /// Writes a product's rows where they differ from those stored: a purchase, a restore or a
    /// finish touches its product (a delivery may publish a newer content version), and most leave
    /// its rows as they were, so the upserts leave identical rows alone instead of rewriting them
    /// (three WAL pages fewer on such a commit). The related products come from the registration
    /// only, and are replaced only when the product is registered (`related`).
    private static func writeProduct(
        _ product: String, state: LedgerState, related: Bool, _ db: Database, _ statements: PreparedStatements
    ) throws {
        guard let rows = productRows(product, state: state) else { return }
        try statements(Table.products.preparedUpsertIfChanged, db).execute(values: rows.product, db)
        if related {
            try statements(deleteRelated, db).execute(values: [product.columnValue], db)
            for row in rows.related { try insert(into: Table.relatedProducts, row, db, statements) }
        }
        let contents = try statements(Table.productContents.preparedUpsertIfChanged, db)
        for row in rows.contents { try contents.execute(values: row, db) }
    }

    private static func insert(
        into table: Table, _ row: [ColumnValue], _ db: Database, _ statements: PreparedStatements, upsert: Bool = true
    ) throws {
        try statements(upsert ? table.preparedUpsert : table.preparedInsert, db).execute(values: row, db)
    }

    // MARK: - The row layout, shared with the fleet store

    /// A projection table and its columns, in the order the row functions give values.
    package struct Table: Sendable {
        package let name: String
        /// Its columns, with their types: what its migrations must make.
        package let declared: [ProjectionColumn]
        package let columns: [String]
        let insert: String
        /// Inserts a row, replacing any with the same key or the same unique values (a rebuild's
        /// repair of a row that differs).
        let replace: String
        /// Inserts a row, or updates the one with its key in place. Unlike `INSERT OR REPLACE`
        /// (a delete and an insert, under a new rowid), this leaves the row where it is and touches
        /// only the indexes whose columns changed: an append that changes one record writes about
        /// two fewer WAL pages, which counts when every commit waits for an fsync.
        let upsert: String
        /// `upsert`'s conflict clause.
        private let conflict: String
        /// How many leading columns make the primary key.
        let keyColumns: Int
        /// `insert` and `upsert`, for the append path's ``PreparedStatements``.
        let preparedInsert: PreparedSQL
        let preparedUpsert: PreparedSQL
        /// `upsert`, but an existing row with the same values is left alone (not rewritten).
        let preparedUpsertIfChanged: PreparedSQL

        /// `fixed` columns never change once a row is written (a download's transaction and its
        /// position there are set when the transaction is delivered): the upsert leaves them, and
        /// the index on them, alone.
        init(_ name: String, _ declared: [ProjectionColumn], key: Int = 1, fixed: Set<String> = []) {
            self.name = name
            self.declared = declared
            let columns = declared.map(\.name)
            self.columns = columns
            keyColumns = key
            let values = "(" + columns.joined(separator: ", ") + ") VALUES (" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
            insert = "INSERT INTO \(name) " + values
            replace = "INSERT OR REPLACE INTO \(name) " + values
            let rest = columns.dropFirst(key).filter { !fixed.contains($0) }
            conflict =
                " ON CONFLICT (" + columns.prefix(key).joined(separator: ", ") + ") DO "
                + (rest.isEmpty ? "NOTHING" : "UPDATE SET " + rest.map { "\($0) = excluded.\($0)" }.joined(separator: ", "))
            upsert = insert + conflict
            preparedInsert = PreparedSQL(insert)
            preparedUpsert = PreparedSQL(upsert)
            let changed =
                rest.isEmpty
                ? "" : " WHERE (" + rest.joined(separator: ", ") + ") IS NOT (" + rest.map { "excluded.\($0)" }.joined(separator: ", ") + ")"
            preparedUpsertIfChanged = PreparedSQL(upsert + changed)
        }

        /// `upsert`, into another table with the same columns.
        func upsertSQL(into target: String) -> String {
            "INSERT INTO \(target) (" + columns.joined(separator: ", ") + ") VALUES ("
                + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")" + conflict
        }

        package static let products = Table(
            "products",
            [
                ProjectionColumn("product", .text), ProjectionColumn("kind", .text), ProjectionColumn("price", .text), ProjectionColumn("currency", .text),
                ProjectionColumn("downloadable", .boolean), ProjectionColumn("title", .text, nullable: true), ProjectionColumn("registered_at_ms", .integer),
            ])
        package static let productContents = Table(
            "product_contents", [ProjectionColumn("product", .text), ProjectionColumn("content", .text), ProjectionColumn("latest_version", .text)], key: 2)
        package static let relatedProducts = Table("related_products", [ProjectionColumn("product", .text), ProjectionColumn("related_product", .text)], key: 2)
        package static let transactions = Table("transactions", TransactionRecord.schema.columns)
        package static let downloads = Table("downloads", DownloadRecord.schema.columns, fixed: ["transaction_id", "position"])
        package static let ownedContent = Table("owned_content", OwnedContent.schema.columns, key: 2)
        package static let ownedContentHistory = Table(
            "owned_content_history",
            [
                ProjectionColumn("seq", .integer), ProjectionColumn("download_id", .text), ProjectionColumn("destination", .text, nullable: true),
                ProjectionColumn("copied_at_ms", .integer), ProjectionColumn("superseded_at_ms", .integer, nullable: true),
                ProjectionColumn("deleted_at_ms", .integer, nullable: true),
            ])
        package static let all = [products, productContents, relatedProducts, transactions, downloads, ownedContent, ownedContentHistory]

        /// `rows` sorted as SQLite orders this table's primary key (integers, then text by bytes).
        func inKeyOrder(_ rows: [[ColumnValue]]) -> [[ColumnValue]] {
            // Rows built from a record map or the history usually come in this order already.
            if zip(rows, rows.dropFirst()).allSatisfy({ !keyLess($1, $0) }) { return rows }
            return rows.sorted(by: keyLess)
        }

        func keyLess(_ a: [ColumnValue], _ b: [ColumnValue]) -> Bool {
            for i in 0..<keyColumns {
                switch (a[i], b[i]) {
                case (.int64(let x), .int64(let y)) where x != y: return x < y
                case (.string(let x), .string(let y)) where x != y: return Projector.keyOrder(x, y)
                case (.int64, .string): return true
                case (.string, .int64): return false
                default: continue
                }
            }
            return false
        }
    }

    /// A product's row, its related products' rows and its contents' rows.
    /// `published`: the product's published versions, when the caller has grouped them already.
    package static func productRows(_ product: String, state: LedgerState, published: [(key: ContentKey, value: ContentVersion)]? = nil)
        -> (product: [ColumnValue], related: [[ColumnValue]], contents: [[ColumnValue]])?
    {
        guard let record = state.products[product] else { return nil }
        let r = record.registration
        let row: [ColumnValue] = [
            r.product.columnValue, r.kind.rawValue.columnValue, r.price.columnValue, r.currency.columnValue,
            r.downloadable.columnValue, r.title.columnValue, ms(record.registeredAt).columnValue,
        ]
        let related = Set(r.relatedProducts).sorted().map { [product.columnValue, $0.columnValue] }
        let contents = (published ?? state.publishedVersions.filter { $0.key.product == product }.map { ($0.key, $0.value) })
            .sorted { $0.key.content < $1.key.content }
            .map { [$0.key.product.columnValue, $0.key.content.columnValue, $0.value.text.columnValue] }
        return (row, related, contents)
    }

    // The row functions below convert each value by its own type, with no array of existential
    // boxes: they run for every row of a rebuild and of a ship.

    /// A transaction's row, as its declaration (``TransactionRecord/schema``) gives it.
    package static func transactionRow(_ t: TransactionRecord) -> [ColumnValue] {
        TransactionRecord.schema.row(TransactionRow(record: t))
    }

    /// A download's row, as its declaration (``DownloadRecord/schema``) gives it.
    package static func downloadRow(_ d: DownloadRecord, state: LedgerState) -> [ColumnValue] {
        DownloadRecord.schema.row(DownloadRow(d, state: state))
    }

    /// A history row. The download's `latest` copy-out holds no destination: it is the
    /// download's own (`downloads.destination`; `owned_content_history_view` puts it back).
    package static func historyRow(_ entry: OwnedContentHistoryEntry, latest: Bool) -> [ColumnValue] {
        let o = entry.owned
        return [
            entry.seq.columnValue,
            o.download.columnValue,
            latest ? .null : o.destination.columnValue,
            ms(o.copiedAt).columnValue,
            ms(entry.supersededAt).columnValue,
            ms(entry.deletedAt).columnValue,
        ]
    }

    package static func ownedRow(_ o: OwnedContent, historySeq: Int64) -> [ColumnValue] {
        OwnedContent.schema.row(OwnedRow(fields: o, historySeq: historySeq))
    }

    /// Every projection row of `state` (with the owned-content `history` its replay collected),
    /// table by table, for a store elsewhere.
    package static func rows(state: LedgerState, history: HistoryCollector) -> [(table: Table, rows: [[ColumnValue]])] {
        rowBuilders(state: state, history: history, ordered: true).map { ($0.table, $0.build()) }
    }

    /// The rows of each table, built when asked: a rebuild builds one table's rows on another
    /// thread while it compares the table before. Transactions and downloads come in id order
    /// only when `ordered`.
    /// `latestDestinationOmitted`: history rows as migration 0004 stores them (false: as a ledger
    /// still waiting for it, opened read-only, does, every row with its destination).
    static func rowBuilders(state: LedgerState, history: HistoryCollector, ordered: Bool, latestDestinationOmitted: Bool = true) -> [(
        table: Table, build: @Sendable () -> [[ColumnValue]]
    )] {
        var products: [[ColumnValue]] = [], related: [[ColumnValue]] = [], contents: [[ColumnValue]] = []
        let published = Dictionary(grouping: state.publishedVersions.map { (key: $0.key, value: $0.value) }) { $0.key.product }
        for product in state.products.keys.sorted() {
            guard let r = productRows(product, state: state, published: published[product] ?? []) else { continue }
            products.append(r.product)
            related += r.related
            contents += r.contents
        }
        return [
            (Table.products, { [products] in products }), (Table.productContents, { [contents] in contents }),
            (Table.relatedProducts, { [related] in related }),
            (
                Table.transactions,
                {
                    guard !ordered else { return state.transactions.values.map(transactionRow) }
                    var rows: [[ColumnValue]] = []
                    rows.reserveCapacity(state.transactions.count)
                    state.transactions.forEachUnordered { rows.append(transactionRow($1)) }
                    return rows
                }
            ),
            (
                Table.downloads,
                {
                    guard !ordered else { return state.downloads.values.map { downloadRow($0, state: state) } }
                    var rows: [[ColumnValue]] = []
                    rows.reserveCapacity(state.downloads.count)
                    state.downloads.forEachUnordered { rows.append(downloadRow($1, state: state)) }
                    return rows
                }
            ),
            (
                Table.ownedContent,
                {
                    history.currentSeq.sorted { ($0.key.product, $0.key.content) < ($1.key.product, $1.key.content) }
                        .compactMap { key, seq in state.copiedContent[key].map { ownedRow($0, historySeq: seq) } }
                }
            ),
            (
                Table.ownedContentHistory,
                {
                    history.entries.map {
                        historyRow($0, latest: latestDestinationOmitted && history.latestCopy[$0.owned.download] == $0.seq)
                    }
                }
            ),
        ]
    }
}
