import ArgumentParser
import Foundation
import PurchaseLedger

struct StatsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "stats",
        abstract: "Counts by type, anomalies, bytes per event, compression ratio.",
        discussion: """
            Example:
              purchase-ledger stats user.ledger --json | jq .fileBytesPerEvent
            """)

    @OptionGroup var options: LedgerOptions
    @Flag(help: "Print as JSON.") var json = false

    func run() throws {
        let console = Console.current
        let s = try options.open().statistics()
        if json {
            func fixed(_ x: Double, _ digits: Int) -> String { String(format: "%.\(digits)f", x) }
            console.printJSON { w in
                w.field("events", s.events)
                w.key("countsByType")
                w.object { w in for t in EventType.allCases { if let n = s.countsByType[t] { w.field(t.name, n) } } }
                w.field("anomalies", s.anomalies)
                w.key("anomaliesByRule")
                w.object { w in for r in Rule.all { if let n = s.anomaliesByRule[r] { w.field(r.name, n) } } }
                w.field("appendedByLedger", s.appendedByLedger)
                w.field("fileBytes", s.fileBytes)
                w.key("fileBytesPerEvent"); w.raw(fixed(s.fileBytesPerEvent, 1))
                w.key("logBytesPerEvent"); w.raw(fixed(s.logBytesPerEvent, 1))
                w.key("payloadBytesPerEvent"); w.raw(fixed(s.payloadBytesPerEvent, 1))
                w.key("compressionRatio"); w.raw(fixed(s.compressionRatio, 2))
                w.field("blocks", s.blocks)
                w.field("tailEvents", s.tailEvents)
                w.field("snapshots", s.snapshots)
                w.field("snapshotBytes", s.snapshotBytes)
                w.field("dictionaries", s.dictionaries)
            }
            return
        }
        console.print(console.bold("\(s.events) events") + ", \(s.anomalies) anomal\(s.anomalies == 1 ? "y" : "ies"), \(s.appendedByLedger) cancellations appended by the ledger")
        var rows = [["type", "count"]]
        for t in EventType.allCases { if let n = s.countsByType[t] { rows.append([t.name, String(n)]) } }
        console.print(textTable(rows, console: console))
        if !s.anomaliesByRule.isEmpty {
            console.print("")
            var rows = [["anomaly", "count"]]
            for r in Rule.all { if let n = s.anomaliesByRule[r] { rows.append([r.name, String(n)]) } }
            console.print(textTable(rows, console: console))
        }
        console.print("")
        console.print("file: \(s.fileBytes) bytes, \(String(format: "%.1f", s.fileBytesPerEvent)) bytes/event (log, projections, snapshots, indexes)")
        if s.events < 10_000 {
            // A small file is mostly its fixed part (schema, indexes, identity, the first pages).
            console.print("  (a ledger of few events is mostly fixed overhead: per-event figures settle at about 100 bytes from tens of thousands of events)")
        }
        console.print(
            "log: \(String(format: "%.1f", s.logBytesPerEvent)) bytes/event stored, \(String(format: "%.1f", s.payloadBytesPerEvent)) bytes/event of binary payload; \(s.blocks) sealed blocks compressed \(String(format: "%.2f", s.compressionRatio))x, \(s.tailEvents) events in the open tail"
        )
        console.print("snapshots: \(s.snapshots) (\(s.snapshotBytes) bytes); dictionaries: \(s.dictionaries)")
    }
}
