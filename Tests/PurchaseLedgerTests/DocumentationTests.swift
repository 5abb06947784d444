import Foundation
import GRDB
import PurchaseLedgerFleetTesting
import Testing

@testable import PurchaseLedger

/// Every code block of README.md and docs/*.md runs in the suite as written, or says on the line
/// before it why it cannot (`<!-- not run: ... -->`). Tools/snippets/docs.py lists the blocks and
/// how each runs: shell blocks in their document's order in a fresh folder (a fleet store started
/// by `Tools/fleet-up.sh` where the docs start one), Swift blocks through Tools/readme-snippets and
/// Tools/docs-snippets, SQL on a ledger file, JSON parsed.
@Suite(.serialized) struct DocumentationTests {
    struct Block: Decodable {
        var file: String
        var line: Int
        var language: String
        var how: String
        var note: String
        var text: String

        var place: String { "\(file):\(line)" }
    }

    static let script = packageRoot.appending(path: "Tools/snippets/docs.py").path

    static func blocks() throws -> [Block] {
        let json = try LocalPostgres.run("/usr/bin/env", ["python3", script, "--blocks"])
        return try JSONDecoder().decode([Block].self, from: Data(json.utf8))
    }

    @Test func everyBlockRunsOrSaysWhyNot() throws {
        let blocks = try Self.blocks()
        #expect(blocks.count >= 20, "README.md and docs/ have their blocks")
        for block in blocks {
            #expect(block.how != "unknown", "\(block.place): the suite has no way to run a ```\(block.language) block")
            if block.how == "not run" {
                #expect(block.note.count > "not run: ".count + 10, "\(block.place): say why the block is not run")
            }
            if block.how == "by name" {
                // A test or a script of Tools/ runs it by its name: `documentedSQL("NAME"` in a
                // test, `documented NAME` in a script (grep exits non-zero, and run throws, if none).
                let pattern = #"(documentedSQL\("\#(block.note)"|documented \#(block.note) )"#
                let users = try LocalPostgres.run(
                    "/usr/bin/env",
                    [
                        "grep", "-rlE", "--include=*.swift", "--include=*.sh", pattern, packageRoot.appending(path: "Tests").path,
                        packageRoot.appending(path: "Tools").path,
                    ])
                #expect(!users.isEmpty, "\(block.place): nothing runs \(block.note)")
            }
        }
        #expect(blocks.filter { $0.how == "shell" }.map(\.file) == ["README.md", "README.md", "README.md", "README.md", "docs/fleet.md"])
    }

    @Test func theDocsSnippetsExecutableIsWhatTheDocsSay() throws {
        let generated = try LocalPostgres.run("/usr/bin/env", ["python3", Self.script, "--print"])
        let committed = try String(contentsOf: packageRoot.appending(path: "Tools/docs-snippets/main.swift"), encoding: .utf8)
        #expect(generated == committed, "a Swift block of docs/ changed: run python3 Tools/snippets/docs.py")
    }

