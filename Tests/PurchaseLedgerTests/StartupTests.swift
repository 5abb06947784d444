import Foundation
import Testing

/// What the CLI loads at every start, whatever the command.
@Suite struct StartupTests {
    /// The CLI links the uploader without URLSession (PurchaseLedgerUploaderCore): on Linux,
    /// FoundationNetworking would load libcurl and about 30 libraries more at every start, 7 ms
    /// of each command (docs/performance.md, "The CLI's start").
    @Test func theCLIDoesNotLoadFoundationNetworking() throws {
        #if os(Linux)
            // The dynamic loader lists every library it loads (glibc's LD_DEBUG).
            let result = try cli(["--help"], environment: ["LD_DEBUG": "libs"])
            #expect(result.status == 0)
            let loaded = result.stderr.split(separator: "\n").filter { $0.contains("calling init:") }
            #expect(loaded.contains { $0.contains("libFoundationEssentials") }, "LD_DEBUG listed no library: \(result.stderr.prefix(500))")
            let networking = loaded.filter { $0.contains("libFoundationNetworking") || $0.contains("libcurl") }
            #expect(networking.isEmpty, "the CLI loads \(networking)")
        #endif
    }
}
