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

    /// Migrations that change only how tables are stored, not their columns nor what they mean:
    /// a ledger still waiting for them reads the same, so a read-only open (which cannot migrate)
    /// accepts it, and the next writable open runs them.
    static let layoutOnly: Set<String> = ["0002_snapshot_pages_rowid", "0003_projections_without_rowid"]

    /// Whether this version can read `db` as it is: every migration it knows has run, except
    /// perhaps some of the layout-only ones.
    static func readableWithoutMigrating(_ db: Database) throws -> Bool {
        let applied = try migrator.appliedIdentifiers(db)
        return Set(names).subtracting(layoutOnly).isSubset(of: applied)
    }
}
