import Foundation
import Testing

/// What the CLI loads at every start, whatever the command.
@Suite struct StartupTests {
    /// On Linux the CLI carries the Swift runtime and Foundation in its binary (`-static-stdlib`,
    /// Package.swift): loading them as libraries took about 6 ms of every command. And it links
    /// the uploader without URLSession (PurchaseLedgerUploaderCore): FoundationNetworking would
    /// load libcurl and about 30 libraries more at every start, 7 ms of each command
    /// (docs/performance.md, "The CLI's start").
    @Test(.enabled(if: isLinux, "glibc's dynamic loader says what it loads"))
    func theCLILoadsNoSwiftLibraryAndNoNetworking() throws {
        // glibc's LD_DEBUG=libs names every library the loader looks for and loads, on stderr
        // (LD_DEBUG_OUTPUT, which would send that to a file, is left out).
        var environment = ProcessInfo.processInfo.environment
        environment["LD_DEBUG_OUTPUT"] = nil
        environment["LD_DEBUG"] = "libs"
        let dir = try TemporaryDirectory()
        let errors = dir.path("stderr")
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        let process = Process()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["--help"]
        process.environment = environment
        process.standardOutput = FileHandle.nullDevice
        process.standardError = handle
        try process.run()
        process.waitUntilExit()
        try handle.close()
        #expect(process.terminationStatus == 0)
        let lines = String(decoding: try Data(contentsOf: URL(fileURLWithPath: errors)), as: UTF8.self).split(separator: "\n")
        #expect(lines.contains { $0.contains("libsqlite3") }, "LD_DEBUG named no library: \(lines.prefix(5))")
        let swift = lines.filter { $0.contains("libswiftCore") || $0.contains("libFoundation") || $0.contains("libdispatch") }
        #expect(swift.isEmpty, "the CLI loads \(swift.prefix(3))")
        let networking = lines.filter { $0.contains("libFoundationNetworking") || $0.contains("libcurl") }
        #expect(networking.isEmpty, "the CLI loads \(networking.prefix(3))")
    }
}

private let isLinux: Bool = {
    #if os(Linux)
        true
    #else
        false
    #endif
}()
