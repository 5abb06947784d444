#if canImport(Glibc)
    @preconcurrency import Glibc  // stdout, set to line buffering below
#endif
import Foundation
import GRDBSQLite
import PurchaseLedger
import PurchaseLedgerTesting

// ledger-bench: every speed and size figure of purchase-ledger, each the median of several runs
// (with min and max), each ratio taken in the same run against a raw SQLite ceiling measured here
// on the same bytes with the same pragmas. Run it through Tools/bench.sh.
//
// The commands: `usage` below (`ledger-bench --help` prints it).

/// The commands (`--help` prints them).
let usage = """
    usage:
      ledger-bench run --workloads DIR --sizes 100000,1000000 --runs 3 --out results.json
      ledger-bench import-once WORKLOAD LEDGER      (child process: imports, prints peak RSS in KiB)
      ledger-bench peak-replay LEDGER               (child process: prints peak RSS in KiB)

      Loops for profilers (perf, valgrind --tool=callgrind on a stripped copy):
      ledger-bench profile-state LEDGER [ROUNDS]    where a state at a seq spends its time
      ledger-bench profile-replay-loop LEDGER [N]   N full replays, events/s of each
      ledger-bench profile-rebuild LEDGER [N]       N rebuilds, then N with every row rewritten
      ledger-bench profile-split LEDGER             decode alone, reduce alone, then both
      ledger-bench profile-snapshot-loop LEDGER SEQ [N]   N states at SEQ on one open ledger
      ledger-bench profile-cold-loop LEDGER SEQ [N]       N opens and states at SEQ, each on a new Ledger
      ledger-bench profile-append WORKLOAD LEDGER [N]     N per-event appends (synchronous=NORMAL)
      ledger-bench profile-append-on LEDGER TAIL          TAIL's events appended one commit each to a copy of LEDGER
      ledger-bench profile-shipment DIR [N]         what a ship reads on the client, for N ledgers of DIR
      ledger-bench append WORKLOAD [RUNS]           the per-event durable append figures alone
      ledger-bench append-at-scale WORKLOAD [RUNS]  the per-event append figure at the workload's size

      Reliability (Tools/reliability.sh):
      ledger-bench crash [--kills N]                writers killed mid-append; no acknowledged event lost
      ledger-bench flips [--trials N] [--workload FILE]   flipped bits; every one caught
      ledger-bench fuzz [--inputs N]                fuzzed decoders; none crashes
      ledger-bench fleet-crash [--kills N] [--workload FILE] [--binary PATH]   ships killed; none loses an event
      ledger-bench codec LEDGER [RUNS]              the Swift LZ4 codec against liblz4 on the ledger's blocks
      ledger-bench import-floor WORKLOAD [RUNS]     what an import cannot skip, against what 0.6x of raw allows
      ledger-bench signed WORKLOAD [--runs N] [--out FILE]   the workload with every purchase signed (a chain made
                                                    here) against it unsigned: file bytes per signed purchase, import speed
      ledger-bench fleet WORKLOAD [--ledgers N] [--runs R] [--tls] [--binary PATH] [--audit-baseline PATH]
                                                    ship N device ledgers into a PostgreSQL started here (with
                                                    --tls, also over TLS, same run); reports over them, the CLI's
                                                    undelivered one and its fleet audit too (alternated with the
                                                    baseline build's audit when given)
      ledger-bench fleet-apple WORKLOAD [--ledgers N] [--apple M] [--runs R] [--binary PATH]
      ledger-bench ingest WORKLOAD [--ledgers N] [--runs R] [--concurrency K] [--binary PATH]
                                                    M of Apple's signed transactions (a chain made here) beside N
                                                    shipped ledgers: the import's verify rate against openssl's,
                                                    the CLI's apple-import, and its fleet divergence report
      ledger-bench fleet-report URL [--binary PATH] [--runs N]   the CLI's undelivered report in each format
                                                    over a fleet already shipped: wall time and peak memory
    """

struct Figure {
    var name: String
    var unit: String
    var samples: [Double]
    var ceiling: [Double]? = nil
    var target: String = ""
    /// What `ceiling` measures, as the summary names it.
    var ceilingName = "raw SQLite"

    var sorted: [Double] { samples.sorted() }
    var median: Double { let s = sorted; return s.count % 2 == 1 ? s[s.count / 2] : (s[s.count / 2 - 1] + s[s.count / 2]) / 2 }
    var ratio: Double? {
        guard let ceiling, !ceiling.isEmpty else { return nil }
        // Per-run ratios, then their median: each run is compared with its own ceiling.
        let ratios = zip(samples, ceiling).map { $0 / $1 }.sorted()
        return ratios[ratios.count / 2]
    }

    /// `  name: median M unit (min, max), R x of raw SQLite`, as the benchmark prints it.
    var summary: String {
        let s = sorted
        var line = "  \(name): median \(String(format: "%.3f", median)) \(unit) (min \(String(format: "%.3f", s.first!)), max \(String(format: "%.3f", s.last!)))"
        if let ratio { line += ", \(String(format: "%.2f", ratio))x of \(ceilingName)" }
        return line
    }
}

func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }

func time<T>(_ body: () throws -> T) rethrows -> (T, Double) {
    let start = now()
    let value = try body()
    return (value, now() - start)
}

func remove(_ path: String) {
    for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
}

func peakRSSKiB() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return 0 }
    for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
        return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
    }
    return 0
}

/// Plain SQLite through the C API, the ceiling every ratio is taken against.
final class RawSQLite {
    var db: OpaquePointer?

