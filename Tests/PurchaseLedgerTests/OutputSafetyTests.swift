import Foundation
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerCLI

/// Output that cannot attack its reader: a spreadsheet opening the CSV, a terminal showing a
/// table, timeline, event list or state; and reports that say when `--limit` cut them.
struct OutputSafetyTests {
    static let retitle = "\u{1B}]0;pwned\u{07}"
    static let clear = "\u{1B}[2J"

    /// A ledger whose ids, title, user and error message were chosen by an attacker.
    static func hostileLedger(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.path("hostile.ledger")
        func quoted(_ s: String) -> String { String(JSONWriter.object { $0.field("v", s) }.dropFirst(6).dropLast(2)) }
        let lines = [
            #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"=HYPERLINK(\"http://evil.example/\",\"x\")","kind":"consumable","price":"0.99","currency":"USD","downloadable":false,"title":"@SUM(1+1)"}"#,
            #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t\#(quoted(retitle))1","product":"=HYPERLINK(\"http://evil.example/\",\"x\")","user":"+cmd|' /C calc'!A0"}"#,
            #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"t\#(quoted(retitle))1"}"#,
            #"{"type":"paymentQueued","at":"2024-03-01T10:00:00Z","transaction":"t2\#(quoted(clear))","product":"=HYPERLINK(\"http://evil.example/\",\"x\")","user":"-2+3"}"#,
            #"{"type":"transactionFailed","at":"2024-03-01T10:00:01Z","transaction":"t2\#(quoted(clear))","error":{"domain":"@dom","code":2,"message":"\#(quoted("\u{202E}evil\u{9B}31m"))"}}"#,
        ]
        let result = try cli(["append", path], stdin: lines.joined(separator: "\n"))
        guard result.status == 0 else { throw LedgerError.make(.malformedInput, result.stderr) }
        return path
    }

    @Test func csvCellsThatASpreadsheetWouldRunAreNeutralized() throws {
        let dir = try TemporaryDirectory()
        let path = try Self.hostileLedger(dir)
        for view in ["history", "revenue", "failures"] {
            let csv = try cli(["report", path, "--view", view, "--format", "csv"])
            #expect(csv.status == 0, "\(csv.stderr)")
            // Every cell, parsed as a spreadsheet would: none starts with = + - @ unless a number.
            for line in csv.stdout.split(separator: "\n").dropFirst() {
                for cell in Self.cells(String(line)) {
                    guard let first = cell.first, "=+-@".contains(first) else { continue }
                    #expect(Double(cell) != nil, "\(view): \(cell) would run as a formula")
                }
            }
        }
        let history = try cli(["report", path, "--format", "csv"]).stdout
        #expect(history.contains(#""'=HYPERLINK(""http://evil.example/"",""x"")""#), "\(history)")
        #expect(history.contains("'+cmd|' /C calc'!A0") && history.contains(",'-2+3,"))
        let failures = try cli(["report", path, "--view", "failures", "--format", "csv"]).stdout
        #expect(failures.contains("'@dom,2,"))
        // A negative amount stays a number.
        #expect(csvField("-1.99") == "-1.99" && csvField("-3") == "-3" && csvField("-") == "'-" && csvField("-1.") == "'-1.")
        #expect(csvField("\tx") == "'\tx")
    }

    @Test func textOutputShowsControlCharactersEscaped() throws {
        let dir = try TemporaryDirectory()
        let path = try Self.hostileLedger(dir)
        let id1 = "t\(Self.retitle)1"
        let commands = [
            ["replay", path], ["report", path], ["report", path, "--view", "failures"], ["timeline", path, "--transaction", id1],
            ["events", path], ["events", path, "--transaction", id1], ["replay", path, "--transaction", "t2\(Self.clear)"],
            ["timeline", path, "--transaction", "t3\(Self.clear)"],
        ]
        for command in commands {
            let result = try cli(command)
            for text in [result.stdout, result.stderr] {
                #expect(!text.unicodeScalars.contains { $0 == "\u{1B}" || $0 == "\u{07}" || $0 == "\u{9B}" || $0 == "\u{202E}" }, "\(command[0]): \(text.debugDescription)")
            }
            #expect((result.stdout + result.stderr).contains("\\u"), "\(command[0]) shows the escape as text: \(result.stdout) \(result.stderr)")
        }
        // JSON keeps the exact value (escaped as JSON), and so does export.
        let json = try cli(["replay", path, "--json"]).stdout
        #expect(json.contains("t\\u001b]0;pwned\\u00071"), "\(json.prefix(400))")
        let exported = dir.path("export.jsonl")
        try Data(try cli(["export", path]).stdout.utf8).write(to: URL(fileURLWithPath: exported))
        let reimported = dir.path("again.ledger")
        #expect(try cli(["import", reimported, exported]).status == 0)
        #expect(try Ledger(path: reimported).currentState.transactions[id1] != nil)
        #expect(TerminalText.escape("a\u{1B}[2Jb\u{1B}[31mc", keepingColours: true) == "a\\u001b[2Jb\u{1B}[31mc")
        #expect(TerminalText.escape("plain — “quoted” é\n\ttab") == "plain — “quoted” é\n\ttab")
    }

