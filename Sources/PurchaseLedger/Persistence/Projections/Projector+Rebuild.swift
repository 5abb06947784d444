import Foundation
import GRDB

extension Projector {
    // MARK: - Rebuild

    /// Collects owned-content history in memory during a replay, as the live path writes it.
    package struct HistoryCollector {
        package var entries: [OwnedContentHistoryEntry] = []
        var current: [ContentKey: Int] = [:]
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
        // Each table's rows are made, hashed and compared with the stored ones on other threads,
        // one row at a time (a row equal to its stored one is dropped at once: a rebuild of the
        // 1,000,000-event workload held all 309,000 rows before), while this thread writes the
        // tables before.
        let builders = rowBuilders(state: state, history: history, ordered: false)
        let tables = builders.map(\.table)
        let pipeline = Pipeline(
            builders.enumerated().map { index, builder in
                let stored = stored?[index]
                return { @Sendable () -> Reconciled in Reconciled(builder, stored: stored) }
            }, width: 2)
        // The builders hold the state: whatever this leaves of it is freed elsewhere.
        defer { releaseInBackground(consume pipeline) }
        let texts = ProjectionTexts()
        for (index, table) in tables.enumerated() {
            let reconciled = pipeline.take(index)
            defer { releaseInBackground(reconciled) }
            if let all = reconciled.all {
                // Rewriting row by row with the indexes in place costs more than starting afresh.
                try replaceAll(table, with: table.inKeyOrder(all), db)
                result.rowsWritten += all.count
                result.rowsDeleted += reconciled.deleted
                continue
            }
            let deleteRow = try db.makeStatement(
                sql: "DELETE FROM \(table.stored) WHERE " + table.columns.prefix(table.keyColumns).map { "\($0) = ?" }.joined(separator: " AND "))
            for key in reconciled.delete { try deleteRow.execute(values: key, db) }
            let replace = try db.makeStatement(sql: table.replace)
            for row in reconciled.write.sorted(by: table.keyLess) { try replace.execute(values: table.storedRow(row, texts, db), db) }
            result.rowsWritten += reconciled.write.count
            result.rowsDeleted += reconciled.delete.count
            result.rowsUnchanged += reconciled.unchanged
        }
        try markInStep(db)
        return result
    }

    /// What one table needs to equal the rows made from the state: the rows to write and the
    /// keys to delete, or (``all``) every row, for a table with nothing stored or mostly wrong.
    struct Reconciled: Sendable {
        var all: [[ColumnValue]]? = nil
        var write: [[ColumnValue]] = []
        var delete: [[ColumnValue]] = []
        /// Rows deleted when ``all`` replaces the table: stored keys the state has no row for.
        var deleted = 0
        var unchanged = 0

        /// Compares `builder`'s rows, as they are made, with the `stored` rows' hashes.
        init(_ builder: RowBuilder, stored: RowsByKey<Int>?) {
            guard let stored else {
                all = builder.build()
                return
            }
            let table = builder.table, keyColumns = table.keyColumns
            var found = 0, total = 0
            var write: [[ColumnValue]] = []
            builder.each { row in
                total += 1
                let hash = stored[row[..<keyColumns]]
                if hash != nil { found += 1 }
                if hash != RowHash(row, from: keyColumns).finalize() { write.append(row) }
            }
            // Stored rows the state has no row for: only when some stored key was never found.
            var delete: [[ColumnValue]] = []
            if found < stored.count {
                var made = Set<ExactKey>()
                builder.each { made.insert(ExactKey($0[..<keyColumns])) }
                delete = stored.keys.filter { !made.contains(ExactKey($0)) }
            }
            if write.count + delete.count > stored.count / 2 {
                all = builder.build()
                deleted = delete.count
                return
            }
            self.write = write
            self.delete = delete
            unchanged = total - write.count
        }
    }

    /// Deletes every row of `table`, then inserts `rows` (in key order) with the table's
    /// secondary indexes dropped, and builds them again.
    static func replaceAll(_ table: Table, with rows: [[ColumnValue]], _ db: Database) throws {
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
    static func replaceAll(_ table: Table, _ db: Database, _ body: (_ insert: ([ColumnValue]) throws -> Void) throws -> Void) throws {
        let indexes = try Row.fetchAll(
            db, sql: "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name = ?", arguments: [table.stored]
        ).map { (name: $0[0] as String, sql: $0[1] as String) }
        for index in indexes { try db.execute(sql: "DROP INDEX \(index.name)") }
        try db.execute(sql: "DELETE FROM \(table.stored)")
        let create = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", arguments: [table.stored]) ?? ""
        let texts = ProjectionTexts()
        if create.hasSuffix("WITHOUT ROWID"), let columns = create.firstIndex(of: "(") {
            let staging = "projection_staging"
            try db.execute(sql: "DROP TABLE IF EXISTS temp.\(staging)")
            try db.execute(sql: "CREATE TEMP TABLE \(staging) " + create[columns...])
            let statement = try db.makeStatement(sql: table.upsertSQL(into: "temp.\(staging)"))
            try body { row in try statement.execute(values: table.storedRow(row, texts, db), db) }
            try db.execute(sql: "INSERT INTO main.\(table.stored) SELECT * FROM temp.\(staging)")
            try db.execute(sql: "DROP TABLE temp.\(staging)")
        } else {
            let statement = try db.cachedStatement(sql: table.upsert)
            try body { row in try statement.execute(values: table.storedRow(row, texts, db), db) }
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
        for builder in rowBuilders(state: state, history: history, ordered: false) where !chunked.contains(builder.table.name) {
            try replaceAll(builder.table, with: builder.table.inKeyOrder(builder.build()), db)
        }
        try replaceAll(Table.transactions, inChunks: state.transactions.values, db) { transactionRow($0) }
        try replaceAll(Table.downloads, inChunks: state.downloads.values, db) { downloadRow($0, state: state) }
        // The history's entries are in seq order, its key.
        let latest = history.latestCopy
        try replaceAll(Table.ownedContentHistory, inChunks: history.entries, db) { historyRow($0, latest: latest[$0.owned.download] == $0.seq) }
        try markInStep(db)
    }

    static func replaceAll<Record: Sendable>(
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
}