    init(path: String, synchronous: String) {
        remove(path)
        sqlite3_open(path, &db)
        exec("PRAGMA journal_mode = WAL")
        exec("PRAGMA synchronous = \(synchronous)")
        exec("CREATE TABLE raw (seq INTEGER PRIMARY KEY, payload BLOB NOT NULL)")
    }

    deinit { sqlite3_close(db) }

    func exec(_ sql: String) { sqlite3_exec(db, sql, nil, nil, nil) }

    /// Inserts every payload; one transaction for all, or one per row.
    func insert(_ payloads: [[UInt8]], transactionPerRow: Bool) {
        insert(payloads, rowsPerTransaction: transactionPerRow ? 1 : payloads.count)
    }

    /// Inserts every payload, committing after each `rowsPerTransaction` rows (and after the last).
    func insert(_ payloads: [[UInt8]], rowsPerTransaction: Int) {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, "INSERT INTO raw (seq, payload) VALUES (?, ?)", -1, &statement, nil)
        let every = max(1, rowsPerTransaction)
        for (i, payload) in payloads.enumerated() {
            if i % every == 0 { exec("BEGIN") }
            sqlite3_bind_int64(statement, 1, Int64(i + 1))
            payload.withUnsafeBytes { _ = sqlite3_bind_blob(statement, 2, $0.baseAddress, Int32($0.count), nil) }
            sqlite3_step(statement)
            sqlite3_reset(statement)
            if (i + 1) % every == 0 || i == payloads.count - 1 { exec("COMMIT") }
        }
        sqlite3_finalize(statement)
    }

    /// Reads every payload in order, touching each byte count.
    func readAll() -> Int {
        var statement: OpaquePointer?
        sqlite3_prepare_v2(db, "SELECT payload FROM raw ORDER BY seq", -1, &statement, nil)
        var bytes = 0
        while sqlite3_step(statement) == SQLITE_ROW {
            bytes += Int(sqlite3_column_bytes(statement, 0))
            _ = sqlite3_column_blob(statement, 0)
        }
        sqlite3_finalize(statement)
        return bytes
    }
}

func configuration(durability: LedgerConfiguration.Durability = .full) -> LedgerConfiguration {
    var c = LedgerConfiguration()
    c.durability = durability
    return c
}

/// The streaming import `purchase-ledger import` runs: the file read, parsed, decided and stored
/// in pieces, in one transaction.
func importWorkload(_ workload: String, into path: String) throws -> ImportSummary {
    remove(path)
    let ledger = try Ledger(path: path, configuration: configuration())
    return try ledger.importJSONLines(from: try JSONLinesReader(path: workload))
}

/// Runs `ledger-bench ARGUMENTS...` (or `executable`) as a child process and returns what it
/// printed as a number (a peak RSS in KiB; 0 when it is not one), and the child's whole wall time,
/// process start and exit included. posix_spawn and waitpid, not Foundation's `Process`, whose
/// `waitUntilExit` polls a run loop every 50 ms here: a 30 ms child measured 20 to 87 ms.
func child(_ arguments: [String], executable: String = CommandLine.arguments[0]) throws -> (printed: Double, seconds: Double) {
    let (printed, seconds) = try childText(arguments, executable: executable)
    return (Double(printed) ?? 0, seconds)
}

/// ``child(_:executable:)``, returning what the child printed as text (trimmed).
func childText(_ arguments: [String], executable: String = CommandLine.arguments[0]) throws -> (printed: String, seconds: Double) {
    var fds: [Int32] = [0, 0]
    guard pipe(&fds) == 0 else { throw BenchError("pipe failed: errno \(errno)") }
    let start = now()
    let pid: pid_t
    do {
        pid = try spawn([executable] + arguments, stdout: fds[1], closing: fds[0])
    } catch {
        close(fds[0])
        close(fds[1])
        throw error
    }
    close(fds[1])
    let data = FileHandle(fileDescriptor: fds[0], closeOnDealloc: true).readDataToEndOfFile()
    var status: Int32 = 0
    while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
    let seconds = now() - start
    try checkExited(status, [executable] + arguments)
    return (String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines), seconds)
}

/// Throws unless wait status `status` says the child (`arguments`) exited normally with status 0
/// (WIFEXITED and WEXITSTATUS, which Swift does not import).
func checkExited(_ status: Int32, _ arguments: [String]) throws {
    guard status & 0x7f == 0, (status >> 8) & 0xff == 0 else {
        throw BenchError("\(arguments.joined(separator: " ")) failed (wait status \(status))")
    }
}

