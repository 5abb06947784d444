import ArgumentParser
import Foundation
import PurchaseLedger

/// A reader of a JSON Lines file, or of stdin for nil / "-".
func inputReader(_ file: String?) throws -> JSONLinesReader {
    if let file, file != "-" { return try JSONLinesReader(path: file) }
    return JSONLinesReader(fileDescriptor: STDIN_FILENO)
}

/// `evidence`: the evidence levels of the ledger's signed transactions after the write (nil:
/// it holds none).
func appendSummary(_ result: ImportSummary, json: Bool, console: Console, evidence: [String: Int]? = nil) {
    if json {
        console.printJSON { w in
            w.field("stored", result.stored)
            w.field("ignored", result.ignored)
            w.field("anomalies", result.anomalies)
            w.field("appendedByLedger", result.appendedByLedger)
            w.field("firstSeq", result.firstSeq)
            w.field("lastSeq", result.lastSeq)
            if let evidence { AppleRootOptions.write(evidence, to: &w) }
        }
        return
    }
    var line = "stored \(result.stored) event\(result.stored == 1 ? "" : "s")"
    if let first = result.firstSeq { line += " (seq \(first)...\(result.lastSeq))" }
    let automatic = result.appendedByLedger, anomalies = result.anomalies
    if automatic > 0 { line += ", \(automatic) automatic cancellation\(automatic == 1 ? "" : "s")" }
    if anomalies > 0 { line += ", \(console.yellow("\(anomalies) anomal\(anomalies == 1 ? "y" : "ies")"))" }
    if result.ignored > 0 { line += ", \(result.ignored) identical repeat\(result.ignored == 1 ? "" : "s") ignored" }
    let skipped = result.skippedLedgerAppended
    if skipped > 0 { line += ", \(skipped) exported automatic cancellation\(skipped == 1 ? "" : "s") left to the ledger" }
    console.print(line)
    if let evidence { console.print(AppleRootOptions.describe(evidence)) }
}

struct AppendCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "append",
        abstract: "Append JSON Lines events in one atomic write: all or nothing.",
        discussion: """
            Creates the ledger when missing. A rejected command or a malformed line stops the whole \
            append and leaves the ledger exactly as it was; the error names the line and the rule.

            Example:
              echo '{"type":"restoreStarted","at":"2024-03-01T09:15:02Z","user":"u1"}' \\
                  | purchase-ledger append my.ledger
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "A JSON Lines file (default: stdin).", completion: .file(extensions: ["jsonl"]))
    var file: String?
    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func run() async throws {
        let result = try options.importJSONLines(try inputReader(file))
        appendSummary(result, json: json, console: .current, evidence: try await appleRoots.evidenceLevels(of: options.open()))
    }
}

struct ImportCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a whole exported log (JSONL) in one atomic write, streamed, with progress.",
        discussion: """
            Like append, for large files. `seq` keys are ignored; cancellations marked \
            "appendedByLedger" are appended again by the ledger itself, at the same place.

            Example:
              purchase-ledger export user.ledger > user.jsonl
              purchase-ledger import copy.ledger user.jsonl
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "The JSON Lines file to import.", completion: .file(extensions: ["jsonl"]))
    var file: String
    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func run() async throws {
        let console = Console.current
        console.progress("reading \(file)...")
        let result = try options.importJSONLines(try inputReader(file)) { progress in
            var line = "checked \(progress.events) events"
            if let total = progress.totalBytes, total > 0 { line += " (\(progress.bytesRead * 100 / total)% of the file)" }
            console.progress(line)
        }
        console.endProgress()
        appendSummary(result, json: json, console: console, evidence: try await appleRoots.evidenceLevels(of: options.open()))
    }
}
