import ArgumentParser
import Foundation
import GRDB
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerCLI

/// The `purchase-ledger` binary, run as a user would, against real ledger files.
struct CLIResult {
    var status: Int32
    var stdout: String
    var stderr: String
}

/// The built binary: `Tools/test.sh` builds it before the tests; PURCHASE_LEDGER_BIN overrides.
let binary: String = builtProduct("purchase-ledger", override: "PURCHASE_LEDGER_BIN")

/// A product of this build: in the folder the test runner itself was built into (whatever
/// `--scratch-path` says), else `.build/debug`.
func builtProduct(_ name: String, override: String) -> String {
    if let path = ProcessInfo.processInfo.environment[override] { return path }
    let runner = URL(fileURLWithPath: ProcessInfo.processInfo.arguments[0]).resolvingSymlinksInPath()
    var folder = runner.deletingLastPathComponent()
    // On macOS the runner is inside purchase-ledgerPackageTests.xctest/Contents/MacOS.
    while folder.path.contains(".xctest") { folder = folder.deletingLastPathComponent() }
    let beside = folder.appending(path: name).path
    if FileManager.default.isExecutableFile(atPath: beside) { return beside }
    return packageRoot.appending(path: ".build/debug/\(name)").path
}

@discardableResult
func cli(_ arguments: [String], stdin: String? = nil, environment: [String: String] = [:]) throws -> CLIResult {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: binary)
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env.merge(environment) { $1 }
    process.environment = env
    // Files, not pipes: a process another test starts at the same moment (a PostgreSQL server)
    // can inherit a pipe's end and hold it open, and reading to the end of a pipe then waits
    // for that server to stop.
    let dir = try TemporaryDirectory()
    let input = dir.path("stdin"), output = dir.path("stdout"), errors = dir.path("stderr")
    try Data((stdin ?? "").utf8).write(to: URL(fileURLWithPath: input))
    for path in [output, errors] { _ = FileManager.default.createFile(atPath: path, contents: nil) }
    let handles = (
        input: try FileHandle(forReadingFrom: URL(fileURLWithPath: input)), output: try FileHandle(forWritingTo: URL(fileURLWithPath: output)),
        errors: try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
    )
    process.standardInput = handles.input
    process.standardOutput = handles.output
    process.standardError = handles.errors
    try process.run()
    process.waitUntilExit()
    for handle in [handles.input, handles.output, handles.errors] { try handle.close() }
    let text = { (path: String) in String(decoding: try Data(contentsOf: URL(fileURLWithPath: path)), as: UTF8.self) }
    return CLIResult(status: process.terminationStatus, stdout: try text(output), stderr: try text(errors))
}

func fileBytes(_ path: String) throws -> Data {
    var all = try Data(contentsOf: URL(fileURLWithPath: path))
    if let wal = try? Data(contentsOf: URL(fileURLWithPath: path + "-wal")) { all += wal }
    return all
}

let sampleLog = """
    {"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"book","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"contents":[{"content":"ch1","contentVersion":"1.0","contentLength":100}]}
    {"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"book","user":"alice"}

    {"type":"transactionPurchased","at":"2024-03-01T09:00:05Z","transaction":"t1","storeTransactionId":"100","downloads":[{"download":"t1-d1","content":"ch1","contentVersion":"1.0","contentLength":100}]}
    {"type":"downloadStarted","at":"2024-03-01T09:00:06Z","download":"t1-d1"}
    {"type":"downloadFailed","at":"2024-03-01T09:00:07Z","download":"t1-d1","error":{"domain":"NSURLErrorDomain","code":-1005,"message":"lost"}}
    {"type":"downloadStarted","at":"2024-03-01T09:00:08Z","download":"t1-d1"}
    {"type":"downloadFinished","at":"2024-03-01T09:00:09Z","download":"t1-d1","contentURL":"file:///cache/t1-d1/"}
    {"type":"transactionDeferred","at":"2024-03-01T09:00:09.500Z","transaction":"t1"}
    {"type":"contentCopiedOut","at":"2024-03-01T09:00:10Z","download":"t1-d1","destination":"Documents/book, \\"final\\""}
    {"type":"transactionFinished","at":"2024-03-01T09:00:11Z","transaction":"t1"}
    """