/// The path of `name` in this tool's own folder (where `swift build` puts the CLI).
func besideThisTool(_ name: String) -> String {
    URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appending(path: name).path
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// CPU time the hypervisor gave to others (steal) and all CPU time so far, in ticks, from
/// /proc/stat; (0, 0) where there is none.
func cpuTicks() -> (steal: Int, total: Int) {
    guard let stat = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
        let line = stat.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
    else { return (0, 0) }
    let fields = line.split(separator: " ").dropFirst().compactMap { Int($0) }
    return (fields.count > 7 ? fields[7] : 0, fields.reduce(0, +))
}

func run(workloads: String, sizes: [Int], runs: Int, out: String) throws {
    var figures: [(size: Int, figure: Figure)] = []
    // This machine is a VM on a shared host: each line says how much CPU time was stolen while
    // it was measured, so a slow figure can be told from a busy host.
    var ticks = cpuTicks()
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-bench-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    func report(_ size: Int, _ f: Figure) {
        figures.append((size, f))
        var line = f.summary
        let now = cpuTicks()
        if now.total > ticks.total {
            line += String(format: " [CPU steal %.0f%%]", 100 * Double(now.steal - ticks.steal) / Double(now.total - ticks.total))
        }
        ticks = now
        print(line)
    }

    var importPerEvent: [(size: Int, eventsPerSecond: [Double])] = []
    for size in sizes {
        let workload = "\(workloads)/workload-\(size).jsonl"
        print("== \(size) events (\(workload)), \(runs) runs")
        let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload))))
        let payloads = input.events.map(\.binaryPayload)
        let ledgerPath = "\(scratch)/ledger-\(size).ledger"

        // 1. Import, whole process (the streaming import `purchase-ledger import` runs, in a child
        //    process: start, read, parse, decide, store, commit, exit), against the raw bulk-insert
        //    ceiling; the same child's peak RSS.
        //    Two ceilings: every row in one transaction, and a commit after each 1,000 rows (the
        //    ceiling #53 names for its import target), both with synchronous=FULL as the import.
        var imports: [Double] = [], rawBulk: [Double] = [], rawBatched: [Double] = [], peaks: [Double] = []
        for _ in 0..<runs {
            let (peak, seconds) = try child(["import-once", workload, ledgerPath])
            imports.append(Double(input.events.count) / seconds)
            peaks.append(peak / 1024)
            let raw = RawSQLite(path: "\(scratch)/raw.sqlite", synchronous: "FULL")
            let (_, rawSeconds) = time { raw.insert(payloads, transactionPerRow: false) }
            rawBulk.append(Double(payloads.count) / rawSeconds)
            let batched = RawSQLite(path: "\(scratch)/raw-batched.sqlite", synchronous: "FULL")
            let (_, batchedSeconds) = time { batched.insert(payloads, rowsPerTransaction: 1000) }
            rawBatched.append(Double(payloads.count) / batchedSeconds)
        }
        report(size, Figure(name: "import, whole process", unit: "events/s", samples: imports, ceiling: rawBulk, target: ">= 150000 and >= 0.6x"))
        report(
            size,
            Figure(
                name: "import against commits of 1,000", unit: "events/s", samples: imports, ceiling: rawBatched, target: ">= 0.5x",
                ceilingName: "raw SQLite committing every 1,000 rows"))
        report(size, Figure(name: "peak RSS of import", unit: "MB", samples: peaks, target: "< 200, flat"))
        // Run i of the smallest size against run i of this one.
        if let first = importPerEvent.first, first.size < size {
            report(
                size,
                Figure(
                    name: "per-event import cost, \(size) / \(first.size) events", unit: "x",
                    samples: zip(first.eventsPerSecond, imports).map { $0 / $1 }, target: "<= 1.25"))
        }
        importPerEvent.append((size, imports))

        let ledger = try Ledger(path: ledgerPath, configuration: configuration())
        let stored = try ledger.lastSeq()

        // 3. Full replay (decode + reduce from the first event, no snapshot) against raw reads.
        let rawRead = RawSQLite(path: "\(scratch)/raw-read.sqlite", synchronous: "FULL")
        rawRead.insert(payloads, transactionPerRow: false)
        var replays: [Double] = [], rawReads: [Double] = []
        for _ in 0..<runs {
            let (_, seconds) = try time { try ledger.replayFromLog() }
            replays.append(Double(stored) / seconds)
            let (_, rawSeconds) = time { rawRead.readAll() }
            rawReads.append(Double(payloads.count) / rawSeconds)
        }
        report(size, Figure(name: "full replay", unit: "events/s", samples: replays, ceiling: rawReads, target: ">= 500000"))

        // 4. State at a random seq: 200 seqs a run, so each run's p99 is a percentile and not
        //    just its maximum; the figures are the medians of the runs' p50 and p99.
        var generator = SystemRandomNumberGenerator()
        var p50s: [Double] = [], p99s: [Double] = []
        for _ in 0..<runs {
            var stateTimes: [Double] = []
            for _ in 0..<200 {
                let seq = Int64.random(in: 1...stored, using: &generator)
                let (_, seconds) = try time { try ledger.state(atSeq: seq) }
                stateTimes.append(seconds * 1000)
            }
            stateTimes.sort()
            p50s.append(stateTimes[stateTimes.count / 2])
            p99s.append(stateTimes[min(stateTimes.count - 1, Int(Double(stateTimes.count) * 0.99))])
        }
        report(size, Figure(name: "state at a random seq, p50", unit: "ms", samples: p50s, target: "< 50"))
        report(size, Figure(name: "state at a random seq, p99", unit: "ms", samples: p99s, target: "< 50"))

        // 5. Rebuild of every projection: as `purchase-ledger rebuild` runs it (the tables compared
        //    with the log, only differing rows written: here none), and with every row rewritten
        //    (`rebuild --full`, what a rebuild costs when every row changed).
        var rebuilds: [Double] = [], fullRebuilds: [Double] = []
        for _ in 0..<runs {
            let (summary, seconds) = try time { try ledger.rebuildProjections() }
            guard summary.rowsWritten == 0 else { throw BenchError("a rebuild of sound projections wrote \(summary.rowsWritten) rows") }
            rebuilds.append(seconds)
            let (_, full) = try time { try ledger.rebuildProjections(rewritingEveryRow: true) }
            fullRebuilds.append(full)
        }
        report(size, Figure(name: "rebuild projections", unit: "s", samples: rebuilds, target: "< 2 (1,000,000)"))
        report(size, Figure(name: "rebuild projections, every row rewritten", unit: "s", samples: fullRebuilds))

        // 6. One user's history, and the revenue report.
        let users = try ledger.transactions().compactMap(\.user)
        var histories: [Double] = [], revenues: [Double] = []
        for i in 0..<max(20, runs * 10) {
            let user = users[(i * 7919) % users.count]
            let (_, seconds) = try time { try ledger.purchaseHistory(PurchaseHistoryQuery(user: user)) }
            histories.append(seconds * 1000)
        }
        for _ in 0..<runs {
            let (_, seconds) = try time { try ledger.revenue() }
            revenues.append(seconds * 1000)
        }
        report(size, Figure(name: "one user's history", unit: "ms", samples: histories, target: "< 5"))
        report(size, Figure(name: "revenue report", unit: "ms", samples: revenues, target: "< 1000"))

        // 7. Sizes, with the write-ahead log copied into the file.
        try ledger.checkpoint()
        let stats = try ledger.statistics()
        report(size, Figure(name: "file bytes per event", unit: "bytes", samples: [stats.fileBytesPerEvent], target: "<= 80"))
        report(size, Figure(name: "log bytes per event", unit: "bytes", samples: [stats.logBytesPerEvent]))
        let snapshotBytesPerEvent = Double(stats.snapshotBytes) / Double(max(stats.events, 1))
        report(
            size,
            Figure(
                name: String(format: "snapshot bytes per event (%.0f%% of the file)", 100 * snapshotBytesPerEvent / stats.fileBytesPerEvent), unit: "bytes",
                samples: [snapshotBytesPerEvent], target: "<= a quarter of the file"))
        report(size, Figure(name: "payload bytes per event (uncompressed)", unit: "bytes", samples: [stats.payloadBytesPerEvent]))
        report(size, Figure(name: "compression ratio of sealed blocks", unit: "x", samples: [stats.compressionRatio]))

        // The Swift LZ4 codec (Apple platforms) against liblz4 on this ledger's own blocks.
        let codec = try codecComparison(ledger, runs: runs)
        report(
            size,
            Figure(
                name: "LZ4 decompression, Swift codec (vs liblz4)", unit: "MB/s", samples: codec.swiftMBs, ceiling: codec.liblz4MBs, target: ">= 0.5x liblz4",
                ceilingName: "liblz4"))
        report(size, Figure(name: "LZ4 compressed bytes, Swift codec / liblz4 HC", unit: "x", samples: [codec.sizeRatio], target: "about 1"))

        // 8. Peak memory of a full replay, in its own process.
        let replayPeaks = try (0..<runs).map { _ in try child(["peak-replay", ledgerPath]).printed / 1024 }
        report(size, Figure(name: "peak RSS of full replay", unit: "MB", samples: replayPeaks, target: "< 150"))

        // 9. What a support engineer runs: `purchase-ledger replay LEDGER --at SEQ` focused on one
        //    transaction or one user, the CLI's whole process, at random seqs.
        let cli = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("purchase-ledger").path
        guard FileManager.default.isExecutableFile(atPath: cli) else {
            throw BenchError("\(cli) is missing: build it with swift build -c release --product purchase-ledger (Tools/bench.sh does)")
        }
        // A transaction, and its user, that the state at that seq holds: what an engineer looks at.
        var focused: [String: [Double]] = ["--transaction": [], "--user": []]
        for i in 0..<max(20, runs * 10) {
            let seq = Int64.random(in: max(1, stored / 10)...stored, using: &generator)
            let transactions = try ledger.state(atSeq: seq).transactions.values
            guard !transactions.isEmpty else { continue }
            let record = transactions[(i * 7919) % transactions.count]
            focused["--transaction"]!.append(
                try child(["replay", ledgerPath, "--at", String(seq), "--transaction", record.transaction], executable: cli).seconds * 1000)
            if let user = record.user {
                focused["--user"]!.append(try child(["replay", ledgerPath, "--at", String(seq), "--user", user], executable: cli).seconds * 1000)
            }
        }
        for option in ["--transaction", "--user"] {
            report(
                size,
                Figure(name: "replay --at SEQ \(option), whole process (CLI)", unit: "ms", samples: focused[option]!, target: "< 100"))
        }
    }

    // 2. Per-event durable append through the library, against single-row commits.
    if let size = sizes.first {
        for figure in try perEventAppendFigures(workload: "\(workloads)/workload-\(size).jsonl", runs: runs, scratch: scratch) { report(0, figure) }
    }
    if let size = sizes.last {
        report(size, try appendAtScaleFigure(workload: "\(workloads)/workload-\(size).jsonl", runs: runs, scratch: scratch))
    }

    // The JSON file.
    var json =
        "{\n  \"machine\": {\"cores\": \(ProcessInfo.processInfo.activeProcessorCount), \"memoryGB\": \(ProcessInfo.processInfo.physicalMemory / 1_073_741_824)},\n  \"runs\": \(runs),\n  \"figures\": [\n"
    json += figures.map { size, f in
        let s = f.sorted
        var item = "    {\"size\": \(size), \"name\": \"\(f.name)\", \"unit\": \"\(f.unit)\", \"median\": \(f.median), \"min\": \(s.first!), \"max\": \(s.last!), \"samples\": \(s)"
        if let ratio = f.ratio { item += ", \"ratioToRawSQLite\": \(ratio), \"rawCeilingMedian\": \(f.ceiling!.sorted()[f.ceiling!.count / 2])" }
        if !f.target.isEmpty { item += ", \"target\": \"\(f.target)\"" }
        return item + "}"
    }.joined(separator: ",\n")
    json += "\n  ]\n}\n"
    // Its folder made when missing (`bench-results/` of the folder it runs in, by default):
    // a run of many minutes used to end in a crash there, its figures printed but not written.
    let folder = URL(fileURLWithPath: out).deletingLastPathComponent()
    try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    try json.write(toFile: out, atomically: true, encoding: .utf8)
    print("wrote \(out)")
}

