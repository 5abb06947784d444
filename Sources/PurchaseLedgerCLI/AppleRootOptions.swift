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
}
