import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct ShipCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "ship",
        abstract: "Send ledgers' new events into a PostgreSQL fleet store, with their projections.",
        discussion: """
            Each ledger goes in one PostgreSQL transaction: the events the server does not hold yet, and \
            the ledger's projections after them, computed by the same reducer. Shipping again sends only \
            what is new; a ship killed at any moment leaves the server as it was. Ship runs no DDL: make \
            the database a fleet store first with `purchase-ledger migrate URL` (as its owner).

            A ledger whose file was tampered with (its hash chain breaks), or whose history differs from \
            what was shipped before, is refused with the seq, and nothing of it is written; the other \
            ledgers still go. The password may come from PGPASSWORD instead of the URL.

            Exit status: 0 every ledger shipped; 1 a ledger was refused (the others shipped); 3 the \
            server is unreachable, refuses the credentials or is not a fleet store.

            Examples:
              purchase-ledger ship device-a.ledger device-b.ledger \\
                  --to postgres://ledger@db.internal:5432/fleet
              purchase-ledger ship exports/*.ledger \\
                  --to postgres://ledger@localhost/fleet --json
            """)

    @Argument(help: "The ledger files.", completion: .file(extensions: ["ledger"]))
    var ledgers: [String]

    @Option(help: "The fleet store: postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?sslmode=...].")
    var to: String

    @Flag(help: "Print a JSON summary instead of text.")
    var json = false

    @Option(help: "Connections shipping batches of ledgers at once (one reads files while PostgreSQL stores another's).")
    var connections = 2

    @Option(name: .customLong("key-file"), help: "A file holding the secret key of keyed (HMAC) hash chains.", completion: .file())
    var keyFile: String?

    /// Given, the shipped ledgers' signed transactions are counted at each evidence level.
    @OptionGroup var appleRoots: AppleRootOptions

    func validate() throws {
        guard !ledgers.isEmpty else { throw ValidationError("give at least one ledger file") }
        try NumberOption.check("--connections", connections, 1...64)
        guard FleetAddress.isURL(to) else { throw ValidationError(notAURL("--to", to)) }
    }

    struct Outcome: Sendable {
        var path: String
        var result: ShipResult?
        var error: String?
    }

    func run() async throws {
        let console = Console.current
        var configuration = LedgerConfiguration()
        configuration.chainKey = try keyFile.map(LedgerOptions.chainKey(fromFile:))
        let (ledgers, url, showProgress, connections) = (self.ledgers, to, console.stderrIsTerminal && !json, max(1, self.connections))
        let started = ContinuousClock.now
        let fleet = try await FleetStore.connect(url)
        let outcomes: [Outcome]
        do {
            let shipped = try await fleet.ship(paths: ledgers, configuration: configuration, connections: connections) { done, total in
                if showProgress { console.error("shipped \(done) of \(total) ledgers") }
            }
            await fleet.close()
            outcomes = shipped.map { outcome in
                switch outcome.result {
                case .success(let result): Outcome(path: outcome.path, result: result)
                case .failure(let error): Outcome(path: outcome.path, error: error.description)
                }
            }
        } catch {
            await fleet.close()
            throw error
        }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        let shipped = outcomes.compactMap(\.result)
        let events = shipped.reduce(0) { $0 + $1.shippedEvents }
        let failed = outcomes.filter { $0.error != nil }
        // With --apple-root: what the shipped ledgers' signatures say under those roots (the
        // fleet computed its evidence rows from the same signed data, never from the device's).
        var evidence: [String: Int]?
        if !appleRoots.files.isEmpty {
            var reading = configuration
            reading.readOnly = true
            for o in outcomes where o.result != nil {
                let ledger = try Ledger(path: o.path, configuration: reading)
                for (level, n) in try await appleRoots.evidenceLevels(of: ledger) ?? [:] { evidence = evidence ?? [:]; evidence![level, default: 0] += n }
            }
        }
        if json {
            console.printJSON { w in
                w.key("ledgers")
                w.array(outcomes) { w, o in
                    w.object { w in
                        w.field("path", o.path)
                        if let r = o.result {
                            w.field("ledger", r.ledgerID)
                            w.field("shippedEvents", r.shippedEvents)
                            w.field("alreadyShipped", r.alreadyShipped)
                            w.field("lastSeq", r.lastSeq)
                        } else {
                            w.field("error", o.error ?? "")
                        }
                    }
                }
                w.field("shippedEvents", events)
                w.field("failed", failed.count)
                w.key("seconds")
                w.raw(String(format: "%.3f", seconds))
                if let evidence { AppleRootOptions.write(evidence, to: &w) }
            }
        } else {
            for o in outcomes {
                if let r = o.result {
                    console.print(
                        "\(o.path): ledger \(r.ledgerID): "
                            + (r.shippedEvents == 0
                                ? "up to date at seq \(r.lastSeq)"
                                : "shipped \(r.shippedEvents) event\(r.shippedEvents == 1 ? "" : "s") (seq \(r.alreadyShipped + 1)...\(r.lastSeq))"))
                }
            }
            for o in failed { console.error("\(o.path): refused: \(o.error!)") }
            console.print("\(shipped.count) of \(outcomes.count) ledger\(outcomes.count == 1 ? "" : "s") shipped, \(events) new events, \(String(format: "%.2f", seconds)) s")
            if let evidence { console.print("in the shipped ledgers: " + AppleRootOptions.describe(evidence)) }
        }
        if !failed.isEmpty { throw CommandExit(status: 1) }
    }
}
