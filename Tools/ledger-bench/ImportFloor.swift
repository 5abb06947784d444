import Foundation
import GRDBSQLite
import PurchaseLedger
import PurchaseLedgerTesting

// `ledger-bench import-floor WORKLOAD [RUNS]`: how much of the CPU time an import may spend to
// reach a ratio to the raw SQLite ceiling (0.6x by default) is taken by work no import of this
// design can skip, each part timed alone on one thread after a real import of the workload:
//   - LZ4 in high-compression mode over every sealed block and snapshot page of the imported
//     ledger (the fast mode is timed too, with the file size it would give),
//   - SHA-256 over every event's canonical frame and a 32-byte link, at the machine's bare
//     hashing speed (one pass over all of it; the ledger's own chain code is timed too),
//   - SQLite writing the imported ledger's rows into a new file: every table and index, rows
//     bound through the C API from memory, one transaction, WAL, synchronous=FULL.
// What is left of the budget is what reading, parsing, the rules and encoding may cost.

/// CPU time (user and system) of the calling thread, in seconds.
func threadCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(1), &usage)  // RUSAGE_THREAD
    func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
    return seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// `body`'s result, and the CPU seconds the calling thread spent in it.
func cpuTime<T>(_ body: () throws -> T) rethrows -> (T, Double) {
    let start = threadCPUSeconds()
    let value = try body()
    return (value, threadCPUSeconds() - start)
}

/// Every row of a SQLite file, held in memory with its schema, to be written into a new file.
struct TableDump {
    enum Value {
        case null
        case integer(Int64)
        case real(Double)
        case text([UInt8])
        case blob([UInt8])
    }
    var tables: [(name: String, sql: String, columns: Int, rows: [[Value]])] = []
    var indexes: [String] = []
    var bytes = 0