    @Test func aReportCutByLimitSaysSoInEveryFormat() throws {
        let dir = try TemporaryDirectory()
        let path = try Self.hostileLedger(dir)
        let all = try cli(["report", path, "--format", "json"])
        let rows = try #require((try JSONSerialization.jsonObject(with: Data(all.stdout.utf8)) as? [String: Any])?["rows"] as? [Any]).count
        #expect(rows >= 2)
        let cut = try cli(["report", path, "--format", "json", "--limit", "1"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(cut.stdout.utf8)) as? [String: Any])
        #expect((object["rows"] as? [Any])?.count == 1 && object["truncated"] as? Bool == true && object["limit"] as? Int == 1)
        let exact = try cli(["report", path, "--format", "json", "--limit", String(rows)])
        #expect((try JSONSerialization.jsonObject(with: Data(exact.stdout.utf8)) as? [String: Any])?["truncated"] as? Bool == false, "exactly --limit rows is not cut")
        for format in ["table", "csv"] {
            let r = try cli(["report", path, "--format", format, "--limit", "1"])
            #expect(r.status == 0 && r.stderr.contains("stops at --limit 1 rows"), "\(format): \(r.stderr)")
            #expect(try cli(["report", path, "--format", format]).stderr.isEmpty)
        }
        #expect(try cli(["report", path, "--format", "html", "--limit", "1"]).stdout.contains("stops at --limit 1 rows"))
        #expect(try cli(["report", path, "--view", "undelivered", "--format", "json", "--limit", "1"]).status == 0)
        // An empty table: its title (what "stuck" is measured against), its header once, then "0 rows".
        let empty = try cli(["report", path, "--view", "stuck"]).stdout
        #expect(empty.hasPrefix("Stuck downloads: no progress for 3600 s as of the ledger's latest download activity\n"), "\(empty)")
        #expect(empty.components(separatedBy: "download  transaction").count == 2 && empty.hasSuffix("0 rows\n"), "\(empty)")
        let asOf = try cli(["report", path, "--view", "stuck", "--as-of", "2030-01-01T00:00:00Z"])
        #expect(asOf.status == 0 && asOf.stdout.hasPrefix("Stuck downloads: no progress for 3600 s as of 2030-01-01T00:00:00Z\n"), "\(asOf.stderr)")
        #expect(try cli(["report", path, "--as-of", "2030-01-01T00:00:00Z"]).status == 2, "--as-of is the stuck view's")
    }

    @Test func numbersOutOfRangeAreUsageErrorsNotTraps() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        try sampleLedger(path)
        for (command, option) in [
            (["report", path, "--view", "stuck", "--idle", "9300000000000000"], "--idle"),
            (["report", path, "--view", "stuck", "--idle=-1"], "--idle"),
            (["report", path, "--limit", "0"], "--limit"),
            (["report", path, "--limit", "99999999999999"], "--limit"),
            (["replay", path, "--at=-5"], "--at"),
            (["events", path, "--from", "0"], "--from"),
            (["events", path, "--limit=-1"], "--limit"),
            (["ship", path, "--to", "postgres://x@127.0.0.1:1/f", "--connections", "0"], "--connections"),
        ] {
            let result = try cli(command)
            #expect(result.status == 2 && result.stderr.contains(option) && result.stderr.contains("out of range"), "\(command): \(result.stderr)")
        }
        #expect(try cli(["report", path, "--view", "stuck", "--idle", "9223372035"]).status == 0)
        // The library saturates instead of trapping.
        let ledger = try Ledger(path: path)
        #expect(try ledger.stuckDownloads(idle: .seconds(Int64.max)).isEmpty)
        #expect(StuckCutoff.milliseconds(now: 1_000, idle: .seconds(Int64.max)) == Int64.min)
        #expect(StuckCutoff.milliseconds(now: -5, idle: .seconds(Int64.min)) == Int64.max)
        #expect(StuckCutoff.milliseconds(now: 10_000, idle: .seconds(3)) == 7_000)
    }

    /// RFC 4180 cells of one line (no newlines inside the cells of these tests).
    static func cells(_ line: String) -> [String] {
        var cells: [String] = [], current = "", quoted = false, i = line.startIndex
        while i < line.endIndex {
            let c = line[i]
            if quoted {
                if c == "\"" {
                    let next = line.index(after: i)
                    if next < line.endIndex && line[next] == "\"" { current.append("\""); i = next } else { quoted = false }
                } else {
                    current.append(c)
                }
            } else if c == "\"" {
                quoted = true
            } else if c == "," {
                cells.append(current)
                current = ""
            } else {
                current.append(c)
            }
            i = line.index(after: i)
        }
        return cells + [current]
    }
}
