import Foundation
import PurchaseLedgerFleetTesting
import Testing

/// README.md's library snippets run as a user pastes them: `Tools/readme-snippets` is made of them
/// (by Tools/snippets/readme.py), and runs them in order in a fresh folder.
@Suite struct ReadmeSnippetTests {
    @Test func theExecutableIsWhatTheReadmeSays() throws {
        // (LocalPostgres.run: any program, its output through a file; it throws, with that output, on a failure.)
        let generated = try LocalPostgres.run("/usr/bin/env", ["python3", packageRoot.appending(path: "Tools/snippets/readme.py").path, "--print"])
        let committed = try String(contentsOf: packageRoot.appending(path: "Tools/readme-snippets/main.swift"), encoding: .utf8)
        #expect(generated == committed, "README.md's library blocks changed: run python3 Tools/snippets/readme.py")
    }

    @Test func theReadmesLibrarySnippetsRunAsWritten() throws {
        for round in 1...2 {
            // Twice: a second run over what the first left must work as well (a fresh folder each
            // time for the ledger; the repro's path in the temporary folder is the same).
            let output = try LocalPostgres.run(builtProduct("readme-snippets", override: "README_SNIPPETS_BIN"), [])
            #expect(output.contains("finishWhilePurchasing: transaction t1 is still purchasing"), "round \(round): \(output)")
            #expect(output.contains("1 productRegistered\n2 paymentQueued\n"), "\(output)")
            #expect(output.contains("kept 2 of 2 events"), "\(output)")
            #expect(output.hasSuffix("readme-snippets: 2 blocks ran\n"), "\(output)")
        }
    }
}
