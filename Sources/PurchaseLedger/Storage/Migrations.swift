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
}
