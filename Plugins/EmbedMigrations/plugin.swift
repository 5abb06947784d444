import Foundation
import PackagePlugin

/// Compiles every `Migrations/NNNN_name.sql` file (`Migrations/postgres/` for the fleet store) into the target as a Swift constant, so the
/// library never looks a migration up in a bundle at run time.
@main
struct EmbedMigrations: BuildToolPlugin {
    func createBuildCommands(context: PluginContext, target: Target) throws -> [Command] {
        // The SQLite ledger's migrations, or the PostgreSQL fleet store's (Migrations/postgres).
        var directory = context.package.directoryURL.appending(path: "Migrations")
        if target.name == "PurchaseLedgerFleet" { directory = directory.appending(path: "postgres") }
        let files = try FileManager.default
            .contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
            .filter { $0.pathExtension == "sql" }
            .sorted { $0.lastPathComponent < $1.lastPathComponent }
        let output = context.pluginWorkDirectoryURL.appending(path: "EmbeddedMigrations.swift")
        return [
            .buildCommand(
                displayName: "Embedding \(files.count) SQL migrations",
                executable: try context.tool(named: "embed-migrations").url,
                arguments: [output.path] + files.map(\.path),
                inputFiles: files,
                outputFiles: [output]
            )
        ]
    }
}
