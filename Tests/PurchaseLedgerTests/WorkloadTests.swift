import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// The workload generator, in the project (`Tools/gen_workload.py`, a copy of the shared
/// reference generator, so a plain clone runs every suite); 100,000 events.
enum Workload {
    static let generator = packageRoot.appending(path: "Tools/gen_workload.py").path
    /// The SHA-256 of the reference generator the copy was taken from. `Tools/bench.sh` compares
    /// the copy with the reference itself where it is beside the clone, before it measures.
    static let referenceSHA256 = "9dcd2225689d438c218c30dac0384d3c5dbd9f6a25ee09578bc16d3eaee4c126"

    /// Generates the workload once per test run into the temporary directory.
    static func file(events: Int) throws -> String {
        let path = FileManager.default.temporaryDirectory.appending(path: "purchase-ledger-workload-\(events).jsonl").path
        if FileManager.default.fileExists(atPath: path) { return path }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        // Suites run in parallel and may both generate it: each into a file of its own, then
        // renamed into place atomically (the generator is deterministic, so either copy is right).
        let part = path + ".\(UUID().uuidString).part"
        process.arguments = ["python3", generator, "-n", String(events), "-o", part]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw LedgerError.make(.io, "the workload generator failed") }
        guard rename(part, path) == 0 else { throw LedgerError.make(.io, "cannot move the workload into \(path): errno \(errno)") }
        return path
    }

    static var available: Bool { FileManager.default.fileExists(atPath: generator) }
}