    init(path: String) throws {
        var db: OpaquePointer?
        guard sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, nil) == SQLITE_OK else { throw BenchError("cannot open \(path)") }
        defer { sqlite3_close(db) }
        func query(_ sql: String, _ row: (OpaquePointer) -> Void) throws {
            var statement: OpaquePointer?
            guard sqlite3_prepare_v2(db, sql, -1, &statement, nil) == SQLITE_OK else {
                throw BenchError("\(sql): \(String(cString: sqlite3_errmsg(db)))")
            }
            defer { sqlite3_finalize(statement) }
            while sqlite3_step(statement) == SQLITE_ROW { row(statement!) }
        }
        func text(_ s: OpaquePointer, _ i: Int32) -> String { String(cString: sqlite3_column_text(s, i)) }
        var schema: [(String, String)] = []
        try query("SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid") {
            schema.append((text($0, 0), text($0, 1)))
        }
        try query("SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL") { indexes.append(text($0, 0)) }
        for (name, sql) in schema {
            var rows: [[Value]] = []
            var columns = 0
            // In the order of the primary key (SQLite's natural order for a table), as a bulk
            // write inserts them.
            try query("SELECT * FROM \"\(name)\"") { s in
                columns = Int(sqlite3_column_count(s))
                rows.append(
                    (0..<Int32(columns)).map { i in
                        switch sqlite3_column_type(s, i) {
                        case SQLITE_INTEGER: return .integer(sqlite3_column_int64(s, i))
                        case SQLITE_FLOAT: return .real(sqlite3_column_double(s, i))
                        case SQLITE_TEXT:
                            let n = Int(sqlite3_column_bytes(s, i))
                            bytes += n
                            return .text(n == 0 ? [] : Array(UnsafeBufferPointer(start: sqlite3_column_text(s, i), count: n)))
                        case SQLITE_BLOB:
                            let n = Int(sqlite3_column_bytes(s, i))
                            bytes += n
                            return .blob(n == 0 ? [] : Array(UnsafeRawBufferPointer(start: sqlite3_column_blob(s, i), count: n)))
                        default: return .null
                        }
                    })
            }
            tables.append((name, sql, columns, rows))
        }
    }

    var rowCount: Int { tables.reduce(0) { $0 + $1.rows.count } }

    /// Creates the tables in a new file at `path`, then, timed: inserts every row, builds the
    /// indexes and commits (WAL, synchronous=FULL). The CPU seconds of that, and its wall time.
    func write(to path: String) throws -> (cpu: Double, wall: Double) {
        remove(path)
        var db: OpaquePointer?
        guard sqlite3_open(path, &db) == SQLITE_OK else { throw BenchError("cannot create \(path)") }
        defer { sqlite3_close(db) }
        func exec(_ sql: String) throws {
            guard sqlite3_exec(db, sql, nil, nil, nil) == SQLITE_OK else { throw BenchError("\(sql): \(String(cString: sqlite3_errmsg(db)))") }
        }
        try exec("PRAGMA journal_mode = WAL")
        try exec("PRAGMA synchronous = FULL")
        for table in tables { try exec(table.sql) }
        let start = now()
        let (_, cpu) = try cpuTime { () throws in
            try exec("BEGIN")
            for table in tables where !table.rows.isEmpty {
                var statement: OpaquePointer?
                let marks = Array(repeating: "?", count: table.columns).joined(separator: ", ")
                guard sqlite3_prepare_v2(db, "INSERT INTO \"\(table.name)\" VALUES (\(marks))", -1, &statement, nil) == SQLITE_OK else {
                    throw BenchError("insert into \(table.name): \(String(cString: sqlite3_errmsg(db)))")
                }
                defer { sqlite3_finalize(statement) }
                for row in table.rows {
                    for (i, value) in row.enumerated() {
                        let index = Int32(i + 1)
                        switch value {
                        case .null: sqlite3_bind_null(statement, index)
                        case .integer(let v): sqlite3_bind_int64(statement, index, v)
                        case .real(let v): sqlite3_bind_double(statement, index, v)
                        case .text(let v): v.withUnsafeBytes { _ = sqlite3_bind_text(statement, index, $0.baseAddress, Int32($0.count), nil) }
                        case .blob(let v): v.withUnsafeBytes { _ = sqlite3_bind_blob(statement, index, $0.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32($0.count), nil) }
                        }
                    }
                    guard sqlite3_step(statement) == SQLITE_DONE else {
                        throw BenchError("insert into \(table.name): \(String(cString: sqlite3_errmsg(db)))")
                    }
                    sqlite3_reset(statement)
                }
            }
            for index in indexes { try exec(index) }
            try exec("COMMIT")
        }
        return (cpu, now() - start)
    }
}

