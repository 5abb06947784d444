import ArgumentParser
import Foundation
import PurchaseLedger

struct KeygenCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keygen",
        abstract: "Make an Ed25519 key pair for signing checkpoints: FILE (the signing key, mode 0600) and FILE.pub.",
        discussion: """
            Keep the signing key away from the ledgers it vouches for (on the server that receives \
            checkpoints, or with the operator), and hand the .pub file to whoever verifies. An existing \
            FILE is never replaced.

            Example:
              purchase-ledger keygen -o support.key
            """)

    @Option(name: [.customShort("o"), .customLong("output")], help: "The signing key's file; the public key goes to FILE.pub.")
    var output: String

    func run() throws {
        let key = CheckpointSigningKey()
        for path in [output, output + ".pub"] where FileManager.default.fileExists(atPath: path) {
            throw LedgerError.io("\(path) already exists; keygen never replaces a key")
        }
        // The signing key is created with mode 0600 before a byte of it is written.
        guard FileManager.default.createFile(atPath: output, contents: Data(key.fileText.utf8), attributes: [.posixPermissions: 0o600]) else {
            throw LedgerError.io("cannot write \(output)")
        }
        guard FileManager.default.createFile(atPath: output + ".pub", contents: Data(key.publicKey.fileText.utf8), attributes: [.posixPermissions: 0o644]) else {
            throw LedgerError.io("cannot write \(output).pub")
        }
        Console.current.print("wrote the signing key \(output) (keep it secret) and the public key \(output).pub")
    }
}

struct CheckpointCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "checkpoint",
        abstract: "Sign the ledger's history as it is now (ledger id, seq, the hash chain's link there) and print the checkpoint.",
        discussion: """
            The checkpoint is a small JSON statement (docs/format.md) to keep outside the file: in the \
            ticket, in the fleet, in a log. Later, `verify --checkpoint` shows whether the file still \
            extends it: a file rolled back, truncated or rewritten (even with every link recomputed) does \
            not. Nothing in the ledger changes.

            Example:
              purchase-ledger checkpoint user.ledger --signing-key support.key \\
                  -o user.checkpoint.json
            """)

    @OptionGroup var options: LedgerOptions
    @Option(name: .customLong("signing-key"), help: "The signing key (from keygen).", completion: .file())
    var signingKey: String
    @Option(name: [.customShort("o"), .customLong("output")], help: "Write the checkpoint here instead of stdout.")
    var output: String?

    func run() throws {
        let key = try CheckpointSigningKey(fileText: try KeyFiles.text(signingKey, what: "the signing key", secret: true))
        let checkpoint = try options.open().checkpoint(signingKey: key)
        if let output {
            guard FileManager.default.createFile(atPath: output, contents: Data((checkpoint.json + "\n").utf8)) else {
                throw LedgerError.io("cannot write \(output)")
            }
            Console.current.print("wrote \(output): ledger \(checkpoint.ledgerID) at seq \(checkpoint.seq)")
        } else {
            Console.current.print(checkpoint.json)
        }
    }
}

enum KeyFiles {
    /// A key file's bytes (`what` names it in errors); a secret one must not be readable by group
    /// or others: a key anyone on the machine can read protects nothing.
    static func read(_ path: String, what: String, secret: Bool) throws -> Data {
        var info = stat()
        guard stat(path, &info) == 0, let data = FileManager.default.contents(atPath: path) else {
            throw LedgerError.io("cannot read \(what) \(path)")
        }
        if secret && info.st_mode & 0o077 != 0 {
            throw LedgerError.make(
                .malformedInput, "\(what) \(path) is readable by group or others (mode \(String(info.st_mode & 0o777, radix: 8))); run chmod 600 \(path)")
        }
        return data
    }

    static func text(_ path: String, what: String, secret: Bool) throws -> String {
        String(decoding: try read(path, what: what, secret: secret), as: UTF8.self)
    }
}
