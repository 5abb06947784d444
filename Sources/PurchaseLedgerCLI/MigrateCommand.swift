import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct MigrateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "migrate",
        abstract: "Create or upgrade a PostgreSQL fleet store's schema (run it as the schema's owner).",
        discussion: """
            Makes an empty database a fleet store, or applies the migrations (Migrations/postgres) an \
            older one lacks, each once, in one transaction. It is the only command that changes the \
            schema: `ship` and `report` run no DDL, so they can run as roles without CREATE \
            (docs/fleet.md gives the GRANTs). A database holding other tables is refused.

            Exit status: 0 migrated or already up to date; 3 the server is unreachable, refuses the \
            credentials, or holds something else.

            Examples:
              purchase-ledger migrate \\
                  'postgres://fleet_owner@db.internal:5432/fleet?sslmode=verify-full'
            """)

    @Argument(help: "The fleet store: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...].")
    var url: String

    func validate() throws {
        guard FleetAddress.isURL(url) else { throw ValidationError(notAURL("migrate", url)) }
    }

    func run() async throws {
        let address = try FleetAddress(url)
        let applied = try await FleetStore.migrate(url)
        Console.current.print(
            applied.isEmpty
                ? "\(address) is up to date (\(FleetStore.migrationNames.last ?? "no migrations"))"
                : "\(address): applied \(applied.joined(separator: ", "))")
    }
}
