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
