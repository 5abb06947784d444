import Foundation
import GRDB

/// One row of `owned_content_history`: a version copied out, and what became of it.
public struct OwnedContentHistoryEntry: Sendable, Hashable {
    /// The seq of the `contentCopiedOut` event.
    public var seq: Int64
    /// The version copied out (for an asset pack, the version that finished).
    public var owned: OwnedContent
    /// When a later copy-out of the same product and content replaced it; nil while none has.
    public var supersededAt: Timestamp?
    /// When `contentDeleted` (for an asset pack, `assetPackRemoved`) took it away; nil while neither has.
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
        var productViews: Set<String> = []

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
                .assetPackPaused, .assetPackFailed, .assetPackOpened, .storePaymentPromoted, .personalDataErased, .appleTransactionReceived, .appleNotificationReceived,
                .appleHistoryCompleted:
                if let t = event.body.transactionID { transactions.insert(t) }
                if let d = event.body.downloadID { downloads.insert(d) }
            case .storeProductViewPresented(let v, _, _, _, _, _):
                productViews.insert(v)
                // The view it replaced on screen, whose row says so now.
                if let replaced = state.productViews[v]?.replaces { productViews.insert(replaced) }
            case .storeProductViewLoaded(let v), .storeProductViewFailed(let v, _), .storeProductViewDismissed(let v):
                productViews.insert(v)
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

