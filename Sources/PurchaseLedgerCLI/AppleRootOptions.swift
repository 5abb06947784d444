import ArgumentParser
import Foundation
import PurchaseLedger

/// `--apple-root FILE` (repeatable) and `--only-given-roots`: the roots Apple's signatures are
/// judged with (docs/rules.md, "Apple's signature"). Apple Root CA - G3 is built in.
struct AppleRootOptions: ParsableArguments {
    @Option(
        name: .customLong("apple-root"),
        help: ArgumentHelp(
            "Also trust this root certificate (PEM or DER) for Apple's signed transactions; repeat for several.", valueName: "file"),
        completion: .file())
    var files: [String] = []

    @Flag(name: .customLong("only-given-roots"), help: "Trust only the --apple-root files, not the built-in Apple Root CA - G3.")
    var onlyGiven = false

    func validate() throws {
        if onlyGiven && files.isEmpty { throw ValidationError("--only-given-roots needs at least one --apple-root file") }
    }

    /// The verifier of these roots; an unreadable or malformed file is named.
    func verifier() throws -> AppleSignatureVerifier {
        guard !files.isEmpty else { return AppleSignatureVerifier() }
        let given = try AppleTrustRoots(files: files.map { (name: $0, contents: [UInt8](try KeyFiles.read($0, what: "the root certificate", secret: false))) })
        return AppleSignatureVerifier(roots: onlyGiven ? given : AppleTrustRoots.apple.adding(given))
    }

    /// How many of `ledger`'s signed transactions have each evidence level, their chains judged
    /// with these roots; nil when it holds none.
    func evidenceLevels(of ledger: Ledger) async throws -> [String: Int]? {
        let evidence = try await ledger.appleEvidence(verifier: verifier())
        guard !evidence.isEmpty else { return nil }
        var levels: [String: Int] = [:]
        for found in evidence.values { levels[found.evidence.name, default: 0] += 1 }
        return levels
    }

    /// `levels` as a line: `3 signed transactions: 2 apple, 0 xcode, 1 invalid`.
    static func describe(_ levels: [String: Int], checkedAgain: Bool = false) -> String {
        let total = levels.values.reduce(0, +)
        return "\(total) signed transaction\(total == 1 ? "" : "s")\(checkedAgain ? " checked again" : ""): \(levels["apple"] ?? 0) apple, "
            + "\(levels["xcode"] ?? 0) xcode, \(levels["invalid"] ?? 0) invalid (replay --json names each; --apple-root trusts more roots)"
    }

    /// `levels` as the `evidence` member of a command's JSON.
    static func write(_ levels: [String: Int], to w: inout JSONWriter) {
        w.key("evidence")
        w.object { w in for level in ["apple", "xcode", "invalid"] { w.field(level, levels[level] ?? 0) } }
    }
}
