import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct AppleImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "apple-import",
        abstract: "Store Apple's signed record (transaction history, transaction info, notifications) in a ledger, verified.",
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

            Examples:
              purchase-ledger apple-import user.ledger page-1.json page-2.json
              purchase-ledger apple-import user.ledger notifications.jsonl --json
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "Apple's documents: JSON or JSON Lines files, - for stdin.", completion: .file(extensions: ["json", "jsonl"]))
    var files: [String]
    @Option(help: "The ledger's user whose history this is, for Apple transactions that match none of the ledger's.")
    var user: String?
    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func validate() throws {
        guard !files.isEmpty else { throw ValidationError("give at least one file of Apple's documents (- for stdin)") }
        if FleetAddress.isURL(options.ledger) {
            throw ValidationError("apple-import stores into a ledger file; a fleet store of Apple's records is not built yet")
        }
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
        let ledger = try options.open(readOnly: false)
        let summary: AppleImportSummary
        do {
            summary = try await ledger.importApple(documents, verifier: appleRoots.verifier(), user: user)
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
