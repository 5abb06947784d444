import Foundation
import Testing
@testable import PurchaseLedger

/// Hostile input, and short runs of the crash, corruption and fuzz harnesses of `ledger-bench`
/// (Tools/reliability.sh runs the long ones).
@Suite(.serialized) struct ReliabilityTests {
    func malformed(_ line: String, sourceLocation: SourceLocation = #_sourceLocation) {
        do {
            _ = try JSONLinesInput(bytes: Array(line.utf8))
            Issue.record("accepted: \(line.prefix(80))", sourceLocation: sourceLocation)
        } catch {
            #expect(error.code == .malformedInput, sourceLocation: sourceLocation)
            #expect(error.line == 1, sourceLocation: sourceLocation)
        }
    }

    @Test func hostileLinesAreRefusedCleanly() throws {
        malformed(String(repeating: "[", count: 100_000))
        malformed(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"\#(String(repeating: "{", count: 10))"#)
        malformed(#"{"type":"paymentQueued","at":"2024-03-01T00:00:00Z","transaction":"t","product":"p","quantity":1e400}"#)
        malformed(#"{"type":"downloadProgressed","at":"2024-03-01T00:00:00Z","download":"d","progress":NaN}"#)
        malformed(#"{"type":"downloadProgressed","at":"2024-03-01T00:00:00Z","download":"d","progress":0.5,"bytesWritten":99999999999999999999}"#)
        malformed(#"{"type":"contentRegistered","at":"2024-03-01T00:00:00Z","url":"u","download":"d","contentLength":-5}"#)
        malformed(#"{"type":"restoreStarted","at":"9999-12-31T23:59:59Z"}"#)
        malformed(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00+02:00"}"#)
        malformed(#"{"type":"paymentQueued","at":"2024-03-01T00:00:00Z","transaction":"t","product":"p","quantity":11}"#)
        malformed(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"a\u0000b"}"#)
        var invalidUTF8 = Array(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"x"#.utf8)
        invalidUTF8 += [0xC3, 0x28] + Array("\"}".utf8)
        #expect(throws: LedgerError.self) { _ = try JSONLinesInput(bytes: invalidUTF8) }
    }

    @Test func giantLinesPathLikeDestinationsAndTenThousandEvents() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("big.ledger"), configuration: testConfiguration(blockSize: 1024, snapshotInterval: 0))
        // Ids up to 1,024 bytes, free text up to 4,096: one byte more is refused with the field,
        // through JSON and through the library alike, and nothing is written.
        let longest = String(repeating: "x", count: InputLimits.idBytes)
        try ledger.append(try JSONLines.decode(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"\#(longest)"}"#))
        for giant in [String(repeating: "x", count: InputLimits.idBytes + 1), String(repeating: "x", count: 1_000_000)] {
            let line = #"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"\#(giant)"}"#
            #expect(throws: LedgerError.self) { try JSONLines.decode(line) }
            let refused = #expect(throws: LedgerError.self) {
                try ledger.append(Event(at: Timestamp.parse("2024-03-01T00:00:00Z"), .restoreStarted(user: giant)))
            }
            // One event names no position; in a batch, its index (the CLI names its input line).
            #expect(refused?.description == "malformed: field `user` is \(giant.utf8.count) bytes; at most 1024 are allowed (an id, docs/json.md)")
            let inBatch = #expect(throws: LedgerError.self) {
                try ledger.append(contentsOf: [E.product("p-batch"), Event(at: E.at(2), .restoreStarted(user: giant))])
            }
            #expect(
                inBatch?.batchIndex == 1 && inBatch?.line == nil && inBatch?.description.hasPrefix("batch[1]: malformed") == true,
                "\(String(describing: inBatch)) \(String(describing: inBatch?.batchIndex)) \(String(describing: inBatch?.line))")
        }
        #expect(try ledger.lastSeq() == 1)
        let text = String(repeating: "é", count: InputLimits.textBytes / 2)
        let message = #"{"type":"restoreFailed","at":"2024-03-01T00:00:00Z","error":{"domain":"d","code":1,"message":"\#(text)"}}"#
        try ledger.append(try JSONLines.decode(message))
        let tooLong = try #require(#expect(throws: LedgerError.self) { try JSONLines.decode(message.replacingOccurrences(of: #""d""#, with: "\"d\(text)\"")) })
        #expect(tooLong.message.contains("field `error.domain` is 4097 bytes; at most 4096"), "\(tooLong)")
        // A line over 1 MiB is refused before it is all read in, with its line number.
        let huge = "\n" + #"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":""# + String(repeating: "y", count: 2 << 20) + "\"}\n"
        let lineError = try #require(#expect(throws: LedgerError.self) { _ = try JSONLinesInput(bytes: Array(huge.utf8)) })
        #expect(lineError.line == 2 && lineError.message.contains("longer than 1048576 bytes"), "\(lineError)")
        try ledger.append(E.product("p1", contents: [("c1", "1.0")]))
        try ledger.append(contentsOf: [
            E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.done("d1"),
            E.copied("d1", to: "../../../etc/passwd; DROP TABLE events"), E.finished("t1"),
        ])
        #expect(
            try ledger.downloads(transaction: "t1").first?.destination == "../../../etc/passwd; DROP TABLE events",
            "a destination is data: stored as given, never used as a path")
        let many = (0..<5000).flatMap { [E.queued("b\($0)"), E.purchased("b\($0)")] }
        let result = try ledger.append(contentsOf: many)
        #expect(result.events.count == 10_000)
        let report = try ledger.verify()
        #expect(report.isValid, "\(report.problems.prefix(3))")
        let first = try #require(try ledger.events(from: 1, limit: 1).first)
        guard case .restoreStarted(let user) = first.event.body else { Issue.record("not the giant line"); return }
        #expect(user?.count == InputLimits.idBytes)
    }

    /// The harness binary, built by Tools/test.sh next to purchase-ledger.
    static let bench = builtProduct("ledger-bench", override: "LEDGER_BENCH_BIN")

    func harness(_ arguments: [String]) throws -> CLIResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.bench)
        process.arguments = arguments
        process.currentDirectoryURL = packageRoot
        let out = Pipe()
        process.standardOutput = out
        // Its stderr goes to a file (two pipes could fill while one is read): a failure shows why.
        let errPath = FileManager.default.temporaryDirectory.appending(path: "ledger-bench-stderr-\(UUID().uuidString)").path
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        defer { try? FileManager.default.removeItem(atPath: errPath) }
        process.standardError = FileHandle(forWritingAtPath: errPath)
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let stderr = (try? String(contentsOfFile: errPath, encoding: .utf8)) ?? ""
        // A signal (a trap is SIGILL, 4) is not an exit status: say which.
        let status = process.terminationReason == .uncaughtSignal ? 128 + process.terminationStatus : process.terminationStatus
        return CLIResult(status: status, stdout: String(decoding: data, as: UTF8.self), stderr: stderr)
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench), "needs ledger-bench (Tools/test.sh builds it)"))
    func killedWritersLoseNothing() throws {
        let r = try harness(["crash", "--kills", "8"])  // round 7 imports into an empty ledger
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        #expect(r.stdout.contains("lost: 0, partial batches: 0, ledgers failing verify: 0"), "\(r.stdout)\n\(r.stderr)")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench) && Workload.available, "needs ledger-bench and the workload generator"))
    func everyFlippedBitInEventDataIsDetected() throws {
        let workload = try Workload.file(events: 100_000)
        let r = try harness(["flips", "--trials", "12", "--workload", workload])
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        #expect(r.stdout.contains("missed: 0"))
        #expect(r.stdout.contains("flips under a signed checkpoint") && !r.stdout.contains("missed: 1"), "\(r.stdout)")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench), "needs ledger-bench"))
    func fuzzedInputsNeverCrash() throws {
        let r = try harness(["fuzz", "--inputs", "30000"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("crashes: 0"))
    }
}

/// Two `purchase-ledger append` processes writing to one file at once, and this process reading.
@Suite(.serialized) struct MultiProcessTests {
    /// In one read transaction: where the log ends, and where the projection rows put it (the
    /// product's event, then two events per transaction row), or -1 when the projections are not
    /// marked in step with the log.
    static func positions(_ reader: DatabaseQueue) throws -> (Int64, Int64) {
        try reader.read { db in
            let logEnd =
                try Int64.fetchOne(db, sql: "SELECT max((SELECT coalesce(max(seq), 0) FROM events), (SELECT coalesce(max(last_seq), 0) FROM event_blocks))") ?? 0
            let marker = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'projection_seq'")
            let rows = try Int64.fetchOne(db, sql: "SELECT count(*) FROM transactions") ?? 0
            return (logEnd, marker == Projector.inStepWithTheLog ? 1 + 2 * rows : -1)
        }
    }

    @Test func twoWritingProcessesAndAReader() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("shared.ledger")
        try cli(
            ["append", path],
            stdin: #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"p","kind":"consumable","price":"0.99","currency":"USD","downloadable":false}"#)
        var files: [String] = []
        for writer in ["a", "b"] {
            for round in 0..<6 {
                let lines = (0..<40).flatMap { i -> [String] in
                    let t = "\(writer)\(round)-\(i)"
                    return [
                        #"{"type":"paymentQueued","at":"2024-03-01T00:00:01Z","transaction":"\#(t)","product":"p"}"#,
                        #"{"type":"transactionPurchased","at":"2024-03-01T00:00:02Z","transaction":"\#(t)"}"#,
                    ]
                }
                let file = dir.path("\(writer)\(round).jsonl")
                try lines.joined(separator: "\n").write(toFile: file, atomically: true, encoding: .utf8)
                files.append(file)
            }
        }
        let batchFiles = files
        let writers = Task.detached {
            try await withThrowingTaskGroup(of: Int32.self) { group in
                for writer in ["a", "b"] {
                    group.addTask {
                        for file in batchFiles where URL(fileURLWithPath: file).lastPathComponent.hasPrefix(writer) {
                            let r = try cli(["append", path, file])
                            if r.status != 0 { return r.status }
                        }
                        return 0
                    }
                }
                return try await group.reduce(0) { $0 + $1 }
            }
        }
        // The reader: in one read transaction, the log's end and the projection rows always agree.
        let reader = try DatabaseQueue(path: path)
        var reads = 0, halfApplied = 0
        while true {
            let (logEnd, projected) = try MultiProcessTests.positions(reader)
            reads += 1
            if logEnd != projected { halfApplied += 1 }
            if logEnd == 1 + 2 * 40 * 12 || reads > 20_000 { break }
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(try await writers.value == 0, "no writer failed (database is locked never escapes)")
        #expect(halfApplied == 0)
        #expect(reads > 0)
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        let ledger = try Ledger(path: path, configuration: readOnly)
        #expect(try ledger.lastSeq() == 961, "nothing lost or duplicated")
        #expect(try ledger.transactions().count == 480)
        #expect(try ledger.verify().isValid)
    }
}

import GRDB
