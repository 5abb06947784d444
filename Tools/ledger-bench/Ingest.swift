import Foundation
import PurchaseLedger
import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting
import PurchaseLedgerServer
import PurchaseLedgerUploaderCore

/// `ledger-bench ingest WORKLOAD [--ledgers N] [--runs R] [--concurrency K] [--binary PATH]`: the
/// ingest service's figures on this machine, with a PostgreSQL server started here (fsync on) and
/// `purchase-ledger serve` on loopback. In each run, into fresh databases: the workload split into N
/// device ledgers shipped (`ship`'s path: batches of 64 ledgers, 2 connections), then uploaded by N
/// simulated devices over HTTP (`LedgerUploader`, K devices at once, each asking for the service's
/// head and sending its events after it); events stored per second, each against the other. Then
/// the latency of an upload of 100 events: 300 devices hold all but their last 100 events in a
/// third database, and each sends those 100 (one request, K at once). And the service's peak RSS.
func ingestBenchmark(workload: String, ledgers count: Int, runs: Int, concurrency: Int, binary: String) throws {
    let (_, paths) = try deviceLedgers(workload: workload, count: count)
    var readOnly = LedgerConfiguration()
    readOnly.readOnly = true
    let events = try paths.reduce(0) { $0 + Int(try Ledger(path: $1, configuration: readOnly).lastSeq()) }
    print("\(paths.count) device ledgers, \(events) events; \(concurrency) devices upload at once; service: \(binary)")
    let server = try LocalPostgres(durable: true)
    defer { server.stop() }
    var shipRates: [Double] = [], ingestRates: [Double] = [], ratios: [Double] = [], p50s: [Double] = [], p99s: [Double] = [], peaks: [Double] = []
    for run in 0...runs {
        if run > 0 { for name in ["ship_\(run - 1)", "ingest_\(run - 1)", "latency_\(run - 1)"] { try server.psql("DROP DATABASE \(name)") } }
        for name in ["ship_\(run)", "ingest_\(run)", "latency_\(run)"] { try server.createDatabase(name) }
        // Ship.
        try server.psql("CHECKPOINT")
        let shipURL = server.url(database: "ship_\(run)")
        let shipCPU = CPUTimes()
        let shipSeconds = try blocking {
            let start = ContinuousClock.now
            let fleet = try await FleetStore.connect(shipURL, migrate: true)
            let outcomes = try await fleet.ship(paths: paths, batchSize: 64, connections: 2)
            await fleet.close()
            for outcome in outcomes { _ = try outcome.result.get() }
            return (ContinuousClock.now - start) / .seconds(1)
        }
        // Upload: the service on loopback, the devices in this process.
        let ingestURL = server.url(database: "ingest_\(run)")
        let token = try blocking {
            let fleet = try await FleetStore.connect(ingestURL, migrate: true)
            let token = try await fleet.createToken(name: "bench")
            await fleet.close()
            return token
        }
        let shipSpent = shipCPU.spent()
        try server.psql("CHECKPOINT")
        let service = try ServiceUnderTest(binary: binary, fleet: ingestURL)
        let endpoint = URL(string: service.url)!
        let ingestCPU = CPUTimes(service: service.process.processIdentifier)
        let ingestSeconds = try blocking {
            let transport = try HTTPClientTransport()
            let start = ContinuousClock.now
            try await forEach(paths, concurrency: concurrency) { path in
                var readOnly = LedgerConfiguration()
                readOnly.readOnly = true
                let uploader = LedgerUploader(ledger: try Ledger(path: path, configuration: readOnly), endpoint: endpoint, token: token, transport: transport)
                let report = try await uploader.upload()
                guard await uploader.status.lag == 0, report.stored > 0 else { throw BenchFailure("\(path) did not upload whole") }
            }
            let seconds = (ContinuousClock.now - start) / .seconds(1)
            try await transport.shutdown()
            return seconds
        }
        let stored = try blocking {
            let fleet = try await FleetStore.connect(ingestURL)
            let totals = try await fleet.shippedTotals()
            await fleet.close()
            return totals.events
        }
        let ingestSpent = ingestCPU.spent()
        guard stored == events else { throw BenchFailure("the service stored \(stored) events, not \(events)") }
        print(
            String(
                format: "  CPU s: ship: client %.1f, PostgreSQL %.1f; ingest: devices %.1f, service %.1f, PostgreSQL %.1f", shipSpent.client,
                shipSpent.postgres, ingestSpent.client, ingestSpent.service, ingestSpent.postgres))
        var peak = service.peakKiB()
        service.stop()

        // Latency: 300 devices with their last 100 events to send.
        let latencyURL = server.url(database: "latency_\(run)")
        let latencyToken = try blocking {
            let fleet = try await FleetStore.connect(latencyURL, migrate: true)
            let token = try await fleet.createToken(name: "bench")
            await fleet.close()
            return token
        }
        let latencyService = try ServiceUnderTest(binary: binary, fleet: latencyURL)
        let latencyBase = latencyService.url
        let chosen = stride(from: 0, to: paths.count, by: max(1, paths.count / 300)).map { paths[$0] }.prefix(300)
        let latencies = try blocking {
            let transport = try HTTPClientTransport()
            var bodies: [(id: String, first: [UInt8], last: [UInt8])] = []
            for path in chosen {
                var readOnly = LedgerConfiguration()
                readOnly.readOnly = true
                let ledger = try Ledger(path: path, configuration: readOnly)
                let total = try ledger.lastSeq()
                guard total > 100, let first = try ledger.upload(after: 0, link: nil, limit: Int(total - 100), maxBytes: 1 << 30),
                    let last = try ledger.upload(after: total - 100, link: first.head.link, limit: 100)
                else { continue }
                bodies.append((first.ledgerID, first.encoded(), last.encoded()))
            }
            @Sendable func post(_ id: String, _ body: [UInt8]) async throws {
                let response = try await transport.send(
                    UploadRequest(
                        method: "POST", url: URL(string: "\(latencyBase)/v1/ledgers/\(id)/events")!,
                        headers: ["Authorization": "Bearer \(latencyToken)", "Purchase-Ledger-Protocol": "1"], body: Data(body)))
                guard response.status == 200 else { throw BenchFailure("HTTP \(response.status): \(String(decoding: response.body, as: UTF8.self))") }
            }
            try await forEach(bodies, concurrency: concurrency) { try await post($0.id, $0.first) }
            let times = Locked<[Double]>([])
            try await forEach(bodies, concurrency: concurrency) { body in
                let start = ContinuousClock.now
                try await post(body.id, body.last)
                let ms = (ContinuousClock.now - start) / .milliseconds(1)
                times.withLock { $0.append(ms) }
            }
            try await transport.shutdown()
            return times.withLock { $0 }.sorted()
        }
        peak = max(peak, latencyService.peakKiB())
        latencyService.stop()
        let p50 = latencies[latencies.count / 2], p99 = latencies[min(latencies.count - 1, latencies.count * 99 / 100)]
        let ship = Double(events) / shipSeconds, ingest = Double(events) / ingestSeconds
        let line = String(
            format:
                "ship %.0f ev/s (%.2f s), ingest over HTTP %.0f ev/s (%.2f s), ratio %.2fx; upload of 100 events p50 %.1f ms, p99 %.1f ms (%d uploads); service peak RSS %.0f MB",
            ship, shipSeconds, ingest, ingestSeconds, ingest / ship, p50, p99, latencies.count, Double(peak) / 1024)
        if run == 0 {
            print("warm-up (not counted): " + line)
            continue
        }
        print("run \(run): " + line)
        shipRates.append(ship)
        ingestRates.append(ingest)
        ratios.append(ingest / ship)
        p50s.append(p50)
        p99s.append(p99)
        peaks.append(Double(peak) / 1024)
    }
    guard runs > 0 else { return }
    print(
        String(
            format:
                "ingest: median %.0f ev/s (min %.0f, max %.0f); ship median %.0f ev/s; ratio median %.2fx (min %.2f, max %.2f); upload of 100 events: p50 median %.1f ms, p99 median %.1f ms; service peak RSS median %.0f MB (max %.0f)",
            median(ingestRates), ingestRates.min()!, ingestRates.max()!, median(shipRates), median(ratios), ratios.min()!, ratios.max()!, median(p50s),
            median(p99s), median(peaks), peaks.max()!))
}

