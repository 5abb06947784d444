import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Small bad inputs, each a clear error that changes nothing.
struct BadInputTests {
    @Test func aLineMarkedAppendedByLedgerThatTheLedgerWouldNotAppendIsRefused() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        let marked = #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"p","appendedByLedger":true}"#
        let result = try cli(["append", path], stdin: marked)
        #expect(result.status == 2 && result.stderr.contains("line 1") && result.stderr.contains("appendedByLedger"), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: path), "nothing written")
        // The cancellations an export marks are still left out (the ledger appends them again).
        let exported = try cli(["export", try demoLedger(dir)]).stdout
        #expect(exported.contains("\"appendedByLedger\":true"))
        let again = try cli(["append", dir.path("b.ledger")], stdin: exported)
        #expect(again.status == 0, "\(again.stderr)")
    }

    @Test func aKeyGivenTwiceInAnObjectIsMalformed() throws {
        for line in [
            #"{"type":"restoreStarted","type":"restoreCompleted","at":"2024-03-01T00:00:00Z"}"#,
            #"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"a","user":"b"}"#,
            #"{"type":"restoreFailed","at":"2024-03-01T00:00:00Z","error":{"domain":"d","code":1,"code":2,"message":"m"}}"#,
        ] {
            let error = try #require(#expect(throws: LedgerError.self) { try JSONLines.decode(line) })
            #expect(error.message.contains("is given twice"), "\(error)")
        }
        #expect(throws: Never.self) { try JSONLines.decode(#"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z","user":"type"}"#) }
    }

    @Test func aTimeOutOfRangeSaysTheRange() throws {
        for time in ["9999-12-31T23:59:59Z", "1000-01-01T00:00:00Z", "2262-04-12T00:00:00Z"] {
            let error = try #require(#expect(throws: LedgerError.self) { try JSONLines.decode(#"{"type":"restoreStarted","at":"\#(time)"}"#) })
            #expect(error.message.contains("outside the supported range") && error.message.contains("2262-04-11T23:47:16"), "\(error)")
        }
        let notATime = try #require(#expect(throws: LedgerError.self) { try JSONLines.decode(#"{"type":"restoreStarted","at":"yesterday"}"#) })
        #expect(notATime.message.contains("must be an RFC 3339 UTC time"))
        let dir = try TemporaryDirectory()
        let option = try cli(["replay", try demoLedger(dir), "--until", "9999-01-01T00:00:00Z"])
        #expect(option.status == 2 && option.stderr.contains("outside the supported range"), "\(option.stderr)")
    }

    @Test func anEmptyFileSaysItIsEmptyAndAnotherApplicationsDatabaseIsNeverTakenOver() throws {
        let dir = try TemporaryDirectory()
        let empty = dir.path("empty.ledger")
        _ = FileManager.default.createFile(atPath: empty, contents: Data())
        for command in [["replay", empty], ["events", empty], ["report", empty], ["verify", empty]] {
            let result = try cli(command)
            #expect(result.status == 3 && result.stderr.contains("is empty"), "\(command[0]): \(result.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: empty)).isEmpty)

        let other = dir.path("other.db")
        try DatabaseQueue(path: other).writeWithoutTransaction { try $0.execute(sql: "PRAGMA application_id = 1234") }
        let before = try Data(contentsOf: URL(fileURLWithPath: other))
        for command in [["append", other], ["replay", other]] {
            let result = try cli(command, stdin: #"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z"}"#)
            #expect(result.status == 3 && result.stderr.contains("another application"), "\(command[0]): \(result.stderr)")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: other)) == before, "the file is left exactly as it was")
    }

    @Test func extractNeverWritesOverItsOwnSource() throws {
        let dir = try TemporaryDirectory()
        let path = try demoLedger(dir)
        let before = try Ledger(path: path).lastSeq()
        let link = dir.path("link.ledger")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
        for output in [path, link, dir.path("./demo.ledger")] {
            let result = try cli(["extract", path, "--transaction", "t1", "-o", output, "--force"])
            #expect(result.status == 2 && result.stderr.contains("is the ledger being extracted from"), "\(result.stderr)")
        }
        #expect(try Ledger(path: path).lastSeq() == before)
        #expect(try cli(["verify", path]).status == 0)
    }

    @Test func aKeyFileMustBeLongAndPrivate() throws {
        let dir = try TemporaryDirectory()
        let key = dir.path("chain.key")
        let path = dir.path("keyed.ledger")
        let line = #"{"type":"restoreStarted","at":"2024-03-01T00:00:00Z"}"#
        _ = FileManager.default.createFile(atPath: key, contents: Data("short".utf8), attributes: [.posixPermissions: 0o600])
        let short = try cli(["append", path, "--key-file", key], stdin: line)
        #expect(short.status == 2 && short.stderr.contains("at least 16"), "\(short.stderr)")
        try Data((0..<32).map { UInt8($0) }).write(to: URL(fileURLWithPath: key))
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key)
        let open = try cli(["append", path, "--key-file", key], stdin: line)
        #expect(open.status == 2 && open.stderr.contains("readable by group or others") && open.stderr.contains("chmod 600"), "\(open.stderr)")
        #expect(!FileManager.default.fileExists(atPath: path))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: key)
        #expect(try cli(["append", path, "--key-file", key], stdin: line).status == 0)
        #expect(try cli(["verify", path, "--key-file", key]).status == 0)
    }

    /// A small ledger with a download, an early finish and its automatic cancellation.
    func demoLedger(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.path("demo.ledger")
        let lines = [
            #"{"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"book","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"contents":[{"content":"ch1","contentVersion":"1.0","contentLength":100}]}"#,
            #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"book","user":"alice"}"#,
            #"{"type":"transactionPurchased","at":"2024-03-01T09:00:05Z","transaction":"t1","downloads":[{"download":"t1-d1","content":"ch1","contentVersion":"1.0","contentLength":100}]}"#,
            #"{"type":"downloadStarted","at":"2024-03-01T09:00:06Z","download":"t1-d1"}"#,
            #"{"type":"transactionFinished","at":"2024-03-01T09:00:07Z","transaction":"t1"}"#,
        ]
        let result = try cli(["append", path], stdin: lines.joined(separator: "\n"))
        guard result.status == 0 else { throw LedgerError.make(.malformedInput, result.stderr) }
        return path
    }
}