/// Per-event durable appends through the library (synchronous FULL, then NORMAL), each run against
/// the same payloads committed one row per transaction by plain SQLite in the same run.
func perEventAppendFigures(workload: String, runs: Int, scratch: String) throws -> [Figure] {
    let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload))))
    var figures: [Figure] = []
    for (durability, count) in [(LedgerConfiguration.Durability.full, 1000), (.normal, 5000)] {
        print("== per-event append, synchronous=\(durability.rawValue), \(count) events, \(runs) runs")
        let events = Array(input.events.prefix(count))
        let payloads = events.map(\.binaryPayload)
        var appends: [Double] = [], raws: [Double] = []
        for _ in 0..<runs {
            let path = "\(scratch)/append.ledger"
            remove(path)
            let ledger = try Ledger(path: path, configuration: configuration(durability: durability))
            let (_, seconds) = try time { for e in events { try ledger.append(e) } }
            appends.append(Double(count) / seconds)
            let raw = RawSQLite(path: "\(scratch)/raw-append.sqlite", synchronous: durability.rawValue)
            let (_, rawSeconds) = time { raw.insert(payloads, transactionPerRow: true) }
            raws.append(Double(count) / rawSeconds)
        }
        figures.append(
            Figure(name: "per-event append (\(durability.rawValue))", unit: "events/s", samples: appends, ceiling: raws, target: ">= 90% of raw"))
    }
    return figures
}

