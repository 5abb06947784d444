import Foundation
import GRDB

/// The schema migrations, from `Migrations/NNNN_name.sql`, compiled in by the EmbedMigrations
/// build plugin. GRDB's migrator runs each pending one in its own transaction and records it, so
/// a ledger carries the list of migrations that shaped it.
enum Migrations {
    static var migrator: DatabaseMigrator {
        migrator(upTo: embeddedMigrations.count)
    }

    /// A migrator that knows only the first `count` migrations (tests build old ledgers with it).
    static func migrator(upTo count: Int) -> DatabaseMigrator {
        var migrator = DatabaseMigrator()
        for migration in embeddedMigrations.prefix(count) {
            let sql = migration.sql
            migrator.registerMigration(migration.name) { db in
                try db.execute(sql: sql)
            }
        }
        return migrator
    }

    /// The names of the migrations this version knows, oldest first.
    static var names: [String] { embeddedMigrations.map(\.name) }

    /// Migrations a ledger still waiting for reads the same without: they change how tables are
    /// stored (0002, 0003), or drop a value readers find elsewhere (0004: a history row's
    /// destination, which a ledger before it still holds, and which `verify` then expects), or
    /// add projection columns (0005: a transaction's paid terms; until a writable open rebuilds
    /// the projections, queries of them throw `staleProjections`, and the log reads as ever), or
    /// add a table only later events use (0007: personal values, which older events hold inline;
    /// 0008: signing headers, which no older event refers to; 0009: store product views, which no
    /// older event fills, and which read as empty until it runs; 0010: personal values' blocks,
    /// which a ledger before it does not have, its values all rows; 0011: erased values'
    /// commitments, which only blocks sealed since need; 0012: `transactions` and `downloads`
    /// stored compactly behind views of the same names and columns, which readers query as they
    /// queried the tables). A
    /// read-only open (which cannot migrate) accepts such a ledger; the next writable open runs them.
    static let optionalForReading: Set<String> = [
        "0002_snapshot_pages_rowid", "0003_projections_without_rowid", "0004_history_destination", "0005_transaction_terms",
        "0006_snapshot_binding", "0007_personal_values", "0008_signing_headers", "0009_product_views", "0010_personal_value_blocks",
        "0011_erased_commitments", "0012_compact_projections",
    ]

    /// Whether this version can read `db` as it is: every migration it knows has run, except
    /// perhaps some of those optional for reading.
    static func readableWithoutMigrating(_ db: Database) throws -> Bool {
        let applied = try migrator.appliedIdentifiers(db)
        return Set(names).subtracting(optionalForReading).isSubset(of: applied)
    }

    /// The statement of migration `name` that starts with `start`, without its semicolon (what
    /// SQLite keeps of it in `sqlite_master`).
    static func statement(of name: String, startingWith start: String) -> String? {
        guard let sql = embeddedMigrations.first(where: { $0.name == name })?.sql, let from = sql.range(of: start)?.lowerBound,
            let end = sql[from...].firstIndex(of: ";")
        else { return nil }
        return String(sql[from..<end])
    }

    /// Whether the migration `name` has run on `db`.
    static func applied(_ name: String, _ db: Database) throws -> Bool {
        try Bool.fetchOne(db, sql: "SELECT EXISTS (SELECT 1 FROM grdb_migrations WHERE identifier = ?)", arguments: [name]) ?? false
    }
}