func importFloor(workload: String, runs: Int, target: Double = 0.6) throws {
    let scratch = FileManager.default.temporaryDirectory.appending(path: "ledger-bench-floor-\(getpid())").path
    try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: scratch) }
    let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: workload))))
    let payloads = input.events.map(\.binaryPayload)
    let ledgerPath = "\(scratch)/ledger.ledger"
    let cores = ProcessInfo.processInfo.activeProcessorCount
    print("== what an import at \(target)x of raw SQLite may spend, and what it cannot avoid: \(workload), \(runs) runs, \(cores) cores")

    var imports: [Double] = [], ceilings: [Double] = [], batchedCeilings: [Double] = []
    for _ in 0..<runs {
        let (_, seconds) = try child(["import-once", workload, ledgerPath])
        imports.append(seconds)
        let raw = RawSQLite(path: "\(scratch)/raw.sqlite", synchronous: "FULL")
        let (_, rawSeconds) = time { raw.insert(payloads, transactionPerRow: false) }
        ceilings.append(rawSeconds)
        let batched = RawSQLite(path: "\(scratch)/raw-batched.sqlite", synchronous: "FULL")
        let (_, batchedSeconds) = time { batched.insert(payloads, rowsPerTransaction: 1000) }
        batchedCeilings.append(batchedSeconds)
    }
    var c = LedgerConfiguration()
    c.readOnly = true
    let ledger = try Ledger(path: ledgerPath, configuration: c)
    let events = Int(ledger.currentState.seq)
    let samples = try CodecBenchmark.samples(of: ledger)
    let frames = try CodecBenchmark.canonicalFrames(of: ledger)
    let dump = try TableDump(path: ledgerPath)
    let fileBytes = ["", "-wal"].reduce(0) { total, suffix in
        total + ((try? FileManager.default.attributesOfItem(atPath: ledgerPath + suffix)[.size] as? Int) ?? 0)
    }

    // The bytes the chain hashes, end to end: each frame after the link before it.
    var chained: [UInt8] = []
    chained.reserveCapacity(frames.reduce(0) { $0 + $1.count + 32 })
    for frame in frames { chained += repeatElement(0, count: 32) + frame }
    var hc: [Double] = [], fast: [Double] = [], sha: [Double] = [], bareSHA: [Double] = [], sqlite: [Double] = [], sqliteWall: [Double] = []
    var hcBytes = 0, fastBytes = 0
    for _ in 0..<runs {
        let (h, hcSeconds) = cpuTime { CodecBenchmark.compressAll(samples, swift: false) }
        let (f, fastSeconds) = cpuTime { CodecBenchmark.compressAllFast(samples) }
        guard let h, let f else { throw BenchError("import-floor needs liblz4 (Linux)") }
        (hcBytes, fastBytes) = (h, f)
        hc.append(hcSeconds)
        fast.append(fastSeconds)
        let (_, shaSeconds) = cpuTime { CodecBenchmark.chain(frames) }
        sha.append(shaSeconds)
        let (_, bareSeconds) = cpuTime { CodecBenchmark.sha256(chained) }
        bareSHA.append(bareSeconds)
        let written = try dump.write(to: "\(scratch)/rows.sqlite")
        sqlite.append(written.cpu)
        sqliteWall.append(written.wall)
    }
    func median(_ v: [Double]) -> Double { v.sorted()[v.count / 2] }
    func range(_ v: [Double]) -> String { String(format: "median %.3f s (min %.3f, max %.3f)", median(v), v.min()!, v.max()!) }
    let ceiling = median(ceilings)
    let wallBudget = ceiling / target
    let cpuBudget = wallBudget * Double(cores)
    let floor = median(hc) + median(bareSHA) + median(sqlite)
    let left = cpuBudget - floor
    print("  import, whole process: \(range(imports)) for \(input.events.count) input events, \(events) stored")
    print("  raw SQLite ceiling (same runs): \(range(ceilings)); import ratio \(String(format: "%.2f", ceiling / median(imports)))x")
    print(
        "  raw SQLite committing every 1,000 rows (same runs): \(range(batchedCeilings)); import ratio "
            + String(format: "%.2f", median(batchedCeilings) / median(imports)) + "x")
    print(String(format: "  budget at %.1fx: %.3f s of wall time, %.3f CPU-seconds on %d cores", target, wallBudget, cpuBudget, cores))
    print(
        String(
            format: "  LZ4 high-compression, %d blocks and pages (%.1f MB raw -> %.1f MB): CPU %@", samples.count,
            Double(samples.reduce(0) { $0 + $1.raw.count }) / 1e6, Double(hcBytes) / 1e6, range(hc)))
    print(
        String(
            format: "  LZ4 fast mode instead: CPU %@, %.1f MB: the file would be %.1f bytes/event, not %.1f", range(fast),
            Double(fastBytes) / 1e6, Double(fileBytes + fastBytes - hcBytes) / Double(events), Double(fileBytes) / Double(events)))
    print(
        String(
            format: "  SHA-256 over %d frames and links (%.1f MB) in one pass: CPU %@; the ledger's chain code: %@", frames.count,
            Double(chained.count) / 1e6, range(bareSHA), range(sha)))
    print(
        String(
            format: "  SQLite writing the ledger's %d rows (%.1f MB of values) and %d indexes: CPU %@, wall median %.3f s",
            dump.rowCount, Double(dump.bytes) / 1e6, dump.indexes.count, range(sqlite), median(sqliteWall)))
    print(
        String(
            format: "  unavoidable: %.3f CPU-seconds, %.0f%% of the budget; left for reading, parsing, the rules and encoding: %.3f s (%.2f us/event)",
            floor, 100 * floor / cpuBudget, left, 1e6 * left / Double(max(events, 1))))
}