@Suite(.serialized, .enabled(if: Workload.available, "needs python3 and Tools/gen_workload.py"))
struct WorkloadTests {
    /// The copy is byte for byte the reference it was taken from, so workloads generated here are
    /// the ones benchmark figures are cross-checked on.
    @Test func theProjectsGeneratorIsTheSharedReference() throws {
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: Workload.generator)))
        #expect(Hex.encode(HashChain.sha256(bytes)) == Workload.referenceSHA256)
    }

    @Test func theSharedWorkloadImportsRebuildsExportsAndVerifies() throws {
        let dir = try TemporaryDirectory()
        let workload = try Workload.file(events: 100_000)
        let path = dir.path("w.ledger")
        // Through the binary, as a support engineer would.
        let imported = try cli(["import", path, workload, "--json"])
        #expect(imported.status == 0, "\(imported.stderr)")
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(imported.stdout.utf8)) as? [String: Any])
        let stored = try #require(summary["stored"] as? Int)
        let ignored = try #require(summary["ignored"] as? Int)
        let automatic = try #require(summary["appendedByLedger"] as? Int)
        #expect(stored + ignored - automatic == 100_000, "every line accepted: stored, or an identical repeat")

        // rebuild gives tables identical to the live ones.
        let live = try LedgerTests.dump(path)
        #expect(try cli(["rebuild", path]).status == 0)
        #expect(try LedgerTests.dump(path) == live)
        #expect(try cli(["verify", path]).status == 0)

        // Export then import replays to the identical state.
        let exported = dir.path("export.jsonl")
        let export = try cli(["export", path])
        try export.stdout.write(toFile: exported, atomically: true, encoding: .utf8)
        let copy = dir.path("copy.ledger")
        #expect(try cli(["import", copy, exported]).status == 0)
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        let original = try Ledger(path: path, configuration: readOnly)
        let reimported = try Ledger(path: copy, configuration: readOnly)
        #expect(try reimported.state(atSeq: .max) == original.state(atSeq: .max))
        #expect(try reimported.lastSeq() == original.lastSeq())

        // A byte flipped in the file is caught, naming the seq.
        let seq = try DatabaseQueue(path: copy).write { db -> Int64 in
            let row = try #require(try Row.fetchOne(db, sql: "SELECT first_seq, data FROM event_blocks ORDER BY first_seq LIMIT 1 OFFSET 50"))
            var data = [UInt8](row[1] as Data)
            data[200] ^= 0x01
            try db.execute(sql: "UPDATE event_blocks SET data = ? WHERE first_seq = ?", arguments: [Data(data), row[0]])
            return row[0]
        }
        let verify = try cli(["verify", copy])
        #expect(verify.status == 1)
        #expect(verify.stdout.contains("seq "), "\(verify.stdout)")
        let problemSeq = verify.stdout.firstMatch(of: /seq (\d+):/).flatMap { Int64($0.1) }
        #expect(problemSeq.map { $0 >= seq && $0 < seq + 1024 } == true, "\(verify.stdout)")
    }

    /// One pass of the rules, nothing written on a refusal: a command refused 25,000 lines into a
    /// 35,000-line import (past two snapshot points and many sealed blocks, all spooled) leaves
    /// the main file and the WAL byte for byte as they were, through the CLI and the library.
    @Test func aRefusalInTheMiddleOfALargeImportLeavesTheFileAndItsWALByteIdentical() throws {
        let dir = try TemporaryDirectory()
        let lines = try String(contentsOfFile: Workload.file(events: 100_000), encoding: .utf8).split(separator: "\n").map(String.init)
        let path = dir.path("w.ledger")
        try (lines[0..<10_000].joined(separator: "\n") + "\n").write(toFile: dir.path("first.jsonl"), atomically: true, encoding: .utf8)
        let first = try cli(["import", path, dir.path("first.jsonl")])
        #expect(first.status == 0, "\(first.stderr)")
        // While this ledger is open, its last append stays in the WAL.
        let ledger = try Ledger(path: path)
        try ledger.append(JSONLines.decode(lines[10_000]))
        let lastSeq = try ledger.lastSeq()
        let before = try digests(path)
        #expect(before.contains("-wal") && !before.contains(emptyDigest))

        var rest = Array(lines[10_001..<45_000])
        rest.insert(#"{"type":"paymentQueued","at":"2024-06-01T00:00:00Z","transaction":"refused-1","product":"no-such-product"}"#, at: 25_000)
        let bad = dir.path("bad.jsonl")
        try (rest.joined(separator: "\n") + "\n").write(toFile: bad, atomically: true, encoding: .utf8)
        let refused = try cli(["import", path, bad])
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("line 25001: unknownProduct"), "\(refused.stderr)")
        #expect(try digests(path) == before)

        // The library's streaming import, on the open ledger, likewise; the ledger then goes on
        // from where it was.
        #expect(throws: LedgerError.self) { try ledger.importJSONLines(from: JSONLinesReader(path: bad)) }
        #expect(try digests(path) == before)
        #expect(try ledger.lastSeq() == lastSeq)
        rest.remove(at: 25_000)
        let good = dir.path("good.jsonl")
        try (rest.joined(separator: "\n") + "\n").write(toFile: good, atomically: true, encoding: .utf8)
        let summary = try ledger.importJSONLines(from: JSONLinesReader(path: good))
        #expect(summary.firstSeq == lastSeq + 1)

        // The same lines in one import give the same log and state.
        let whole = dir.path("whole.ledger")
        try (lines[0..<45_000].joined(separator: "\n") + "\n").write(toFile: dir.path("whole.jsonl"), atomically: true, encoding: .utf8)
        let reference = try Ledger(path: whole)
        try reference.importJSONLines(from: JSONLinesReader(path: dir.path("whole.jsonl")))
        #expect(try reference.lastSeq() == ledger.lastSeq())
        #expect(try reference.replayFromLog() == ledger.replayFromLog())
        #expect(try ledger.verify().isValid)
        // The one import went into an empty ledger, so its projection tables were written in
        // bulk; the ledger built in pieces wrote them row by row. They agree.
        #expect(try reference.verify().isValid)
        #expect(try reference.transactions() == ledger.transactions())
        #expect(try reference.downloads() == ledger.downloads())
        #expect(try reference.purchaseHistory(PurchaseHistoryQuery()) == ledger.purchaseHistory(PurchaseHistoryQuery()))
    }

    /// SHA-256 of the ledger file and its WAL, read by another process: opening and closing the
    /// file here would drop this process's POSIX locks on it (SQLite's open ledger among them),
    /// and another process closing the ledger would then fold the WAL into the file.
    private func digests(_ path: String) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["sha256sum", path, path + "-wal"]
        let out = Pipe()
        process.standardOutput = out
        try process.run()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw LedgerError.make(.io, "sha256sum failed: \(text)") }
        return text
    }

    private let emptyDigest = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
}
