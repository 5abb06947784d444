import Foundation
import Testing

/// README.md's library snippets run as a user pastes them: `Tools/readme-snippets` is made of them
/// (by Tools/snippets/readme.py), and runs them in order in a fresh folder.
@Suite struct ReadmeSnippetTests {
    func run(_ executable: String, _ arguments: [String]) throws -> (status: Int32, output: String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let output = FileManager.default.temporaryDirectory.appending(path: "readme-snippets-\(UUID().uuidString).out")
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        defer { try? FileManager.default.removeItem(at: output) }
        let handle = try FileHandle(forWritingTo: output)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        process.waitUntilExit()
        try handle.close()
        return (process.terminationStatus, try String(contentsOf: output, encoding: .utf8))
    }

    @Test func theExecutableIsWhatTheReadmeSays() throws {
        let generated = try run("/usr/bin/env", ["python3", packageRoot.appending(path: "Tools/snippets/readme.py").path, "--print"])
        #expect(generated.status == 0, "\(generated.output)")
        let committed = try String(contentsOf: packageRoot.appending(path: "Tools/readme-snippets/main.swift"), encoding: .utf8)
        #expect(generated.output == committed, "README.md's library blocks changed: run python3 Tools/snippets/readme.py")
    }

    @Test func theReadmesLibrarySnippetsRunAsWritten() throws {
        for round in 1...2 {
            // Twice: a second run over what the first left must work as well (a fresh folder each
            // time for the ledger; the repro's path in the temporary folder is the same).
            let result = try run(builtProduct("readme-snippets", override: "README_SNIPPETS_BIN"), [])
            #expect(result.status == 0, "round \(round): \(result.output)")
            #expect(result.output.contains("finishWhilePurchasing: transaction t1 is still purchasing"), "\(result.output)")
            #expect(result.output.contains("1 productRegistered\n2 paymentQueued\n"), "\(result.output)")
            #expect(result.output.contains("kept 2 of 2 events"), "\(result.output)")
            #expect(result.output.hasSuffix("readme-snippets: 2 blocks ran\n"), "\(result.output)")
        }
    }
}
