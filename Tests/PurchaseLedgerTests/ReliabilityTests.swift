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
        let giant = String(repeating: "x", count: 1_000_000)
        try ledger.append(try JSONLines.decode(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"\#(giant)"}"#))
        try ledger.append(E.product("p1", contents: [("c1", "1.0")]))
        try ledger.append(contentsOf: [E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.done("d1"),
                                       E.copied("d1", to: "../../../etc/passwd; DROP TABLE events"), E.finished("t1")])
        #expect(try ledger.downloads(transaction: "t1").first?.destination == "../../../etc/passwd; DROP TABLE events",
                "a destination is data: stored as given, never used as a path")
        let many = (0..<5000).flatMap { [E.queued("b\($0)"), E.purchased("b\($0)")] }
        let result = try ledger.append(contentsOf: many)
        #expect(result.events.count == 10_000)
        #expect(try ledger.verify().isValid)
        let first = try #require(try ledger.events(from: 1, limit: 1).first)
        guard case .restoreStarted(let user) = first.event.body else { Issue.record("not the giant line"); return }
        #expect(user?.count == 1_000_000)
    }

    /// The harness binary, built by Tools/test.sh next to purchase-ledger.
    static let bench = packageRoot.appending(path: ".build/debug/ledger-bench").path

    func harness(_ arguments: [String]) throws -> CLIResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.bench)
        process.arguments = arguments
        process.currentDirectoryURL = packageRoot
        let out = Pipe()
        process.standardOutput = out
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = out.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return CLIResult(status: process.terminationStatus, stdout: String(decoding: data, as: UTF8.self), stderr: "")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench), "needs ledger-bench (Tools/test.sh builds it)"))
    func killedWritersLoseNothing() throws {
        let r = try harness(["crash", "--kills", "6"])
        #expect(r.status == 0, "\(r.stdout)")
        #expect(r.stdout.contains("lost: 0, partial batches: 0, ledgers failing verify: 0"), "\(r.stdout)")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench) && Workload.available, "needs ledger-bench and the workload generator"))
    func everyFlippedBitInEventDataIsDetected() throws {
        let workload = try Workload.file(events: 100_000)
        let r = try harness(["flips", "--trials", "12", "--workload", workload])
        #expect(r.status == 0, "\(r.stdout)")
        #expect(r.stdout.contains("missed: 0"))
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: ReliabilityTests.bench), "needs ledger-bench"))
    func fuzzedInputsNeverCrash() throws {
        let r = try harness(["fuzz", "--inputs", "30000"])
        #expect(r.status == 0)
        #expect(r.stdout.contains("crashes: 0"))
    }
}