@Suite(.serialized) struct CLITests {
    let dir: TemporaryDirectory
    let ledger: String

    init() throws {
        dir = try TemporaryDirectory()
        ledger = dir.path("user.ledger")
    }

    func populated() throws -> String {
        let r = try cli(["append", ledger], stdin: sampleLog)
        #expect(r.status == 0, "\(r.stderr)")
        return ledger
    }

    @Test func helpAndUsage() throws {
        let help = try cli(["--help"])
        #expect(help.status == 0)
        for command in ["append", "import", "export", "replay", "events", "timeline", "verify", "rebuild", "report", "stats", "demo", "forget"] {
            #expect(help.stdout.contains(command))
            let sub = try cli([command, "--help"])
            #expect(sub.status == 0)
            #expect(sub.stdout.contains("Example"), "\(command) help has an example")
        }
        #expect(try cli(["frobnicate"]).status == 2, "bad usage exits 2")
        #expect(try cli(["replay"]).status == 2)
        #expect(try cli(["replay", ledger, "--at", "1", "--first-anomaly"]).status == 2)
        let completion = try cli(["--generate-completion-script", "bash"])
        #expect(completion.status == 0 && completion.stdout.contains("purchase-ledger"))
    }

    /// Help examples copy-paste: at 80 columns (help's width off a terminal) every example line is
    /// printed whole, a command continued on the next line ends with a backslash, and the top-level help
    /// has examples too.
    @Test func helpExamplesAreNeverWrapped() {
        for command in [Root.self] + Root.configuration.subcommands {
            let help = command == Root.self ? Root.helpMessage(columns: 80) : Root.helpMessage(for: command, columns: 80)
            let lines = Set(help.split(separator: "\n", omittingEmptySubsequences: false))
            let examples = command.configuration.discussion.split(separator: "\n").filter { $0.hasPrefix("  ") }
            #expect(!examples.isEmpty, "\(command) has examples")
            for example in examples {
                #expect(example.count < 80 && lines.contains(example), "\(command): wrapped at 80 columns: \(example)")
            }
        }
    }

