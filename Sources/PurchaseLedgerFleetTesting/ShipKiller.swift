import Foundation
import GRDB
package import PurchaseLedger
import PurchaseLedgerFleet
import PostgresNIO

/// The kill-and-reship check, for the test suite (short) and `ledger-bench fleet-crash` (long):
/// `purchase-ledger ship` killed with SIGKILL at random moments, then run to the end; every event
/// must then be on the server exactly once, each ledger whole or not at all.
package enum ShipKiller {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// Starts `binary ship PATHS --to URL` `kills` times, killing each after a random delay of at
    /// most `maxDelay` seconds; returns how many were killed while running. `before(round)` runs
    /// before each start (to give the ledgers new events, so every round has something to ship).
    package static func run(
        binary: String, paths: [String], url: String, kills: Int, maxDelay: Double,
        seed: UInt64 = 42, before: ((Int) throws -> Void)? = nil
    ) throws -> (killed: Int, finished: Int) {
        var generator = SplitMix(seed: seed)
        var killed = 0, finished = 0
        for round in 0..<kills {
            try before?(round)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["ship"] + paths + ["--to", url]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            Thread.sleep(forTimeInterval: Double(generator.next() % 1000) / 1000 * maxDelay)
            if process.isRunning {
                kill(process.processIdentifier, SIGKILL)
                killed += 1
            } else {
                finished += 1
            }
            process.waitUntilExit()
        }
        return (killed, finished)
    }

    /// Checks the server against the ledger files: for each ledger, the events 1...last exactly
    /// once with the file's links, the ledgers row at the same seq, and projections equal to the
    /// file's (history and revenue); a ledger not on the server must have no row anywhere.
    package static func check(paths: [String], url: String) async throws {
        let fleet = try await FleetStore.connect(url)
        defer { Task { await fleet.close() } }
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        for path in paths {
            let ledger = try Ledger(path: path, configuration: readOnly)
            guard let id = try ledger.identity()?.id else { throw Failure(description: "\(path) has no id") }
            let counts = try await fleet.fetch(
                """
                SELECT (SELECT coalesce(sum(last_seq - first_seq + 1), 0)::int8 FROM event_blocks WHERE ledger_id = \(id)::uuid) AS n,
                       (SELECT coalesce(max(last_seq), 0) FROM event_blocks WHERE ledger_id = \(id)::uuid) AS top,
                       (SELECT last_seq FROM ledgers WHERE ledger_id = \(id)::uuid) AS shipped
                """
            ).first
            let n: Int64 = counts?["n"] ?? -1, top: Int64 = counts?["top"] ?? -1, shipped: Int64? = counts?["shipped"]
            let last = try ledger.lastSeq()
            guard n == last, top == last, shipped == last else {
                throw Failure(
                    description: "\(path): the server holds \(n) events up to seq \(top), its ledgers row says \(shipped.map(String.init) ?? "nothing"); the file has \(last)")
            }
            let stored = try await fleet.storedEvents(ofLedger: id)
            guard stored.map(\.seq) == (last > 0 ? Array(1...last) : []), stored.map(\.link) == (try ledger.shipment(after: 0, link: nil)).events.map(\.link) else {
                throw Failure(description: "\(path): the server's links differ from the file's")
            }
            let history = try await fleet.purchaseHistory(PurchaseHistoryQuery(limit: .max)).filter { $0.ledgerID == id }.map(\.entry)
            guard history == (try ledger.purchaseHistory(PurchaseHistoryQuery(limit: .max))) else {
                throw Failure(description: "\(path): the server's projections differ from the file's")
            }
        }
    }
}

/// Device ledgers that grow in rounds: the workload split into `devices` logs, each cut into
/// `rounds` slices; `grow(round)` appends every log's slice of that round to its ledger.
package struct GrowingDevices {
    package let paths: [String]
    private let slices: [[[Event]]]

    package init(events: [Event], devices: Int, rounds: Int, directory: String) {
        let logs = DeviceSplit.split(events, devices: devices)
        paths = logs.indices.map { "\(directory)/device-\($0).ledger" }
        slices = logs.map { log in
            (0..<rounds).map { r in Array(log[(log.count * r / rounds)..<(log.count * (r + 1) / rounds)]) }
        }
    }

    package var rounds: Int { slices.first?.count ?? 0 }

    /// Appends round `round`'s events of one device.
    package func grow(_ round: Int, device: Int) throws {
        guard round < slices[device].count, !slices[device][round].isEmpty else { return }
        _ = try Ledger(path: paths[device]).append(contentsOf: slices[device][round])
    }

    package func grow(_ round: Int) throws {
        for (path, slices) in zip(paths, slices) where round < slices.count {
            let ledger = try Ledger(path: path)
            if !slices[round].isEmpty { _ = try ledger.append(contentsOf: slices[round]) }
        }
    }
}

/// A small deterministic generator (SplitMix64).
package struct SplitMix: RandomNumberGenerator {
    private var state: UInt64
    package init(seed: UInt64) { state = seed }
    package mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
