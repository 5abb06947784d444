import Foundation
import PurchaseLedger
import PostgresNIO
import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// `ledger-bench fleet WORKLOAD [--ledgers N] [--runs R]`: the fleet store's figures on this
/// machine, with a PostgreSQL server started here (fsync on): shipping the workload split into N
/// device ledgers, against a raw COPY of the same rows from the same client; a fleet revenue
/// report; one user's history; with `binary` (a `purchase-ledger`), its undelivered report in
/// each format, whole process.
///
/// With `tls`, the server also takes TLS (a certificate made here with openssl), and each run ships
/// the same ledgers a third time, with `sslmode=require`, against the plain ship (`sslmode=disable`).
func fleetBenchmark(workload: String, ledgers count: Int, runs: Int, tls: Bool = false, binary: String? = nil, auditBaseline: String? = nil) throws {
    let (scratch, paths) = try deviceLedgers(workload: workload, count: count)
    var readOnly = LedgerConfiguration()
    readOnly.readOnly = true
    // One ledger open at a time: 5,000 open ledgers hold more files than a process may.
    let (shipments, reading) = try time {
        try paths.map { path in
            let ledger = try Ledger(path: path, configuration: readOnly)
            return (ledger: try ledger.identity()!.id, shipment: try ledger.shipment(after: 0, link: nil))
        }
    }
    let events = shipments.reduce(0) { $0 + $1.shipment.events.count }
    print(String(format: "%d ledgers, %d events in all (the catalog is in every ledger); reading, checking and replaying them all: %.2f s", paths.count, events, reading))

    // fsync on; WAL sized for a bulk load, so no checkpoint lands in the middle of a run.
    let settings = ProcessInfo.processInfo.environment["FLEET_BENCH_SETTINGS"].map { $0.split(separator: " ").map(String.init) } ?? []
    var certificate: (certificate: String, key: String)?
    if tls {
        let key = scratch + "/server.key", crt = scratch + "/server.pem"
        let openssl = Process()
        openssl.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        openssl.arguments = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", crt, "-days", "2", "-subj", "/CN=localhost"]
        openssl.standardError = FileHandle.nullDevice
        try openssl.run()
        openssl.waitUntilExit()
        certificate = (crt, key)
    }
    let server = try LocalPostgres(durable: true, settings: settings, tls: certificate)
    defer { server.stop() }
    let plain = tls ? "?sslmode=disable" : ""
    var tlsRatios: [Double] = [], tlsRates: [Double] = []
    if !settings.isEmpty { print("server settings: \(settings.joined(separator: " "))") }
    let environment = ProcessInfo.processInfo.environment
    let connections = environment["FLEET_BENCH_CONNECTIONS"].flatMap { Int($0) } ?? 2
    let batchSize = environment["FLEET_BENCH_BATCH"].flatMap { Int($0) } ?? 64
    print("ship: \(connections) connections, batches of \(batchSize) ledgers")
    var shipRates: [Double] = [], copyRates: [Double] = [], ratios: [Double] = []
    var lastDatabase = ""
    // Run 0 is a warm-up, not counted: a new server creates its WAL segments as it first fills
    // them, which a server in service does not (it recycles them). Each run's databases are
    // dropped when the next starts, and a checkpoint precedes each timed phase, so every phase
    // starts from the same server state.
    for run in 0...runs {
        if run > 0 {
            for name in ["ship_\(run - 1)", "copy_\(run - 1)"] + (tls ? ["tls_\(run - 1)"] : []) { try server.psql("DROP DATABASE \(name)") }
        }
        for name in ["ship_\(run)", "copy_\(run)"] + (tls ? ["tls_\(run)"] : []) { try server.createDatabase(name) }
        try server.psql("CHECKPOINT")
        // Ship: the CLI's path (batches of ledgers, one PostgreSQL transaction each), opening,
        // reading and checking every file.
        let shipPaths = paths
        func ship(_ url: String) throws -> Double {
            try blocking {
                let start = ContinuousClock.now
                let fleet = try await FleetStore.connect(url, migrate: true)
                let outcomes = try await fleet.ship(paths: shipPaths, batchSize: batchSize, connections: connections)
                await fleet.close()
                for outcome in outcomes { _ = try outcome.result.get() }
                return (ContinuousClock.now - start) / .seconds(1)
            }
        }
        let shipSeconds = try ship(server.url(database: "ship_\(run)") + plain)
        var tlsSeconds = 0.0
        if tls {
            try server.psql("CHECKPOINT")
            tlsSeconds = try ship(server.url(database: "tls_\(run)") + "?sslmode=require")
        }
        // The ceiling: the same rows COPYed in one go into the same schema.
        try server.psql("CHECKPOINT")
        let copySeconds = try blocking {
            let fleet = try await FleetStore.connect(server.url(database: "copy_\(run)") + plain, migrate: true)
            let start = ContinuousClock.now
            try await fleet.rawCopy(shipments)
            let seconds = (ContinuousClock.now - start) / .seconds(1)
            await fleet.close()
            return seconds
        }
        let ship = Double(events) / shipSeconds, copy = Double(events) / copySeconds
        lastDatabase = "ship_\(run)"
        if run == 0 {
            print(String(format: "warm-up (not counted): ship %.0f ev/s (%.2f s), raw COPY %.0f ev/s (%.2f s)", ship, shipSeconds, copy, copySeconds))
            continue
        }
        shipRates.append(ship)
        copyRates.append(copy)
        ratios.append(ship / copy)
        print(String(format: "run %d: ship %.0f ev/s (%.2f s), raw COPY %.0f ev/s (%.2f s), ratio %.2fx", run, ship, shipSeconds, copy, copySeconds, ship / copy))
        if tls {
            let rate = Double(events) / tlsSeconds
            tlsRates.append(rate)
            tlsRatios.append(rate / ship)
            print(String(format: "run %d: ship over TLS (sslmode=require) %.0f ev/s (%.2f s), %.2fx of the plain ship", run, rate, tlsSeconds, rate / ship))
        }
    }
    print(
        String(
            format: "ship: median %.0f ev/s (min %.0f, max %.0f); raw COPY median %.0f ev/s; ratio median %.2fx",
            median(shipRates), shipRates.min()!, shipRates.max()!, median(copyRates), median(ratios)))
    if tls {
        print(
            String(
                format: "ship over TLS: median %.0f ev/s (min %.0f, max %.0f); ratio to the plain ship of the same run: median %.2fx (min %.2f, max %.2f)",
                median(tlsRates), tlsRates.min()!, tlsRates.max()!, median(tlsRatios), tlsRatios.min()!, tlsRatios.max()!))
    }

    // What the shipped events take in PostgreSQL: their relation with its indexes and TOAST.
    let stored = try server.psql(
        "SELECT pg_total_relation_size(coalesce(to_regclass('event_blocks'), to_regclass('events'))), coalesce(to_regclass('event_blocks'), to_regclass('events'))::text",
        database: lastDatabase
    ).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|")
    if stored.count == 2, let bytes = Double(stored[0]) {
        print("events stored: \(Int(bytes)) bytes in \(stored[1]) (with its indexes and TOAST), " + String(format: "%.1f bytes/event", bytes / Double(events)))
    }

    // Reports over the shipped fleet.
    let users = Array(Set(try paths.prefix(200).flatMap { try Ledger(path: $0, configuration: readOnly).transactions().compactMap(\.user) })).sorted()
    let shippedURL = server.url(database: lastDatabase) + plain
    let (revenue, history) = try blocking {
        let fleet = try await FleetStore.connect(shippedURL)
        var revenue: [Double] = [], history: [Double] = []
        for _ in 0..<7 {
            let start = ContinuousClock.now
            _ = try await fleet.revenue()
            revenue.append((ContinuousClock.now - start) / .milliseconds(1))
        }
        var generator = SplitMix(seed: 7)
        for _ in 0..<200 {
            let user = users[Int(generator.next() % UInt64(users.count))]
            let start = ContinuousClock.now
            _ = try await fleet.purchaseHistory(PurchaseHistoryQuery(user: user))
            history.append((ContinuousClock.now - start) / .milliseconds(1))
        }
        await fleet.close()
        return (revenue, history)
    }
    let h = history.sorted()
    print(String(format: "fleet revenue report: median %.1f ms (min %.1f, max %.1f) over 7 runs", median(revenue), revenue.min()!, revenue.max()!))
    print(String(format: "one user's history: p50 %.2f ms, p99 %.2f ms, max %.2f ms over 200 random users", h[h.count / 2], h[h.count * 99 / 100], h.last!))

    if let binary { try fleetReportFigures(url: shippedURL, binary: binary, runs: 5, auditBaseline: auditBaseline) }

    // Erasure: one user at a time out of every ledger's rows (`forget postgres://... --user U`),
    // the vacuum of the four tables included.
    var chosen: [String] = []
    var picker = SplitMix(seed: 11)
    while chosen.count < 5 {
        let user = users[Int(picker.next() % UInt64(users.count))]
        if !chosen.contains(user) { chosen.append(user) }
    }
    let toErase = chosen
    let erasures = try blocking {
        let fleet = try await FleetStore.connect(shippedURL)
        var seconds: [Double] = []
        for user in toErase {
            let start = ContinuousClock.now
            let erased: FleetErasure
            do {
                erased = try await fleet.forget(user: user)
            } catch let error as LedgerError where error.code == .notErasable {
                // Ledgers written before personal values were kept apart (their migration 0007):
                // remove the scratch folder to split the workload again.
                print("forget one user: not measured on these ledgers (\(error.message))")
                break
            }
            seconds.append((ContinuousClock.now - start) / .seconds(1))
            print(String(format: "forget one user: %d ledgers, %d rows, %.3f s", erased.ledgers, erased.rows, seconds.last!))
        }
        await fleet.close()
        return seconds
    }
    if !erasures.isEmpty {
        print(
            String(
                format: "forget one user in the fleet: median %.3f s (min %.3f, max %.3f) over %d users", median(erasures), erasures.min()!, erasures.max()!,
                erasures.count))
    }
}