/// CPU seconds spent since it was made: by this process, by a service process, and by every
/// process named `postgres` (the server's backends), from /proc.
struct CPUTimes {
    let service: Int32?
    let start: (client: Double, service: Double, postgres: Double)

    init(service: Int32? = nil) {
        self.service = service
        start = Self.now(service)
    }

    func spent() -> (client: Double, service: Double, postgres: Double) {
        let end = Self.now(service)
        return (end.client - start.client, end.service - start.service, end.postgres - start.postgres)
    }

    static func seconds(_ pid: String) -> (name: String, seconds: Double)? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8), let open = stat.firstIndex(of: "("),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (String(stat[stat.index(after: open)..<close]), (user + system) / Double(sysconf(Int32(_SC_CLK_TCK))))
    }

    static func now(_ service: Int32?) -> (client: Double, service: Double, postgres: Double) {
        var postgres = 0.0
        for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(pid) != nil {
            if let found = seconds(pid), found.name == "postgres" { postgres += found.seconds }
        }
        return (seconds("self")?.seconds ?? 0, service.flatMap { seconds(String($0))?.seconds } ?? 0, postgres)
    }
}

struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` for each element, `concurrency` at a time.
func forEach<T: Sendable>(_ items: some Collection<T>, concurrency: Int, _ body: @escaping @Sendable (T) async throws -> Void) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        var iterator = items.makeIterator()
        for _ in 0..<max(1, concurrency) {
            guard let item = iterator.next() else { break }
            group.addTask { try await body(item) }
        }
        while try await group.next() != nil {
            if let item = iterator.next() { group.addTask { try await body(item) } }
        }
    }
}

/// `purchase-ledger serve` on a free loopback port, for the benchmark.
final class ServiceUnderTest {
    let process = Process()
    let url: String
    let log: String

    init(binary: String, fleet: String) throws {
        log = FileManager.default.temporaryDirectory.appending(path: "ledger-bench-serve-\(getpid())-\(UUID().uuidString.prefix(8)).log").path
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments =
            ["serve", "--fleet", fleet, "--listen", "127.0.0.1:0", "--rate", "1000000"]
            + (ProcessInfo.processInfo.environment["INGEST_BENCH_CONNECTIONS"].map { ["--connections", $0] } ?? [])
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        try handle.close()
        let deadline = Date().addingTimeInterval(30)
        var found: String?
        while found == nil && Date() < deadline {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            found = text.split(separator: "\n").first { $0.hasPrefix("listening on ") }.map { String($0.dropFirst("listening on ".count)) }
            if found == nil {
                guard process.isRunning else { throw BenchFailure("serve exited: \(text)") }
                usleep(20_000)
            }
        }
        guard let found else { throw BenchFailure("serve did not listen within 30 s") }
        url = found
    }

    /// The process's peak resident set (VmHWM), in KiB.
    func peakKiB() -> Int {
        let status = (try? String(contentsOfFile: "/proc/\(process.processIdentifier)/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("VmHWM:") } ?? ""
        return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "") ?? 0
    }

    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        process.waitUntilExit()
        try? FileManager.default.removeItem(atPath: log)
    }
}