/// Per-event durable appends (FULL) to a ledger that already holds all but the last `count`
/// events of a large workload, then those `count` events one commit each: what an app with a long
/// history pays per event. Against the same payloads committed one row per transaction by plain
/// SQLite in the same run.
func appendAtScaleFigure(workload: String, count: Int = 1000, runs: Int, scratch: String) throws -> Figure {
    let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload)))
    // The byte offset where the last `count` lines begin.
    var split = bytes.count, lines = 0
    while split > 0 {
        if bytes[split - 1] == UInt8(ascii: "\n"), split < bytes.count { lines += 1 }
        if lines == count { break }
        split -= 1
    }
    let head = "\(scratch)/head.jsonl", base = "\(scratch)/at-scale-base.ledger"
    try Data(bytes[..<split]).write(to: URL(fileURLWithPath: head))
    let stored = try importWorkload(head, into: base)
    try Ledger(path: base, configuration: configuration()).checkpoint()
    let events = try JSONLinesInput(bytes: Array(bytes[split...])).events
    print("== per-event append, synchronous=FULL, \(events.count) events after \(stored.lastSeq), \(runs) runs")
    let payloads = events.map(\.binaryPayload)
    var appends: [Double] = [], raws: [Double] = []
    for _ in 0..<runs {
        let path = "\(scratch)/at-scale.ledger"
        for suffix in ["", "-wal", "-shm"] { remove(path + suffix) }
        try FileManager.default.copyItem(atPath: base, toPath: path)
        sync()  // the copy's pages reach the disk now, not in the first checkpoint's fsync
        let ledger = try Ledger(path: path, configuration: configuration(durability: .full))
        _ = ledger.currentState  // loaded at open in an app, not on its first append
        let (_, seconds) = try time { for e in events { try ledger.append(e) } }
        appends.append(Double(events.count) / seconds)
        let raw = RawSQLite(path: "\(scratch)/raw-append.sqlite", synchronous: "FULL")
        let (_, rawSeconds) = time { raw.insert(payloads, transactionPerRow: true) }
        raws.append(Double(events.count) / rawSeconds)
    }
    return Figure(
        name: "per-event append (FULL) at \(stored.lastSeq) events", unit: "events/s", samples: appends, ceiling: raws, target: ">= 90% of raw")
}

// A line at a time, also into a file: a run that stops part way keeps the figures it printed.
setvbuf(stdout, nil, _IOLBF, 0)
let args = Array(CommandLine.arguments.dropFirst())
// `--help` or `-h` anywhere prints the commands (the list at the top of this file) and runs none:
// `fleet --help` used to take `--help` for the workload file and crash.
if args.contains("--help") || args.contains("-h") {
    print(usage)
    exit(0)
}

/// The value after option `name`, nil when the option is absent. An option without its value is
/// a usage error, not an index past the end.
func optionValue(_ name: String) -> String? {
    guard let i = args.firstIndex(of: name) else { return nil }
    guard i + 1 < args.count, !args[i + 1].hasPrefix("--") else {
        FileHandle.standardError.write(Data("ledger-bench: \(name) needs a value\n\(usage)\n".utf8))
        exit(2)
    }
    return args[i + 1]
}

/// Argument `i` of the command line (0 is the command), or a usage error when it is missing.
func argument(_ i: Int) -> String {
    guard i < args.count else {
        FileHandle.standardError.write(Data("ledger-bench \(args.first ?? ""): missing argument \(i)\n\(usage)\n".utf8))
        exit(2)
    }
    return args[i]
}

/// Argument `i`, or nil when the command line ends before it (an optional `[N]`).
func optionalArgument(_ i: Int) -> String? { i < args.count ? args[i] : nil }

/// The options that take a value: what follows one of them is not a positional argument.
let valueOptions: Set<String> = [
    "--runs", "--ledgers", "--binary", "--audit-baseline", "--apple", "--concurrency", "--kills", "--trials", "--inputs", "--workload",
    "--workloads", "--sizes", "--out",
]

