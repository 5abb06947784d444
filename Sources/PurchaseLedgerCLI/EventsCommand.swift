import ArgumentParser
import Foundation
import PurchaseLedger

struct EventsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "List stored events with their seq, anomaly flags and the cancellations the ledger appended.",
        discussion: """
            --transaction also lists the events of the transaction's downloads. A transaction or \
            download with no event in the ledger is an error (exit status 2), not an empty list.

            Examples:
              purchase-ledger events user.ledger --transaction t1
              purchase-ledger events user.ledger --type downloadFailed --json \\
                  | jq -r .download
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "Only events of this transaction and its downloads.") var transaction: String?
    @Option(help: "Only events of this download.") var download: String?
    @Option(help: "Only events of this type (e.g. downloadFinished).") var type: String?
    @Option(help: "Start at this seq.") var from: Int64 = 1
    @Option(help: "Stop after this many events.") var limit: Int?
    @Flag(help: "One JSON object per line, as export writes them.") var json = false

    func validate() throws {
        try NumberOption.check("--from", from, 1...Int64.max)
        try NumberOption.check("--limit", limit, 0...Int.max)
    }

    func run() throws {
        let console = Console.current
        var wantedType: EventType?
        if let type {
            guard let t = EventType(name: type) else {
                throw ValidationError("unknown event type \(type); one of \(EventType.allCases.map(\.name).joined(separator: ", "))")
            }
            wantedType = t
        }
        let ledger = try options.open()
        let download = download.map(Identifier.normalize)
        var shown = 0
        // Whether the transaction or download asked for has any event at all (before `from` too).
        var found = false
        let show = { (e: RecordedEvent) -> Bool in
            if let download, e.event.body.downloadID != download { return true }
            found = true
            guard e.seq >= from else { return true }
            if let wantedType, e.event.type != wantedType { return true }
            console.print(json ? e.jsonLine : describe(e, console: console))
            shown += 1
            return limit.map { shown < $0 } ?? true
        }
        // A transaction's or a download's events are read from the snapshot before its first one.
        if let transaction {
            try ledger.forEachEvent(ofTransaction: transaction, show)
        } else if let download {
            try ledger.forEachEvent(ofDownload: download, show)
        } else {
            try ledger.forEachEvent(from: from, show)
        }
        // A mistyped id says so, as `timeline` does, rather than printing nothing.
        if let transaction, !found {
            throw LedgerError.make(.malformedInput, "transaction \(Identifier.normalize(transaction))\(download.map { " has no download \($0)" } ?? " is not in this ledger")")
        }
        if let download, !found, transaction == nil {
            throw LedgerError.make(.malformedInput, "download \(download) is not in this ledger")
        }
    }
}

/// `   42  2024-03-01T00:07:13.091Z  downloadProgressed  download:t1-d1  progress=0.74 ...`
func describe(_ e: RecordedEvent, console: Console) -> String {
    var w = JSONLines.encode(e.event)
    // The fields after type and at, as key=value, for reading at a glance.
    if let json = try? JSONSerialization.jsonObject(with: Data(w.utf8)) as? [String: Any] {
        w = json.filter { $0.key != "type" && $0.key != "at" }.sorted { $0.key < $1.key }.map { key, value in
            if let d = value as? [String: Any] { return "\(key)=\(d["domain"] ?? "")/\(d["code"] ?? "")" }
            if let list = value as? [[String: Any]] { return "\(key)=[\(list.compactMap { $0["download"] as? String }.joined(separator: ","))]" }
            return "\(key)=\(value)"
        }.joined(separator: " ")
        // A value's line breaks (an unsigned text field, such as a history's revision) must not
        // start a line of their own.
        w = VerifyCommand.oneLine(w)
    }
    var line = String(e.seq).leftPad(7) + "  " + console.dim(e.event.at.description) + "  " + e.event.type.name.rightPad(24) + "  " + w
    if let rule = e.anomaly { line += "  " + console.yellow("[anomaly: \(rule.name)]") }
    if e.appendedByLedger { line += "  " + console.dim("[appended by the ledger]") }
    return line
}

extension String {
    /// The columns the text takes in a table: its characters, counted from its bytes when it is
    /// ASCII (counting characters walks grapheme clusters, a fifth of a 100,000-row table).
    var width: Int {
        var copy = self
        let ascii = copy.withUTF8 { utf8 in
            for b in utf8 where b >= 0x80 { return false }
            return true
        }
        return ascii ? utf8.count : count
    }

    func leftPad(_ width: Int) -> String {
        let own = self.width
        return own >= width ? self : String(repeating: " ", count: width - own) + self
    }

    /// Pads to `width`, never cutting.
    func rightPad(_ width: Int) -> String {
        let own = self.width
        return own >= width ? self : self + String(repeating: " ", count: width - own)
    }
}
