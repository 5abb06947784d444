import ArgumentParser
import Foundation
import PurchaseLedger

struct ExportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the log as JSON Lines on stdout.",
        discussion: """
            Each line carries `seq`, and `anomaly` / `appendedByLedger` where they apply. With --redact, every \
            personal field (user ids, destinations, content and registered URLs, error messages, revocation \
            reasons, store ids) becomes a pseudonym keyed with this ledger's secret, so the file can be attached \
            to a bug report (docs/storage.md).

            Example:
              purchase-ledger export --redact user.ledger > bug-1234.jsonl
            """)

    @OptionGroup var options: LedgerOptions
    @Flag(help: "Replace every personal field (users, destinations, URLs, error texts, store ids) with keyed pseudonyms.")
    var redact = false

    func run() throws {
        let console = Console.current
        let ledger = try options.open()
        let redactor = redact ? try ledger.redactor() : nil
        let total = try ledger.lastSeq()
        try ledger.forEachEvent { e in
            // JSON cannot carry a NaN, and an importer would refuse what the file should never hold.
            if let wrong = InputLimits.storedValueProblem(e.event.body) {
                throw LedgerError.make(.corruptData, "a stored value the importer would refuse: \(wrong); the file was edited (verify says more)", seq: e.seq)
            }
            let event = redactor?.redact(e.event) ?? e.event
            console.print(JSONLines.encode(event, seq: e.seq, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger))
            if e.seq % 50_000 == 0 { console.progress("exported \(e.seq)/\(total)") }
            return true
        }
        console.endProgress()
    }
}