/// The command's first argument that is neither an option nor an option's value, wherever it
/// stands (`fleet --ledgers 100 my.jsonl`).
let positional: String? = {
    var i = 1
    while i < args.count {
        if valueOptions.contains(args[i]) {
            i += 2
        } else if args[i].hasPrefix("--") {
            i += 1
        } else {
            return args[i]
        }
    }
    return nil
}()
switch args.first {
case "import-once":
    _ = try importWorkload(argument(1), into: argument(2))
    print(peakRSSKiB())
case "peak-replay":
    var c = configuration()
    c.readOnly = true
    let replayed = try Ledger(path: argument(1), configuration: c).replayFromLog()
    // What the memory is, on stderr (stdout is the figure the benchmark reads): the state and the
    // heap (RssAnon) against pages of the mapped ledger file (RssFile).
    if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) {
        let lines = status.split(separator: "\n").filter { $0.hasPrefix("VmHWM") || $0.hasPrefix("RssAnon") || $0.hasPrefix("RssFile") }
        FileHandle.standardError.write(Data((lines.joined(separator: "; ") + "; \(replayed.transactions.count) transactions\n").utf8))
    }
    print(peakRSSKiB())
case "profile-append":
    // A loop for profilers: per-event appends with synchronous=NORMAL.
    let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: argument(1)))))
    remove(argument(2))
    let ledger = try Ledger(path: argument(2), configuration: configuration(durability: .normal))
    let (_, seconds) = try time { for e in input.events.prefix(optionalArgument(3).flatMap { Int($0) } ?? 5000) { try ledger.append(e) } }
    print(seconds)
case "profile-append-on":
    // `profile-append-on LEDGER TAIL.jsonl`: a loop for profilers: a copy of LEDGER, its state
    // loaded, then TAIL's events appended one commit each (synchronous=NORMAL).
    let copy = argument(1) + ".profile-copy"
    for suffix in ["", "-wal", "-shm"] { remove(copy + suffix) }
    try FileManager.default.copyItem(atPath: argument(1), toPath: copy)
    sync()  // the copy's pages reach the disk now, not in the first checkpoint's fsync
    let ledger = try Ledger(path: copy, configuration: configuration(durability: .normal))
    _ = ledger.currentState
    let tail = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: argument(2))))).events
    let (_, seconds) = try time { for e in tail { try ledger.append(e) } }
    print(String(format: "%d appends in %.3f s: %.0f µs each", tail.count, seconds, seconds * 1e6 / Double(tail.count)))
case "profile-state":
    // Where the time of a state at seq goes: a state exactly at a snapshot (decode only), the log
    // tail after it, and a full replay.
    var c = configuration()
    c.readOnly = true
    let ledger = try Ledger(path: argument(1), configuration: c)
    let last = try ledger.lastSeq()
    let rounds = optionalArgument(2).flatMap { Int($0) } ?? 5
    for _ in 0..<rounds {
        let interval = Int64(LedgerConfiguration().snapshotInterval)
        let atSnapshot = (last / interval) * interval - interval
        let (_, decode) = try time { try ledger.state(atSeq: atSnapshot) }
        let (_, withTail) = try time { try ledger.state(atSeq: atSnapshot + interval - 1) }
        var random: [Double] = []
        for _ in 0..<30 {
            let seq = Int64.random(in: 1...last)
            random.append(try time { try ledger.state(atSeq: seq) }.1 * 1000)
        }
        random.sort()
        print(String(format: "random seqs: p50 %.1f ms, p90 %.1f ms, max %.1f ms", random[15], random[27], random[29]))
        var slowest: [(Double, Int64)] = []
        for _ in 0..<200 {
            let seq = Int64.random(in: 1...last)
            slowest.append((try time { try ledger.state(atSeq: seq) }.1 * 1000, seq))
        }
        slowest.sort { $0.0 > $1.0 }
        print(
            "200 random seqs, slowest:", slowest.prefix(6).map { String(format: "%.1f ms at %lld", $0.0, $0.1) }.joined(separator: ", "),
            String(format: "; p99 %.1f ms, p50 %.1f ms", slowest[1].0, slowest[100].0))
        let (_, full) = try time { try ledger.replayFromLog() }
        print(String(format: "snapshot %lld: %.1f ms; + an interval of events: %.1f ms; full replay: %.0f ev/s", atSnapshot, decode * 1000, withTail * 1000, Double(last) / full))
    }
case "profile-rebuild":
    // Rebuilds of the projections on one open ledger, as the benchmark times them: the default
    // (only rows that differ are written), then with every row rewritten, alternating.
    let ledger = try Ledger(path: argument(1), configuration: configuration())
    for _ in 0..<(optionalArgument(2).flatMap { Int($0) } ?? 3) {
        let (summary, seconds) = try time { try ledger.rebuildProjections() }
        let (_, full) = try time { try ledger.rebuildProjections(rewritingEveryRow: true) }
        print(String(format: "rebuild %.2f s (%d rows written), every row rewritten %.2f s", seconds, summary.rowsWritten, full))
    }
case "profile-replay-loop":
    var c = configuration()
    c.readOnly = true
    let ledger = try Ledger(path: argument(1), configuration: c)
    var rates: [Double] = []
    let last = Double(try ledger.lastSeq())
    for _ in 0..<(optionalArgument(2).flatMap { Int($0) } ?? 3) { rates.append(last / (try time { try ledger.replayFromLog() }.1)) }
    print(rates.map { String(format: "%.0f", $0) }.joined(separator: " "), String(format: "median %.0f", rates.sorted()[rates.count / 2]))
case "profile-snapshot-loop":
    var c = configuration()
    c.readOnly = true
    let ledger = try Ledger(path: argument(1), configuration: c)
    for _ in 0..<(optionalArgument(3).flatMap { Int($0) } ?? 10) { _ = try ledger.state(atSeq: optionalArgument(2).flatMap { Int64($0) } ?? 950_000) }