    @inline(__always)
    static func ownedChange(_ e: RecordedEvent, outcome: Outcome, state: LedgerState) -> OwnedChange? {
        guard outcome.changedState else { return nil }
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
            .assetPackProgressed, .assetPackPaused, .assetPackFailed, .assetPackOpened, .storePaymentPromoted, .personalDataErased,
            .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted, .storeProductViewPresented, .storeProductViewLoaded,
            .storeProductViewFailed, .storeProductViewDismissed:
            return nil
        }
    }

    // MARK: - Live

    static let supersede = PreparedSQL(
        """
        UPDATE owned_content_history SET superseded_at_ms = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
        """)
    static let markDeleted = PreparedSQL(
        """
        UPDATE owned_content_history SET deleted_at_ms = ?
        WHERE seq IN (SELECT history_seq FROM owned_content WHERE product = ?)
        """)
    static let deleteOwned = PreparedSQL("DELETE FROM owned_content WHERE product = ?")
    static let markRemoved = PreparedSQL(
        """
        UPDATE owned_content_history SET deleted_at_ms = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
        """)
    static let deleteOneOwned = PreparedSQL("DELETE FROM owned_content WHERE product = ? AND content = ?")
    static let deleteRelated = PreparedSQL("DELETE FROM related_products WHERE product = ?")

    static let storedDestination = PreparedSQL("SELECT destination FROM downloads WHERE download_id = ?")
    /// The download's previous latest copy-out gets its destination back. Usually it is still the
    /// copy its content's owner row points to, found by key; otherwise (another download of the
    /// same content copied since) by a scan, as the history has no index on `download_id`.
    static let keepOwnerDestination = PreparedSQL(
        """
        UPDATE owned_content_history SET destination = ?
        WHERE seq = (SELECT history_seq FROM owned_content WHERE product = ? AND content = ?)
          AND download_id = ? AND destination IS NULL
        """)
    static let keepDestination = PreparedSQL(
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
                guard let record = state.transactions[t] else { continue }
                try transactions.execute(values: Table.transactions.storedRow(transactionRow(record), statements.texts, db), db)
            }
        }
        if !dirty.downloads.isEmpty {
            let downloads = try statements(Table.downloads.preparedUpsert, db)
            for d in dirty.downloads.sorted(by: Projector.keyOrder) {
                guard let record = state.downloads[d] else { continue }
                try downloads.execute(values: Table.downloads.storedRow(downloadRow(record, state: state), statements.texts, db), db)
            }
        }
        if !dirty.productViews.isEmpty {
            let views = try statements(Table.productViews.preparedUpsert, db)
            for v in dirty.productViews.sorted(by: Projector.keyOrder) {
                if let record = state.productViews[v] { try views.execute(values: productViewRow(record), db) }
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

    // MARK: - Rows

    package static func ms(_ t: Timestamp) -> Int64 {
        // Floor division, so times before 1970 round down like those after.
        let ns = t.nanosecondsSinceEpoch
        return ns >= 0 ? ns / 1_000_000 : -((-ns + 999_999) / 1_000_000)
    }

    static func ms(_ t: Timestamp?) -> Int64? { t.map(ms) }

    /// Writes a product's rows where they differ from those stored: a purchase, a restore or a
    /// finish touches its product (a delivery may publish a newer content version), and most leave
    /// its rows as they were, so the upserts leave identical rows alone instead of rewriting them
    /// (three WAL pages fewer on such a commit). The related products come from the registration
    /// only, and are replaced only when the product is registered (`related`).
    static func writeProduct(
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

    static func insert(
        into table: Table, _ row: [ColumnValue], _ db: Database, _ statements: PreparedStatements, upsert: Bool = true
    ) throws {
        try statements(upsert ? table.preparedUpsert : table.preparedInsert, db).execute(values: table.storedRow(row, statements.texts, db), db)
    }

    // MARK: - The row layout, shared with the fleet store

    /// A projection table and its columns, in the order the row functions give values.
    package struct Table: Sendable {
        /// The name queries read it by: the table itself, or (``compact``) a view of the table
        /// ``stored``.
        package let name: String
        /// The SQLite table that holds the rows, which writers write: `name`, or for a table
        /// stored compactly (migration 0012) the table behind the view `name`.
        let stored: String
        /// How the SQLite table stores a row's values, when not as they are.
        let compact: CompactRow?
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
        let conflict: String
        /// How many leading columns make the primary key.
        package let keyColumns: Int
        /// `insert` and `upsert`, for the append path's ``PreparedStatements``.
        let preparedInsert: PreparedSQL
        let preparedUpsert: PreparedSQL
        /// `upsert`, but an existing row with the same values is left alone (not rewritten).
        let preparedUpsertIfChanged: PreparedSQL

        /// `fixed` columns never change once a row is written (a download's transaction and its
        /// position there are set when the transaction is delivered): the upsert leaves them, and
        /// the index on them, alone.
        /// `stored`: the table behind the view `name` that a compact layout needs (`coded` and
        /// `relative` say what it stores differently; see ``CompactRow``).
        init(
            _ name: String, _ declared: [ProjectionColumn], key: Int = 1, fixed: Set<String> = [], stored: String? = nil,
            coded: [String] = [], relative: [(time: String, to: String)] = []
        ) {
            self.name = name
            self.stored = stored ?? name
            self.declared = declared
            let columns = declared.map(\.name)
            self.columns = columns
            compact = stored == nil ? nil : CompactRow(declared, coded: coded, relative: relative)
            keyColumns = key
            let values = "(" + columns.joined(separator: ", ") + ") VALUES (" + Array(repeating: "?", count: columns.count).joined(separator: ", ") + ")"
            insert = "INSERT INTO \(self.stored) " + values
            replace = "INSERT OR REPLACE INTO \(self.stored) " + values
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

        /// `row` as ``stored`` holds it: itself, or for a compact table its ``CompactRow`` form.
        func storedRow(_ row: [ColumnValue], _ texts: ProjectionTexts, _ db: Database) throws -> [ColumnValue] {
            guard let compact else { return row }
            var row = row
            try compact.store(&row, texts, db)
            return row
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
        package static let transactions = Table(
            "transactions", TransactionRecord.schema.columns, stored: "transaction_rows",
            coded: ["product", "state", "error_domain", "price", "currency", "price_source", "storefront", "environment", "ownership", "offer_type"],
            relative: ["purchased_at_ms", "failed_at_ms", "finished_at_ms", "revoked_at_ms"].map { ($0, "queued_at_ms") })
        package static let downloads = Table(
            "downloads", DownloadRecord.schema.columns, fixed: ["transaction_id", "position"], stored: "download_rows",
            coded: ["content", "content_version", "state", "cancel_reason", "error_domain"],
            relative: ["last_activity_at_ms", "finished_at_ms", "copied_out_at_ms"].map { ($0, "started_at_ms") })
        package static let ownedContent = Table("owned_content", OwnedContent.schema.columns, key: 2)
        package static let ownedContentHistory = Table(
            "owned_content_history",
            [
                ProjectionColumn("seq", .integer), ProjectionColumn("download_id", .text), ProjectionColumn("destination", .text, nullable: true),
                ProjectionColumn("copied_at_ms", .integer), ProjectionColumn("superseded_at_ms", .integer, nullable: true),
                ProjectionColumn("deleted_at_ms", .integer, nullable: true),
            ])
        package static let productViews = Table("product_views", ProductViewRecord.schema.columns)
        package static let all = [products, productContents, relatedProducts, transactions, downloads, ownedContent, ownedContentHistory, productViews]

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

    /// A store product view's row, as its declaration (``ProductViewRecord/schema``) gives it.
    package static func productViewRow(_ v: ProductViewRecord) -> [ColumnValue] {
        ProductViewRecord.schema.row(ProductViewRow(record: v))
    }

    package static func ownedRow(_ o: OwnedContent, historySeq: Int64) -> [ColumnValue] {
        OwnedContent.schema.row(OwnedRow(fields: o, historySeq: historySeq))
    }

    /// Every projection row of `state` (with the owned-content `history` its replay collected),
    /// table by table, for a store elsewhere.
    package static func rows(state: LedgerState, history: HistoryCollector) -> [(table: Table, rows: [[ColumnValue]])] {
        rowBuilders(state: state, history: history, ordered: true).map { ($0.table, $0.build()) }
    }

    /// The rows of one table, made when asked, one at a time (``each``) or all together (``build()``).
    struct RowBuilder: Sendable {
        let table: Table
        /// How many rows ``each`` gives, when known beforehand.
        var count = 0
        /// Hands every row to `row`, one after another, holding none of them.
        let each: @Sendable (_ row: ([ColumnValue]) -> Void) -> Void

        /// Every row.
        func build() -> [[ColumnValue]] {
            var rows: [[ColumnValue]] = []
            rows.reserveCapacity(count)
            each { rows.append($0) }
            return rows
        }
    }

    /// The rows of each table, made when asked: a rebuild makes one table's rows on another
    /// thread while it writes the table before. Transactions and downloads come in id order
    /// only when `ordered`.
    /// `latestDestinationOmitted`: history rows as migration 0004 stores them (false: as a ledger
    /// still waiting for it, opened read-only, does, every row with its destination).
    static func rowBuilders(state: LedgerState, history: HistoryCollector, ordered: Bool, latestDestinationOmitted: Bool = true) -> [RowBuilder] {
        var products: [[ColumnValue]] = [], related: [[ColumnValue]] = [], contents: [[ColumnValue]] = []
        let published = Dictionary(grouping: state.publishedVersions.map { (key: $0.key, value: $0.value) }) { $0.key.product }
        for product in state.products.keys.sorted() {
            guard let r = productRows(product, state: state, published: published[product] ?? []) else { continue }
            products.append(r.product)
            related += r.related
            contents += r.contents
        }
        func made(_ table: Table, _ rows: @escaping @Sendable () -> [[ColumnValue]]) -> RowBuilder {
            RowBuilder(table: table) { row in rows().forEach(row) }
        }
        return [
            made(Table.products) { [products] in products }, made(Table.productContents) { [contents] in contents },
            made(Table.relatedProducts) { [related] in related },
            RowBuilder(table: Table.transactions, count: state.transactions.count) { row in
                guard !ordered else { return state.transactions.values.forEach { row(transactionRow($0)) } }
                state.transactions.forEachUnordered { row(transactionRow($1)) }
            },
            RowBuilder(table: Table.downloads, count: state.downloads.count) { row in
                guard !ordered else { return state.downloads.values.forEach { row(downloadRow($0, state: state)) } }
                state.downloads.forEachUnordered { row(downloadRow($1, state: state)) }
            },
            made(Table.ownedContent) {
                history.currentSeq.sorted { ($0.key.product, $0.key.content) < ($1.key.product, $1.key.content) }
                    .compactMap { key, seq in state.copiedContent[key].map { ownedRow($0, historySeq: seq) } }
            },
            RowBuilder(table: Table.ownedContentHistory, count: history.entries.count) { row in
                let latest = history.latestCopy
                for entry in history.entries { row(historyRow(entry, latest: latestDestinationOmitted && latest[entry.owned.download] == entry.seq)) }
            },
            made(Table.productViews) { state.productViews.keys.sorted(by: keyOrder).map { productViewRow(state.productViews[$0]!) } },
        ]
    }
}