/// The workload split into `count` device ledgers in bench-results (made once, then reused): the
/// scratch folder and the ledgers' paths.
func deviceLedgers(workload: String, count: Int) throws -> (scratch: String, paths: [String]) {
    let scratch = "bench-results/fleet-\(count)-" + URL(fileURLWithPath: workload).deletingPathExtension().lastPathComponent
    var paths = (0..<count).map { "\(scratch)/device-\($0).ledger" }
    if !paths.allSatisfy({ FileManager.default.fileExists(atPath: $0) }) {
        try? FileManager.default.removeItem(atPath: scratch)
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
        let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload))))
        let (logs, split) = time { DeviceSplit.split(input.events, devices: count) }
        let (_, write) = try time {
            for (i, log) in logs.enumerated() { _ = try Ledger(path: paths[i]).append(contentsOf: log) }
        }
        print(String(format: "split %d events into %d device ledgers in %.1f s, written in %.1f s", input.events.count, count, split, write))
    }
    paths = paths.filter { FileManager.default.fileExists(atPath: $0) }
    var readOnly = LedgerConfiguration()
    readOnly.readOnly = true
    // Ledgers written by an earlier version get their report tables rebuilt once (a writable
    // open), as a user's would: the history figure reads them.
    for path in paths where try !Ledger(path: path, configuration: readOnly).projectionsAreCurrent() {
        _ = try Ledger(path: path)
    }
    return (scratch, paths)
}