case "profile-split":
    // Decode alone (into memory), then reduce alone, to see which side a replay waits on.
    var c = configuration()
    c.readOnly = true
    let ledger = try Ledger(path: argument(1), configuration: c)
    for _ in 0..<3 {
        var events: [RecordedEvent] = []
        events.reserveCapacity(Int(try ledger.lastSeq()))
        let (_, decode) = try time {
            try ledger.forEachEvent {
                events.append($0); return true
            }
        }
        let (_, reduce) = time {
            var state = LedgerState()
            for e in events { _ = try? Reducer.reduce(&state, e.event) }
            return state.transactions.count
        }
        let (_, full) = try time { try ledger.replayFromLog() }
        print(String(format: "decode %.0f ev/s, reduce %.0f ev/s, both %.0f ev/s", Double(events.count) / decode, Double(events.count) / reduce, Double(events.count) / full))
    }
case "profile-cold-loop":
    // Cold states at a seq: a new Ledger (so an empty page cache) for every call.
    var c = configuration()
    c.readOnly = true
    var times: [String] = []
    for _ in 0..<(optionalArgument(3).flatMap { Int($0) } ?? 10) {
        let (ledger, open) = try time { try Ledger(path: argument(1), configuration: c) }
        let state = try time { try ledger.state(atSeq: optionalArgument(2).flatMap { Int64($0) } ?? 950_000) }.1
        times.append(String(format: "open %.1f + state %.1f ms", open * 1000, state * 1000))
    }
    print(times.joined(separator: "\n"))
case "profile-shipment":
    // What a ship reads on the client: every ledger of a folder opened read-only, read whole,
    // chain-checked and replayed into projection rows (no server). `profile-shipment DIR [N]`.
    var c = configuration()
    c.readOnly = true
    let folder = argument(1)
    let names = try FileManager.default.contentsOfDirectory(atPath: folder).filter { $0.hasSuffix(".ledger") }.sorted()
    let paths = names.prefix(optionalArgument(2).flatMap { Int($0) } ?? names.count).map { folder + "/" + $0 }
    var opening = 0.0, reading = 0.0, events = 0
    for path in paths {
        let (ledger, open) = try time { try Ledger(path: path, configuration: c) }
        let (shipment, read) = try time { try ledger.shipment(after: 0, link: nil) }
        opening += open
        reading += read
        events += shipment.events.count
    }
    print(String(format: "%d ledgers, %d events: open %.2f s, read+check+replay %.2f s (%.0f ev/s)", paths.count, events, opening, reading, Double(events) / (opening + reading)))
case "append":
    // `append WORKLOAD [RUNS]`: only the per-event durable append figures of `run`.
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-append-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    for figure in try perEventAppendFigures(workload: argument(1), runs: optionalArgument(2).flatMap { Int($0) } ?? 3, scratch: scratch) {
        print(figure.summary)
    }
case "append-at-scale":
    // `append-at-scale WORKLOAD [RUNS]`: only the per-event append figure at the workload's size.
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-append-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    print(try appendAtScaleFigure(workload: argument(1), runs: optionalArgument(2).flatMap { Int($0) } ?? 3, scratch: scratch).summary)
case "crash-writer":
    try crashWriter(ledgerPath: argument(1), ackPath: argument(2), mode: argument(3))
case "crash", "flips", "fuzz":
    func value(_ name: String, _ fallback: Int) -> Int {
        guard let text = optionValue(name) else { return fallback }
        guard let v = Int(text) else {
            FileHandle.standardError.write(Data("ledger-bench: \(name) needs a number, not \(text)\n".utf8))
            exit(2)
        }
        return v
    }
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-reliability-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    // Removed before `exit`, which returns to no `defer`: every run used to leave its scratch
    // ledgers (up to 12 MB) in the temporary directory.
    let result = Result { () throws -> Bool in
        switch argument(0) {
        case "crash": return try crashHarness(kills: value("--kills", 200), scratch: scratch)
        case "flips":
            let workload = optionValue("--workload") ?? "bench-results/workload-100000.jsonl"
            return try flipHarness(trials: value("--trials", 500), workload: workload, scratch: scratch)
        default: return try fuzzHarness(inputs: value("--inputs", 1_000_000))
        }
    }
    try? FileManager.default.removeItem(atPath: scratch)
    exit(try result.get() ? 0 : 1)
case "fleet":
    let runs = optionValue("--runs").map { Int($0) ?? 3 } ?? 3
    let ledgers = optionValue("--ledgers").map { Int($0) ?? 1000 } ?? 1000
    // The CLI beside this tool, for the report figures (`--binary PATH` for another).
    let binary = optionValue("--binary") ?? besideThisTool("purchase-ledger")
    try fleetBenchmark(
        workload: positional ?? "bench-results/workload-1000000.jsonl", ledgers: ledgers, runs: runs, tls: args.contains("--tls"),
        binary: FileManager.default.isExecutableFile(atPath: binary) ? binary : nil,
        auditBaseline: optionValue("--audit-baseline"))
case "ingest":
    try ingestBenchmark(
        workload: positional ?? "bench-results/workload-1000000.jsonl",
        ledgers: optionValue("--ledgers").map { Int($0) ?? 1000 } ?? 1000,
        runs: optionValue("--runs").map { Int($0) ?? 3 } ?? 3,
        concurrency: optionValue("--concurrency").map { Int($0) ?? 8 } ?? 8,
        binary: optionValue("--binary") ?? besideThisTool("purchase-ledger"))
