import ArgumentParser
import Foundation
import PurchaseLedger

struct RebuildCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebuild",
        abstract: "Rebuild every projection table from the log.",
        discussion: """
            Replays the log in memory and, in one transaction, makes every projection table equal \
            to what the log gives: rows missing, different or extra are written, the rest left \
            alone, and the counts printed. A table mostly wrong is rewritten whole. --full \
            rewrites every row (and so every index) even where it matches. When every stored \
            snapshot was written by an earlier version of the library (which the current one \
            cannot read), snapshots are taken again during the replay, as an import takes them.

            Example:
              purchase-ledger rebuild user.ledger
              purchase-ledger rebuild user.ledger --full
              purchase-ledger rebuild user.ledger --json
            """)

    @OptionGroup var options: LedgerOptions

    @Flag(help: "Rewrite every row in bulk, even rows that already match the log.")
    var full = false

    @Flag(help: "Print the summary as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func run() async throws {
        let console = Console.current
        let start = Date()
        let ledger = try options.open(readOnly: false)
        let summary = try ledger.rebuildProjections(rewritingEveryRow: full) { done, total in console.progress("replayed \(done)/\(total)") }
        console.endProgress()
        let seconds = String(format: "%.2f", Date().timeIntervalSince(start))
        // The evidence rows were remade with the projections: what they say under the roots.
        let evidence = try await appleRoots.evidenceLevels(of: ledger)
        if json {
            console.printJSON { w in
                w.field("events", summary.events)
                w.field("rowsWritten", summary.rowsWritten)
                w.field("rowsDeleted", summary.rowsDeleted)
                w.field("rowsUnchanged", summary.rowsUnchanged)
                w.field("snapshotsTaken", summary.snapshotsTaken)
                w.field("full", full)
                w.key("seconds")
                w.raw(seconds)
                if let evidence { AppleRootOptions.write(evidence, to: &w) }
            }
            return
        }
        let rows =
            full
            ? "\(rows(summary.rowsWritten)) rewritten"
            : "\(rows(summary.rowsWritten)) written, \(summary.rowsDeleted) deleted, \(summary.rowsUnchanged) already matched the log"
        console.print("rebuilt the projections from \(summary.events) events in \(seconds) s: \(rows)")
        if summary.snapshotsTaken > 0 {
            console.print("took \(summary.snapshotsTaken) snapshots again: the stored ones were written by an earlier version and could not be read")
        }
        if let evidence { console.print(AppleRootOptions.describe(evidence)) }
    }
}

/// `1 row`, `2 rows`.
func rows(_ n: Int) -> String { n == 1 ? "1 row" : "\(n) rows" }