/// `ledger-bench fleet-crash`: `purchase-ledger ship` killed with SIGKILL at random moments,
/// then run to the end; every event must be on the server exactly once.
func fleetCrash(workload: String, kills: Int, binary: String) throws -> Bool {
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-fleet-crash-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload))))
    // The ledgers grow between rounds, so every ship has new events to send when it is killed.
    let devices = GrowingDevices(events: input.events, devices: 50, rounds: kills + 1, directory: scratch)
    let paths = devices.paths
    let server = try LocalPostgres(durable: true)
    defer { server.stop() }
    try server.createDatabase("fleet")
    let url = server.url(database: "fleet")
    _ = try blocking { try await FleetStore.migrate(url) }
    let (killed, finished) = try ShipKiller.run(binary: binary, paths: paths, url: url, kills: kills, maxDelay: 1.5, before: devices.grow)
    try devices.grow(kills)
    let final = Process()
    final.executableURL = URL(fileURLWithPath: binary)
    final.arguments = ["ship"] + paths + ["--to", url]
    final.standardOutput = FileHandle.nullDevice
    try final.run()
    final.waitUntilExit()
    do {
        try blocking { try await ShipKiller.check(paths: paths, url: url) }
    } catch {
        print("fleet-crash: \(kills) runs of ship (\(killed) killed, \(finished) finished first), then the check FAILED: \(error)")
        return false
    }
    let shipped = try paths.reduce(Int64(0)) { $0 + (try Ledger(path: $1).lastSeq()) }
    print(
        "fleet-crash: \(kills) runs of ship over \(paths.count) ledgers (\(killed) killed with SIGKILL, \(finished) finished first), then one to the end: \(shipped) events on the server exactly once, every ledger whole, projections equal the files"
    )
    return final.terminationStatus == 0
}