case "fleet-apple":
    try fleetAppleBenchmark(
        workload: positional ?? "bench-results/workload-1000000.jsonl",
        ledgers: optionValue("--ledgers").map { Int($0) ?? 5000 } ?? 5000,
        apple: optionValue("--apple").map { Int($0) ?? 100_000 } ?? 100_000,
        runs: optionValue("--runs").map { Int($0) ?? 3 } ?? 3,
        binary: optionValue("--binary") ?? besideThisTool("purchase-ledger"))
case "fleet-report":
    guard args.count > 1 else {
        print("usage: ledger-bench fleet-report URL [--binary PATH] [--runs N]")
        exit(2)
    }
    let runs = optionValue("--runs").map { Int($0) ?? 5 } ?? 5
    try fleetReportFigures(url: argument(1), binary: optionValue("--binary") ?? besideThisTool("purchase-ledger"), runs: runs)
case "timed-run":
    // Internal to fleet-report: runs the rest of the line, prints its wall seconds and peak KiB.
    let run = try timedRun(Array(args.dropFirst()))
    print("\(run.seconds) \(run.peakKiB)")
case "fleet-crash":
    let kills = optionValue("--kills").map { Int($0) ?? 50 } ?? 50
    let workload = optionValue("--workload") ?? "bench-results/workload-100000.jsonl"
    let binary = optionValue("--binary") ?? ".build/release/purchase-ledger"
    exit(try fleetCrash(workload: workload, kills: kills, binary: binary) ? 0 : 1)
case "import-floor":
    guard args.count > 1 else {
        print("usage: ledger-bench import-floor WORKLOAD [RUNS]")
        exit(2)
    }
    try importFloor(workload: argument(1), runs: args.count > 2 ? max(1, optionalArgument(2).flatMap { Int($0) } ?? 3) : 3)
case "signed":
    guard args.count > 1 else {
        print("usage: ledger-bench signed WORKLOAD [--runs N] [--out SIGNED.jsonl]")
        exit(2)
    }
    try signedFigures(
        workload: argument(1), runs: optionValue("--runs").map { Int($0) ?? 3 } ?? 3,
        out: optionValue("--out"))
case "codec":
    var c = configuration()
    c.readOnly = true
    let result = try codecComparison(try Ledger(path: argument(1), configuration: c), runs: optionalArgument(2).flatMap { Int($0) } ?? 5)
    print(result.summary)
case "run":
    func option(_ name: String, _ fallback: String) -> String { optionValue(name) ?? fallback }
    try run(
        workloads: option("--workloads", "bench-results"),
        sizes: option("--sizes", "100000,1000000").split(separator: ",").compactMap { Int($0) },
        runs: Int(option("--runs", "3")) ?? 3,
        out: option("--out", "bench-results/results.json"))
default:
    print(usage)
    exit(2)
}

/// Decompression speed of both LZ4 codecs on the same blocks (MB/s of output, each run timing
/// both, interleaved), and the compressed size each gives the same raw bytes.
struct CodecComparison {
    var swiftMBs: [Double] = []
    var liblz4MBs: [Double] = []
    var swiftBytes = 0
    var liblz4Bytes = 0
    var rawBytes = 0
    var blocks = 0
    var sizeRatio: Double { liblz4Bytes == 0 ? 0 : Double(swiftBytes) / Double(liblz4Bytes) }

    var summary: String {
        func median(_ v: [Double]) -> Double { let s = v.sorted(); return s.isEmpty ? 0 : s[s.count / 2] }
        let ratios = zip(swiftMBs, liblz4MBs).map { $0 / $1 }
        return String(
            format:
                "%d blocks, %.1f MB raw\ndecompression: Swift median %.0f MB/s (min %.0f, max %.0f), liblz4 median %.0f MB/s (min %.0f, max %.0f); Swift/liblz4 %.2fx (per-run median)\ncompression: Swift %d bytes, liblz4 HC %d bytes (%.3fx); ratio raw/compressed %.2f vs %.2f",
            blocks, Double(rawBytes) / 1e6, median(swiftMBs), swiftMBs.min() ?? 0, swiftMBs.max() ?? 0,
            median(liblz4MBs), liblz4MBs.min() ?? 0, liblz4MBs.max() ?? 0, median(ratios),
            swiftBytes, liblz4Bytes, sizeRatio, Double(rawBytes) / Double(max(swiftBytes, 1)), Double(rawBytes) / Double(max(liblz4Bytes, 1)))
    }
}

func codecComparison(_ ledger: Ledger, runs: Int) throws -> CodecComparison {
    let samples = try CodecBenchmark.samples(of: ledger)
    var result = CodecComparison()
    result.blocks = samples.count
    result.rawBytes = samples.reduce(0) { $0 + $1.raw.count }
    guard CodecBenchmark.hasLiblz4, !samples.isEmpty else { return result }
    // Enough repetitions per timing for about 0.2 s of work.
    let (_, once) = time { _ = CodecBenchmark.decompressAll(samples, swift: false) }
    let repeats = max(1, Int(0.2 / max(once, 1e-6)))
    for _ in 0..<max(1, runs) {
        for swift in [false, true] {
            let (ok, seconds) = time { (0..<repeats).allSatisfy { _ in CodecBenchmark.decompressAll(samples, swift: swift) } }
            precondition(ok, "a block did not decompress")
            let mbs = Double(result.rawBytes * repeats) / 1e6 / seconds
            if swift { result.swiftMBs.append(mbs) } else { result.liblz4MBs.append(mbs) }
        }
    }
    result.swiftBytes = CodecBenchmark.compressAll(samples, swift: true) ?? 0
    result.liblz4Bytes = CodecBenchmark.compressAll(samples, swift: false) ?? 0
    return result
}