    /// The shell blocks of each document, in order, with its Swift blocks between them where they
    /// stand, as one script in a fresh folder: every command must succeed.
    @Test func everyShellAndSwiftBlockRunsInItsDocumentsOrder() throws {
        let blocks = try Self.blocks().filter { $0.how == "shell" || $0.how == "docs-snippets" }
        let documents = blocks.map(\.file).reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }
        #expect(documents == ["README.md", "docs/fleet.md"])
        let snippets = builtProduct("docs-snippets", override: "DOCS_SNIPPETS_BIN")
        for document in documents {
            // An empty folder, as the README says; the script beside it.
            let dir = try TemporaryDirectory(), scripts = try TemporaryDirectory()
            let script = try LocalPostgres.run("/usr/bin/env", ["python3", Self.script, "--script", document])
            try script.write(toFile: scripts.path("run.sh"), atomically: true, encoding: .utf8)
            // PATH as README.md's build line sets it: the built CLI, then Tools/ (fleet-up.sh).
            let path =
                URL(fileURLWithPath: binary).deletingLastPathComponent().path + ":" + packageRoot.appending(path: "Tools").path + ":"
                + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
            // (LocalPostgres.run: posix_spawn, so a server a block starts holds none of this process's descriptors.)
            let output = try LocalPostgres.run(
                "/usr/bin/env",
                [
                    "PATH=\(path)", "PURCHASE_LEDGER_BIN=\(binary)", "DOCS_SNIPPETS_BIN=\(snippets)", "bash", "-c", "cd \"$1\" && bash \"$2\"", "docs", dir.url.path,
                    scripts.path("run.sh"),
                ])
            let ran = blocks.filter { $0.file == document }.map { "### \($0.place)" }
            #expect(ran.allSatisfy { output.contains($0) }, "\(document): \(output)")
            switch document {
            case "README.md":
                #expect(output.contains("ok: the file extends the checkpoint"), "\(output)")
                #expect(output.contains("erased the user from 2 ledgers of the fleet store"), "\(output)")
                #expect(output.contains("fleet-up: stopped"), "the fleet store the README started is gone: \(output)")
                #expect(output.contains("stored 73 events, lag 0"), "the uploader of the README uploaded: \(output)")
            default:
                #expect(output.contains("new events of ledger"), "the Swift block shipped: \(output)")
            }
        }
    }

    /// SQL blocks (not named for PostgreSQL) run on a ledger file made by `purchase-ledger demo`.
    @Test func sqlBlocksRunOnALedgerFile() throws {
        let blocks = try Self.blocks().filter { $0.how == "sqlite" }
        #expect(!blocks.isEmpty)
        let dir = try TemporaryDirectory()
        let made = try cli(["demo", dir.path("demo.ledger")])
        #expect(made.status == 0, "\(made.stderr)")
        let queue = try DatabaseQueue(path: dir.path("demo.ledger"))
        for block in blocks {
            do {
                // Each statement, its rows read: a column or table the file lacks fails here.
                try queue.read { db in
                    let statements = try db.allStatements(literal: SQL(sql: block.text))
                    while let statement = try statements.next() { _ = try Row.fetchAll(statement) }
                }
            } catch {
                Issue.record("\(block.place): \(error)")
            }
        }
    }

    /// docs/format.md, docs/json.md and docs/storage.md are enough to read a ledger: an independent
    /// reader written from them alone (Tools/doc-reader.py, Python's standard library, its own
    /// LZ4) prints every event exactly as `export` does and recomputes the hash chain and every
    /// personal value's commitment; on the demo, on a file of edge cases (every event type,
    /// control and bidirectional characters, times at both ends of the range, odd doubles), after
    /// erasures, and on a keyed chain.
    @Test func anIndependentReaderWrittenFromTheDocsReadsEveryLedgerAsExportDoes() throws {
        let dir = try TemporaryDirectory()
        let reader = packageRoot.appending(path: "Tools/doc-reader.py").path
        let edges = packageRoot.appending(path: "Tools/doc-reader-edges.jsonl").path
        try Data((0..<32).map { UInt8($0 * 7 % 256) }).write(to: URL(fileURLWithPath: dir.path("chain.key")))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: dir.path("chain.key"))
        #expect(try cli(["demo", dir.path("demo.ledger")]).status == 0)
        #expect(try cli(["import", dir.path("edges.ledger"), edges]).status == 0)
        #expect(try cli(["import", dir.path("erased.ledger"), edges]).status == 0)
        for forget in [["--user", "u2"], ["--download", "k1"], ["--user", "ü-ser\n\u{85}"]] {
            let erased = try cli(["forget", dir.path("erased.ledger")] + forget)
            #expect(erased.status == 0, "\(forget): \(erased.stderr)")
        }
        #expect(try cli(["import", dir.path("keyed.ledger"), edges, "--key-file", dir.path("chain.key")]).status == 0)
        // Signed transactions (a chain made here): purchases, a restore with no other terms, a
        // revocation, a flagged one; then the same with one user's erased.
        let signed = try SignedTransactionLedgerTests.Fixture()
        try signed.lines.write(toFile: dir.path("signed.jsonl"), atomically: true, encoding: .utf8)
        for name in ["signed", "signed-erased"] { #expect(try cli(["import", dir.path("\(name).ledger"), dir.path("signed.jsonl")]).status == 0) }
        #expect(try cli(["forget", dir.path("signed-erased.ledger"), "--user", "u2"]).status == 0)
        for (name, key) in [("demo", false), ("edges", false), ("erased", false), ("keyed", true), ("signed", false), ("signed-erased", false)] {
            let path = dir.path("\(name).ledger")
            let keyArguments = key ? ["--key-file", dir.path("chain.key")] : []
            let exported = try cli(["export", path] + keyArguments)
            #expect(exported.status == 0, "\(name): \(exported.stderr)")
            let read = try LocalPostgres.run("/usr/bin/env", ["python3", reader, path, "--check-chain"] + keyArguments)
            #expect(read == exported.stdout, "\(name): the reader and export differ")
        }
    }

    /// JSON blocks parse; one that shows an event decodes as one.
    @Test func jsonBlocksParse() throws {
        let blocks = try Self.blocks().filter { $0.how == "json" }
        #expect(blocks.count >= 3)
        for block in blocks {
            let object = try #require(try? JSONSerialization.jsonObject(with: Data(block.text.utf8)), "\(block.place) is not JSON")
            if let event = object as? [String: Any], event["type"] != nil, event["at"] != nil {
                let line = String(decoding: try JSONSerialization.data(withJSONObject: event), as: UTF8.self)
                #expect(throws: Never.self, "\(block.place) is an event") { _ = try JSONLines.decode(line) }
            }
        }
    }
}
