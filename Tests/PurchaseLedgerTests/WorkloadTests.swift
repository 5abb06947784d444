import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// The shared workload generator (`../shared/bench/gen_workload.py`), 100,000 events.
enum Workload {
    static let generator = packageRoot.deletingLastPathComponent().appending(path: "shared/bench/gen_workload.py").path

    /// Generates the workload once per test run into the temporary directory.
    static func file(events: Int) throws -> String {
        let path = FileManager.default.temporaryDirectory.appending(path: "purchase-ledger-workload-\(events).jsonl").path
        if FileManager.default.fileExists(atPath: path) { return path }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["python3", generator, "-n", String(events), "-o", path + ".part"]
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw LedgerError.make(.io, "the workload generator failed") }
        try FileManager.default.moveItem(atPath: path + ".part", toPath: path)
        return path
    }

    static var available: Bool { FileManager.default.fileExists(atPath: generator) }
}

@Suite(.serialized, .enabled(if: Workload.available, "needs ../shared/bench/gen_workload.py"))
struct WorkloadTests {
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
}