    /// A zero-byte file (a truncated ledger, a placeholder) stays zero bytes under every command
    /// that is refused or only reads; events that pass make it a ledger.
    @Test func aZeroByteFileStaysZeroBytesUntilEventsAreAccepted() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("empty.ledger")
        _ = FileManager.default.createFile(atPath: path, contents: nil)
        let refused = #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"nope"}"#
        let commands: [([String], String?)] = [
            (["append", path], refused), (["import", path, "-"], refused), (["forget", path, "--user", "alice"], nil), (["rebuild", path], nil),
            (["verify", path], nil), (["stats", path], nil), (["events", path], nil), (["report", path], nil), (["replay", path], nil),
        ]
        for (command, stdin) in commands {
            let result = try cli(command, stdin: stdin)
            #expect(result.status != 0, "\(command[0]) on an empty file: \(result.stdout)")
            let size = try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int
            #expect(size == 0, "\(command[0]) left \(size ?? -1) bytes")
            #expect(!FileManager.default.fileExists(atPath: path + "-wal") && !FileManager.default.fileExists(atPath: path + "-shm"), "\(command[0])")
        }
        #expect(try cli(["append", path], stdin: sampleLog).status == 0)
        #expect(try cli(["verify", path]).status == 0, "accepted events make it a ledger")
    }

    /// A timeline's columns line up on every line, a copy-out's long destination included, and no
    /// line ends in spaces.
    @Test func timelineColumnsLineUp() throws {
        let dir = try TemporaryDirectory()
        #expect(try cli(["demo", dir.path("demo.ledger")]).status == 0)
        let timeline = try cli(["timeline", dir.path("demo.ledger"), "--transaction", "t1"])
        #expect(timeline.status == 0, "\(timeline.stderr)")
        let lines = timeline.stdout.split(separator: "\n").dropFirst()
        #expect(lines.contains { $0.contains("contentCopiedOut t1-d1 -> ") })
        // Where the transaction's state starts ("purchased" on every line from the purchase on).
        let columns = Set(lines.compactMap { $0.range(of: "  purchased")?.lowerBound.utf16Offset(in: $0) })
        #expect(columns.count == 1, "\(timeline.stdout)")
        #expect(!lines.contains { $0.hasSuffix(" ") })
    }

    /// A usage error found once a subcommand runs shows that subcommand's usage, not the top level's.
    @Test func aUsageErrorInASubcommandShowsItsUsage() throws {
        _ = try populated()
        for (arguments, command) in [(["demo", ledger], "demo"), (["events", ledger, "--type", "nope"], "events")] {
            let r = try cli(arguments)
            #expect(r.status == 2)
            #expect(r.stderr.contains("Usage: purchase-ledger \(command) "), "\(r.stderr)")
            #expect(r.stderr.contains("See 'purchase-ledger \(command) --help'"), "\(r.stderr)")
        }
    }

    @Test func appendSucceedsAndCountsAnomalies() throws {
        let r = try cli(["append", ledger], stdin: sampleLog)
        #expect(r.status == 0)
        #expect(r.stdout.contains("stored 10 events (seq 1...10)"))
        #expect(r.stdout.contains("1 anomaly"))
        let json = try cli(["append", ledger, "--json"], stdin: #"{"type":"restoreStarted","at":"2024-03-02T00:00:00Z"}"#)
        #expect(json.stdout.contains(#""stored":1"#))
    }

    /// A refusal is reported at once even while stdin stays open: the thread reading ahead may be
    /// waiting on the pipe for a line that never comes.
    @Test func aRefusalOnAnOpenPipeExitsAtOnce() throws {
        _ = try populated()
        let before = try fileBytes(ledger)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["append", ledger]
        let input = Pipe(), err = Pipe()
        process.standardInput = input
        process.standardError = err
        process.standardOutput = FileHandle.nullDevice
        let exited = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in exited.signal() }
        try process.run()
        input.fileHandleForWriting.write(Data(#"{"type":"transactionFinished","at":"2024-03-02T00:00:04Z","transaction":"t1"}"#.utf8 + [0x0A]))
        let inTime = exited.wait(timeout: .now() + 30) == .success
        try input.fileHandleForWriting.close()
        if !inTime { process.waitUntilExit() }
        #expect(inTime, "the refusal waited for the pipe to close")
        #expect(process.terminationStatus == 1)
        #expect(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).contains("line 1: alreadyFinished"))
        #expect(try fileBytes(ledger) == before)
    }

    /// Appends `input` to the populated ledger: the exit status must be `status`, stderr must
    /// hold `message`, and the file must not change.
    private func refusedAppend(_ input: String, status: Int32, _ message: String) throws {
        _ = try populated()
        let before = try fileBytes(ledger)
        let r = try cli(["append", ledger], stdin: input)
        #expect(r.status == status)
        #expect(r.stderr.contains(message), "\(r.stderr)")
        #expect(try fileBytes(ledger) == before)
    }

    @Test func aMalformedLineExits2AndChangesNothing() throws {
        try refusedAppend(
            """
            {"type":"paymentQueued","at":"2024-03-02T00:00:00Z","transaction":"t2","product":"book"}
            {"type":"downloadProgressed","at":"2024-03-02T00:00:01Z","download":"t1-d1","progress":1.5}
            """, status: 2, "line 2: malformed: field `progress` must be a number in 0...1")
    }

    @Test func aBrokenRuleExits1NamingTheLineAndChangesNothing() throws {
        try refusedAppend(
            """
            {"type":"paymentQueued","at":"2024-03-02T00:00:00Z","transaction":"t2","product":"book"}
            {"type":"transactionPurchased","at":"2024-03-02T00:00:01Z","transaction":"t2","downloads":[{"download":"t2-d1","content":"ch1","contentVersion":"1.0","contentLength":100}]}

            {"type":"downloadStarted","at":"2024-03-02T00:00:02Z","download":"t2-d1"}
            {"type":"downloadFinished","at":"2024-03-02T00:00:03Z","download":"t2-d1","contentURL":"file:///c/"}
            {"type":"transactionFinished","at":"2024-03-02T00:00:04Z","transaction":"t2"}
            """, status: 1,
            "line 6: finishBeforeCopyOut: download t2-d1 finished but its content was never copied out; finishing now would delete it")
    }

    @Test func storageFailuresExit3() throws {
        #expect(try cli(["replay", dir.path("missing.ledger")]).status == 3)
        let junk = dir.path("junk.ledger")
        try Data(repeating: 7, count: 5000).write(to: URL(fileURLWithPath: junk))
        let r = try cli(["stats", junk])
        #expect(r.status == 3)
        #expect(r.stderr.contains("not a ledger"))
    }

    @Test func replayInEveryMode() throws {
        _ = try populated()
        let json = try cli(["replay", ledger, "--json"])
        #expect(json.status == 0)
        let state = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        #expect(state["seq"] as? Int == 10)
        #expect(state["anomalies"] as? Int == 1)
        let transactions = try #require(state["transactions"] as? [[String: Any]])
        #expect(transactions.first?["state"] as? String == "purchased")
        #expect(transactions.first?["finished"] as? Bool == true)
        let downloads = try #require(state["downloads"] as? [[String: Any]])
        #expect(downloads.first?["contentURL"] is NSNull)
        #expect((state["ownedContent"] as? [[String: Any]])?.first?["content"] as? String == "ch1")

        let at = try cli(["replay", ledger, "--at", "7", "--json"])
        #expect(at.stdout.contains(#""contentURL":"file:///cache/t1-d1/""#))
        let until = try cli(["replay", ledger, "--until", "2024-03-01T09:00:07.5Z", "--json"])
        #expect(until.stdout.contains(#""seq":5"#) && until.stdout.contains(#""state":"failed""#))
        let anomaly = try cli(["replay", ledger, "--first-anomaly"])
        #expect(anomaly.stdout.contains("state after seq 8"))
        let when = try cli(["replay", ledger, "--when", "download:t1-d1:failed", "--json"])
        #expect(when.stdout.contains(#""seq":5"#))
        #expect(try cli(["replay", ledger, "--when", "download:t1-d1:exploded"]).status == 2)
        let text = try cli(["replay", ledger])
        #expect(text.stdout.contains("t1-d1") && text.stdout.contains("Documents/book"))
    }

    @Test func eventsTimelineAndStats() throws {
        _ = try populated()
        let events = try cli(["events", ledger, "--transaction", "t1"])
        #expect(events.stdout.split(separator: "\n").count == 9)
        #expect(events.stdout.contains("[anomaly: illegalTransactionTransition]"))
        let typed = try cli(["events", ledger, "--type", "downloadStarted", "--json"])
        let lines = typed.stdout.split(separator: "\n")
        #expect(lines.count == 2)
        #expect(lines.allSatisfy { $0.contains(#""type":"downloadStarted""#) && $0.contains(#""seq":"#) })
        #expect(try cli(["events", ledger, "--download", "t1-d1", "--from", "6"]).stdout.split(separator: "\n").count == 3)
        #expect(try cli(["events", ledger, "--type", "nope"]).status == 2)
        // A mistyped id is an error naming it, not an empty listing; a filter that matches
        // nothing of a known transaction is not.
        let unknown = try cli(["events", ledger, "--transaction", "t9"])
        #expect(unknown.status == 2 && unknown.stdout.isEmpty)
        #expect(unknown.stderr.contains("transaction t9 is not in this ledger"), "\(unknown.stderr)")
        #expect(try cli(["events", ledger, "--download", "t9-d1"]).stderr.contains("download t9-d1 is not in this ledger"))
        #expect(try cli(["events", ledger, "--transaction", "t1", "--download", "t9-d1"]).stderr.contains("transaction t1 has no download t9-d1"))
        let none = try cli(["events", ledger, "--transaction", "t1", "--from", "1000"])
        #expect(none.status == 0 && none.stdout.isEmpty)

        let timeline = try cli(["timeline", ledger, "--transaction", "t1"])
        #expect(timeline.status == 0)
        #expect(timeline.stdout.contains("downloadFailed t1-d1 NSURLErrorDomain -1005"))
        #expect(timeline.stdout.contains("! anomaly: illegalTransactionTransition"))
        #expect(try cli(["timeline", ledger, "--transaction", "t1", "--json"]).stdout.split(separator: "\n").count == 9)
        #expect(try cli(["timeline", ledger, "--transaction", "nope"]).status == 2)

        let stats = try cli(["stats", ledger, "--json"])
        let s = try #require(try JSONSerialization.jsonObject(with: Data(stats.stdout.utf8)) as? [String: Any])
        #expect(s["events"] as? Int == 10)
        #expect((s["anomaliesByRule"] as? [String: Int])?["illegalTransactionTransition"] == 1)
        #expect(try cli(["stats", ledger]).stdout.contains("bytes/event"))
    }

    /// `forget` erases the user, never prints the id, says why it refuses, and leaves a ledger
    /// that verifies with the user's records erased.
    @Test func forgetErasesAUserAndNeverPrintsTheID() throws {
        _ = try populated()
        let before = try cli(["report", ledger, "--view", "revenue", "--format", "csv"]).stdout
        let unknown = try cli(["forget", ledger, "--user", "mallory"])
        #expect(unknown.status == 2 && unknown.stderr.contains("unknownUser") && !unknown.stderr.contains("mallory"), "\(unknown.stderr)")
        let erased = try cli(["forget", ledger, "--user", "alice", "--json"])
        #expect(erased.status == 0, "\(erased.stderr)")
        #expect(!erased.stdout.contains("alice") && !erased.stderr.contains("alice"))
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(erased.stdout.utf8)) as? [String: Any])
        #expect((summary["values"] as? Int ?? 0) >= 1 && summary["walTruncated"] as? Bool == true, "\(summary)")
        #expect(try cli(["verify", ledger]).status == 0)
        #expect(try cli(["report", ledger, "--view", "revenue", "--format", "csv"]).stdout == before)
        let export = try cli(["export", ledger]).stdout
        #expect(!export.contains("alice") && export.contains("[erased ") && export.contains(#""type":"personalDataErased""#))
        #expect(try cli(["timeline", ledger, "--transaction", "t1"]).stdout.contains("[erased "))
        #expect(try cli(["forget", ledger, "--user", "alice"]).status == 2, "already erased")
        // Given as input, the erasure event is refused: only forget records one.
        let forged = try cli(["append", ledger], stdin: #"{"type":"personalDataErased","at":"2024-03-02T00:00:00Z","refs":[1]}"#)
        #expect(forged.status == 2 && forged.stderr.contains("never appended"), "\(forged.stderr)")
    }

    @Test func verifyPassesThenCatchesAFlippedByte() throws {
        _ = try populated()
        let ok = try cli(["verify", ledger])
        #expect(ok.status == 0)
        #expect(ok.stdout.contains("ok: 10 events"))
        #expect(ok.stdout.contains("seq 8: illegalTransactionTransition"))
        try DatabaseQueue(path: ledger).write { db in
            // (The user id is a ref into personal_values, not in the payload: the product is.)
            try db.execute(sql: "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'book', 'bool') AS BLOB) WHERE seq = 2")
        }
        let bad = try cli(["verify", ledger])
        #expect(bad.status == 1)
        #expect(bad.stdout.contains("seq 2: chain"), "\(bad.stdout)")
        let json = try cli(["verify", ledger, "--all", "--json"])
        #expect(json.status == 1)
        #expect(json.stdout.contains(#""valid":false"#))
    }

    @Test func rebuildAndReportFormats() throws {
        _ = try populated()
        #expect(try cli(["rebuild", ledger]).stdout.contains("rebuilt the projections from 10 events"))
        #expect(try cli(["verify", ledger]).status == 0)
        // A damaged row is the one row written back; --full rewrites them all.
        try DatabaseQueue(path: ledger).write {
            try $0.execute(
                sql:
                    "INSERT OR IGNORE INTO projection_texts (text) VALUES ('failed'); UPDATE transaction_rows SET state = (SELECT code FROM projection_texts WHERE text = 'failed') WHERE transaction_id = 't1'"
            )
        }
        #expect(try cli(["verify", ledger]).status == 1)
        let repaired = try cli(["rebuild", ledger, "--json"])
        #expect(repaired.stdout.contains(#""events":10,"rowsWritten":1,"rowsDeleted":0,"#), "\(repaired.stdout)")
        #expect(try cli(["verify", ledger]).status == 0)
        #expect(try cli(["rebuild", ledger, "--full"]).stdout.contains("rows rewritten"))
        let table = try cli(["report", ledger, "--user", "alice"])
        #expect(table.stdout.contains("t1") && table.stdout.contains("4.99") && table.stdout.contains("USD"))
        let csv = try cli(["report", ledger, "--format", "csv"]).stdout.split(separator: "\n")
        #expect(csv.count == 2)
        #expect(csv[0].hasPrefix("purchased,transaction,store id"))
        #expect(csv[1].contains(#","ch1 1.0 finished copied to Documents/book, ""final""","#), "RFC 4180 quoting")
        let json = try cli(["report", ledger, "--format", "json"])
        let entries = try #require((try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["rows"] as? [[String: Any]])
        #expect(entries.first?["price"] as? String == "4.99")
        let html = try cli(["report", ledger, "--format", "html"])
        #expect(html.stdout.hasPrefix("<!doctype html>") && !html.stdout.contains("<script"))
        let nobody = try cli(["report", ledger, "--user", "nobody' OR '1'='1"])
        #expect(nobody.status == 2 && nobody.stdout.isEmpty && !nobody.stderr.contains("nobody"), "\(nobody.stderr)")
        // One rule for an id the ledger never held, in every command: exit 2, named (a user id never echoed).
        for arguments in [
            ["replay", ledger, "--user", "nobody"], ["replay", ledger, "--transaction", "nope"], ["replay", ledger, "--when", "download:nope:failed"],
            ["timeline", ledger, "--transaction", "nope"], ["events", ledger, "--transaction", "nope"], ["forget", ledger, "--user", "nobody"],
        ] {
            let result = try cli(arguments)
            #expect(result.status == 2 && !result.stderr.contains("nobody"), "\(arguments): \(result.stderr)")
        }
    }

    @Test func exportRedactImportRoundTrip() throws {
        _ = try populated()
        try cli(
            ["append", ledger],
            stdin: """
                {"type":"paymentQueued","at":"2024-03-02T00:00:00Z","transaction":"t2","product":"book","user":"bob"}
                {"type":"transactionPurchased","at":"2024-03-02T00:00:01Z","transaction":"t2","downloads":[{"download":"t2-d1","content":"ch1","contentVersion":"1.0","contentLength":100}]}
                {"type":"downloadStarted","at":"2024-03-02T00:00:02Z","download":"t2-d1"}
                {"type":"transactionFinished","at":"2024-03-02T00:00:03Z","transaction":"t2"}
                """)
        let exported = try cli(["export", ledger])
        #expect(exported.stdout.contains(#""appendedByLedger":true"#))
        let file = dir.path("export.jsonl")
        try exported.stdout.write(toFile: file, atomically: true, encoding: .utf8)
        let copy = dir.path("copy.ledger")
        let imported = try cli(["import", copy, file])
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try cli(["replay", copy, "--json"]).stdout == (try cli(["replay", ledger, "--json"]).stdout))

        let redacted = try cli(["export", ledger, "--redact"])
        #expect(!redacted.stdout.contains("alice") && !redacted.stdout.contains("Documents/book"))
        let redactor = try Ledger(path: ledger).redactor()
        #expect(redacted.stdout.contains(redactor.pseudonym(user: "alice")))
        #expect(redacted.stdout == (try cli(["export", ledger, "--redact"])).stdout, "pseudonyms are stable")
        let redactedFile = dir.path("redacted.jsonl")
        try redacted.stdout.write(toFile: redactedFile, atomically: true, encoding: .utf8)
        let anonymous = dir.path("anonymous.ledger")
        #expect(try cli(["import", anonymous, redactedFile]).status == 0)
        var options = LedgerConfiguration()
        options.readOnly = true
        let a = try Ledger(path: ledger, configuration: options).state(atSeq: .max)
        let b = try Ledger(path: anonymous, configuration: options).state(atSeq: .max)
        #expect(a.transactions.keys == b.transactions.keys)
        let statesA: [String: TransactionStatus] = a.transactions.mapValues(\.state)
        let statesB: [String: TransactionStatus] = b.transactions.mapValues(\.state)
        #expect(statesA == statesB)
        #expect(b.transactions["t1"]?.user == redactor.pseudonym(user: "alice"))
        #expect(b.downloads["t1-d1"]?.destination == redactor.pseudonym(destination: "Documents/book, \"final\""))
    }

    @Test func demoRunsAndExplainsItself() throws {
        let demo = dir.path("my-demo.ledger")
        let r = try cli(["demo", demo])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("refused finishBeforeCopyOut"))
        #expect(r.stdout.contains("appended by the ledger"))
        #expect(r.stdout.contains("ok: 73 events"))
        #expect(r.stdout.contains("report --view product-views") && r.stdout.contains("1234567890  sheet    1          0       1"))
        #expect(r.stdout.contains("refused assetPackNotReady") && r.stdout.contains("asset pack season-levels: version 1 on the device"))
        #expect(!r.stdout.contains("\u{1B}["), "no colours in a pipe")
        #expect(try cli(["demo", demo]).status == 2, "an existing file is not replaced without --force")
        #expect(try cli(["demo", demo, "--force"]).status == 0)
    }

    @Test func inProcessParsingAndRunning() async throws {
        let captured = Captured()
        let (ledger, dir) = (self.ledger, self.dir)
        let status = await Console.$current.withValue(Console(sink: { text, toError in captured.append(text, toError) })) {
            await PurchaseLedgerCLI.main(["append", ledger, "--json", dir.path("missing.jsonl")])
        }
        #expect(status == 3)
        #expect(captured.errors.contains("cannot read"))
        try sampleLog.write(toFile: dir.path("in.jsonl"), atomically: true, encoding: .utf8)
        let ok = await Console.$current.withValue(Console(sink: { text, toError in captured.append(text, toError) })) {
            await PurchaseLedgerCLI.main(["append", ledger, dir.path("in.jsonl")])
        }
        #expect(ok == 0)
        #expect(captured.output.contains("stored 10 events"))
    }
}

final class Captured: Sendable {
    private let state = Mutex<(String, String)>(("", ""))
    func append(_ text: String, _ toError: Bool) { state.withLock { if toError { $0.1 += text } else { $0.0 += text } } }
    var output: String { state.withLock { $0.0 } }
    var errors: String { state.withLock { $0.1 } }
}

import Synchronization