/// `ledger-bench fleet-report URL [--binary PATH] [--runs N]`: the undelivered report as a user
/// runs it (`purchase-ledger report URL --view undelivered --format F`, whole process, output to
/// /dev/null) in each format, over a fleet store already shipped; #37's target is < 2 s and
/// < 150 MB for 100,000 rows. The tables are analyzed first, as autovacuum has them a minute
/// after a bulk ship. Each run goes through `ledger-bench timed-run`, a small process, so the
/// peak memory is the report's own (a child spawned by this process would be charged this
/// process's memory at its exec).
///
/// `auditBaseline`: another build of the CLI whose audit runs alternate with this one's, for a
/// before-and-after over the same store.
func fleetReportFigures(url: String, binary: String, runs: Int, auditBaseline: String? = nil) throws {
    _ = try blocking {
        let fleet = try await FleetStore.connect(url)
        _ = try await fleet.fetch("VACUUM ANALYZE")
        await fleet.close()
    }
    /// `arguments` run `count` times through `timed-run`: the wall seconds and peak MB of each.
    func timed(_ arguments: [String], _ count: Int) throws -> (seconds: [Double], peaks: [Double]) {
        var seconds: [Double] = [], peaks: [Double] = []
        for _ in 0..<count {
            let (printed, _) = try childText(["timed-run"] + arguments)
            let figures = printed.split(separator: " ").compactMap { Double($0) }
            guard figures.count == 2 else { throw BenchError("timed-run printed \(printed)") }
            seconds.append(figures[0])
            peaks.append(figures[1] / 1024)
        }
        return (seconds, peaks)
    }
    for format in ["csv", "json", "table", "html"] {
        let (seconds, peaks) = try timed([binary, "report", url, "--view", "undelivered", "--format", format], runs)
        print(
            String(
                format: "report --view undelivered --format %@ (purchase-ledger, whole process): median %.2f s (min %.2f, max %.2f), peak memory %.0f-%.0f MB over %d runs",
                format, median(seconds), seconds.min()!, seconds.max()!, peaks.min()!, peaks.max()!, runs))
    }
    // The audit of the whole store (#48: under 60 s at 5,000 ledgers), as its owner runs it;
    // alternated with the baseline's when there is one.
    var figures: [String: (seconds: [Double], peaks: [Double])] = [:]
    let builds = [auditBaseline, binary].compactMap { $0 }
    for _ in 0..<min(runs, 3) {
        for build in builds {
            let (seconds, peaks) = try timed([build, "verify", url], 1)
            figures[build, default: ([], [])].seconds += seconds
            figures[build, default: ([], [])].peaks += peaks
        }
    }
    for build in builds {
        let (seconds, peaks) = figures[build]!
        print(
            String(
                format: "verify URL (the fleet audit, whole process%@): median %.2f s (min %.2f, max %.2f), peak memory %.0f-%.0f MB over %d runs",
                builds.count > 1 ? ", " + build : "", median(seconds), seconds.min()!, seconds.max()!, peaks.min()!, peaks.max()!, seconds.count))
    }
}

/// Runs `arguments` (a binary and its arguments) with its output to /dev/null: its wall time,
/// process start and exit included, and its peak resident memory in KiB (`wait4`'s rusage).
func timedRun(_ arguments: [String]) throws -> (seconds: Double, peakKiB: Int) {
    let null = open("/dev/null", O_WRONLY)
    guard null >= 0 else { throw BenchError("cannot open /dev/null: errno \(errno)") }
    let start = now()
    let pid: pid_t
    do {
        pid = try spawn(arguments, stdout: null, stderr: null)
    } catch {
        close(null)
        throw error
    }
    close(null)
    var status: Int32 = 0
    var usage = rusage()
    while wait4(pid, &status, 0, &usage) < 0 && errno == EINTR {}
    let seconds = now() - start
    try checkExited(status, arguments)
    return (seconds, usage.ru_maxrss)
}

/// The median of `values` (of the middle two when their count is even).
func median(_ values: [Double]) -> Double {
    let s = values.sorted()
    return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2
}
