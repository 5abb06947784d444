import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct AppleImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apple-import",
        abstract: "Store Apple's signed record (transaction history, transaction info, notifications) in a ledger or a fleet store, verified.",
        discussion: """
            Reads App Store Server API responses (a getTransactionHistory page, a getTransactionInfo \
            response) and App Store Server Notifications V2 bodies ({"signedPayload": ...}), one JSON \
            document per file or JSON Lines, "-" for stdin. Every JWS is verified with Apple Root CA - G3 \
            and any --apple-root: one that is not Apple's refuses the whole import, naming the file and \
            the line, and nothing is written. What the ledger holds already (the same notificationUUID, \
            or the facts of a transaction's latest statement, re-signed) is not stored again. History \
            pages down to one with "hasMore": false record that the user's history is complete: give \
            one customer's pages per run. Then \
            `report --view divergence` shows where the device and Apple disagree.

            Into a fleet store (a postgres:// URL, migrated), Apple's records go to tables of their \
            own, keyed by Apple's transaction id, matched to users by every shipped ledger; its \
            divergence report joins them to all of a user's devices.

            Examples:
              purchase-ledger apple-import user.ledger page-1.json page-2.json
              purchase-ledger apple-import user.ledger notifications.jsonl --json
              purchase-ledger apple-import postgres://db.internal/fleet n.jsonl
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "Apple's documents: JSON or JSON Lines files, - for stdin.", completion: .file(extensions: ["json", "jsonl"]))
    var files: [String]
    @Option(
        help:
            "The user whose history this is (its pages are then that user's, whatever a device claims; required for history pages into a fleet store), and of records that match no transaction."
    )
    var user: String?
    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("give at least one file of Apple's documents (- for stdin)") }
    }

    func run() async throws {
        var documents: [PlacedAppleDocument] = []
        for file in files {
            let bytes: [UInt8]
            if file == "-" {
                bytes = [UInt8](FileHandle.standardInput.readDataToEndOfFile())
            } else {
                guard let data = FileManager.default.contents(atPath: file) else { throw LedgerError.io("cannot read \(file)") }
                bytes = [UInt8](data)
            }
            let name = file == "-" ? "stdin" : file
            do {
                documents += try AppleDocument.parse(bytes, file: name)
            } catch {
                throw LedgerError.make(.malformedInput, error.description + "; nothing was written")
            }
        }
        let summary: AppleImportSummary
        do {
            if FleetAddress.isURL(options.ledger) {
                let fleet = try await FleetStore.connect(options.ledger)
                do {
                    // A fleet records no app: --apple-bundle-id names the one to take.
                    let roots = try appleRoots.verifier().roots
                    summary = try await fleet.importApple(documents, verifier: AppleSignatureVerifier(roots: roots, bundleID: options.appleBundleID), user: user)
                    await fleet.close()
                } catch {
                    await fleet.close()
                    throw error
                }
            } else {
                summary = try await options.open(readOnly: false).importApple(documents, verifier: appleRoots.verifier(), user: user)
            }
        } catch let error as AppleImportError {
            throw LedgerError.make(.malformedInput, error.description + "; nothing was written")
        }
        let console = Console.current
        if json {
            console.printJSON { w in
                w.field("transactions", summary.transactions)
                w.field("notifications", summary.notifications)
                w.field("histories", summary.histories)
                w.field("alreadyHeld", summary.alreadyHeld)
                w.field("firstSeq", summary.firstSeq)
                w.field("lastSeq", summary.lastSeq)
            }
            return
        }
        var line =
            "stored \(summary.transactions) Apple transaction\(summary.transactions == 1 ? "" : "s"), \(summary.notifications) notification\(summary.notifications == 1 ? "" : "s")"
        if summary.histories > 0 { line += ", \(summary.histories) complete histor\(summary.histories == 1 ? "y" : "ies")" }
        if let first = summary.firstSeq { line += " (seq \(first)...\(summary.lastSeq))" }
        if summary.alreadyHeld > 0 { line += "; \(summary.alreadyHeld) already held" }
        console.print(line)
    }
}
