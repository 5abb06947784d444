import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

/// A reader of a JSON Lines file, or of stdin for nil / "-".
func inputReader(_ file: String?) throws -> JSONLinesReader {
    if let file, file != "-" { return try JSONLinesReader(path: file) }
    return JSONLinesReader(fileDescriptor: STDIN_FILENO)
}

func appendSummary(_ result: ImportSummary, json: Bool, console: Console) {
    if json {
        console.print(
            #"{"stored":\#(result.stored),"ignored":\#(result.ignored),"anomalies":\#(result.anomalies),"appendedByLedger":\#(result.appendedByLedger),"firstSeq":\#(result.firstSeq.map { String($0) } ?? "null"),"lastSeq":\#(result.lastSeq)}"#
        )
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
}

struct AppendCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "append",
        abstract: "Append JSON Lines events in one atomic write: all or nothing.",
        discussion: """
            Creates the ledger when missing. A rejected command or a malformed line stops the whole \
            append and leaves the ledger exactly as it was; the error names the line and the rule.

            Example:
              echo '{"type":"restoreStarted","at":"2024-03-01T09:15:02Z","user":"u1"}' | purchase-ledger append my.ledger
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "A JSON Lines file (default: stdin).", completion: .file(extensions: ["jsonl"]))
    var file: String?
    @Flag(help: "Print the summary as JSON.") var json = false

    func run() throws {
        let result = try options.importJSONLines(try inputReader(file))
        appendSummary(result, json: json, console: .current)
    }
}

struct ImportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "import",
        abstract: "Import a whole exported log (JSONL) in one atomic write, streamed, with progress.",
        discussion: """
            Like append, for large files. `seq` keys are ignored; cancellations marked \
            "appendedByLedger" are appended again by the ledger itself, at the same place.

            Example:
              purchase-ledger export user.ledger > user.jsonl && purchase-ledger import copy.ledger user.jsonl
            """)

    @OptionGroup var options: LedgerOptions
    @Argument(help: "The JSON Lines file to import.", completion: .file(extensions: ["jsonl"]))
    var file: String
    @Flag(help: "Print the summary as JSON.") var json = false

    func run() throws {
        let console = Console.current
        console.progress("reading \(file)...")
        let result = try options.importJSONLines(try inputReader(file)) { progress in
            var line = "checked \(progress.events) events"
            if let total = progress.totalBytes, total > 0 { line += " (\(progress.bytesRead * 100 / total)% of the file)" }
            console.progress(line)
        }
        console.endProgress()
        appendSummary(result, json: json, console: console)
    }
}

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

struct ReplayCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Show the state at any point: after a seq, at a time, at the first anomaly, or when a condition first holds.",
        discussion: """
            The state is rebuilt from the log (and snapshots) in memory; the projection tables are not read.

            Examples:
              purchase-ledger replay user.ledger --at 120
              purchase-ledger replay user.ledger --until 2024-03-02T10:00:00Z --json | jq '.downloads[] | select(.state=="failed")'
              purchase-ledger replay user.ledger --first-anomaly
              purchase-ledger replay user.ledger --when download:t1-d1:failed
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "Replay through this seq.") var at: Int64?
    @Option(help: "Replay through the last event whose time is at or before this RFC 3339 time.") var until: String?
    @Flag(help: "Stop at the first anomaly.") var firstAnomaly = false
    @Option(
        help: ArgumentHelp(
            "Stop where a condition first holds.", discussion: "transaction:ID:STATE or download:ID:STATE, STATE being a state name, or finished / revoked for a transaction.",
            valueName: "condition"))
    var when: String?
    @Option(name: .customLong("transaction"), help: "Show only this transaction and its downloads (repeat for several).")
    var transactions: [String] = []
    @Option(name: .customLong("user"), help: "Show only this user's transactions, downloads and content (repeat for several).")
    var users: [String] = []
    @Option(name: .customLong("download"), help: "Show only this download and its transaction (repeat for several).")
    var downloads: [String] = []
    @Flag(help: "Print the state as JSON (docs/json.md).") var json = false

    var focus: StateFocus { StateFocus(transactions: transactions, users: users, downloads: downloads) }

    func validate() throws {
        if [at != nil, until != nil, firstAnomaly, when != nil].filter({ $0 }).count > 1 {
            throw ValidationError("give at most one of --at, --until, --first-anomaly and --when")
        }
        try NumberOption.check("--at", at, 0...Int64.max)
    }

    func run() throws {
        let console = Console.current
        let ledger = try options.open()
        let state: LedgerState
        if let at {
            let last = try ledger.lastSeq()
            if at > last {
                console.error("note: the ledger ends at seq \(last); showing the state there")
            }
            state = try ledger.state(atSeq: at)
        } else if let until {
            state = try ledger.state(at: try Timestamp.parse(until))
        } else if firstAnomaly {
            guard let seq = try ledger.firstSeq(where: { _, e in e.anomaly != nil }) else {
                console.print("no anomaly in this ledger")
                return
            }
            state = try ledger.state(atSeq: seq)
        } else if let when {
            let condition = try Condition(when)
            // Replayed from the snapshot before the record's first event: it cannot hold earlier.
            let found =
                condition.isTransaction
                ? try ledger.firstSeq(involvingTransaction: condition.id) { s, _ in condition.holds(s) }
                : try ledger.firstSeq(involvingDownload: condition.id) { s, _ in condition.holds(s) }
            guard let seq = found else {
                console.print("the condition never holds")
                return
            }
            state = try ledger.state(atSeq: seq)
        } else {
            state = try ledger.state(atSeq: .max)
        }
        let selection = focus.isEmpty ? nil : try ledger.select(focus, in: state)
        for id in selection?.missing ?? [] { console.error("note: \(id) is not in the state after seq \(state.seq)") }
        if json {
            console.print(selection.map { StateJSON.encode(state, selection: $0) } ?? StateJSON.encode(state))
        } else {
            printState(state, selection: selection, ledger: ledger, console: console)
        }
    }
}

/// `transaction:ID:STATE` or `download:ID:STATE`.
struct Condition {
    var isTransaction: Bool
    var id: String
    var state: String

    init(_ text: String) throws {
        let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
        guard parts.count == 2, let colon = parts[1].lastIndex(of: ":"), parts[0] == "transaction" || parts[0] == "download" else {
            throw ValidationError("a condition reads transaction:ID:STATE or download:ID:STATE, not \(text)")
        }
        isTransaction = parts[0] == "transaction"
        id = Identifier.normalize(String(parts[1][..<colon]))
        state = String(parts[1][parts[1].index(after: colon)...])
        let valid =
            isTransaction
            ? TransactionStatus.allCases.map(\.rawValue) + ["finished", "revoked"]
            : DownloadStatus.allCases.map(\.rawValue)
        guard valid.contains(state) else {
            throw ValidationError("state must be one of \(valid.joined(separator: ", "))")
        }
    }

    func holds(_ s: LedgerState) -> Bool {
        if isTransaction {
            guard let t = s.transactions[id] else { return false }
            switch state {
            case "finished": return t.finished
            case "revoked": return t.revoked
            default: return t.state.rawValue == state
            }
        }
        guard let d = s.downloads[id] else { return false }
        return d.started && d.state.rawValue == state
    }
}

func printState(_ s: LedgerState, selection: StateFocus.Selection? = nil, ledger: Ledger?, console: Console) {
    let transactions = selection?.transactions ?? s.transactions.keys.sorted().map { s.transactions[$0]! }
    let downloads = selection?.downloads ?? s.downloads.keys.sorted().map { s.downloads[$0]! }
    let owned = selection?.ownedContent ?? s.ownedContent
    var heading = "\(s.transactions.count) transactions, \(s.downloads.count) downloads, \(s.ownedContent.count) owned content"
    if selection != nil { heading = "showing \(transactions.count) of \(s.transactions.count) transactions, \(downloads.count) of \(s.downloads.count) downloads" }
    console.print(
        console.bold("state after seq \(s.seq)") + "  \(heading), \(s.anomalies) anomal\(s.anomalies == 1 ? "y" : "ies")\(s.restoreInProgress ? ", restore in progress" : "")")
    if !transactions.isEmpty {
        console.print("")
        var rows = [["transaction", "product", "user", "qty", "state", "finished", "revoked", "downloads"]]
        for t in transactions {
            rows.append([
                t.transaction, t.product, t.user ?? "-", String(t.quantity), t.state.rawValue, t.finished ? "yes" : "no",
                t.revoked ? "yes" : "no", t.downloads.joined(separator: " "),
            ])
        }
        console.print(textTable(rows, console: console))
    }
    if !downloads.isEmpty {
        console.print("")
        var rows = [["download", "transaction", "content", "version", "state", "progress", "copied out", "content URL"]]
        for d in downloads {
            let state = d.started ? d.state.rawValue : "waiting (not started)"
            rows.append([
                d.download, d.transaction ?? "(standalone)", d.content ?? d.url ?? "-", d.contentVersion?.text ?? "-",
                state + (d.lost ? ", content lost" : "") + (d.discarded ? ", discarded" : ""),
                String(format: "%.0f%%", d.progress * 100), d.copiedOut ? (d.destination ?? "yes") : "no",
                s.contentURL(for: d.download) ?? "-",
            ])
        }
        console.print(textTable(rows, console: console))
    }
    if !owned.isEmpty {
        console.print("")
        var rows = [["product", "content", "version", "destination", "transaction", "update"]]
        for o in owned {
            rows.append([
                o.product, o.content, o.contentVersion.text, o.destination, o.transaction,
                s.updateAvailable(for: ContentKey(product: o.product, content: o.content)) ? "available" : "-",
            ])
        }
        console.print(textTable(rows, console: console))
    }
}

/// A plain text table: the first row is the header.
func textTable(_ rows: [[String]], console: Console) -> String {
    guard let header = rows.first else { return "" }
    var widths = header.map(\.count)
    for row in rows { for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) } }
    return rows.enumerated().map { index, row in
        let line = row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell.rightPad(widths[i])
        }.joined(separator: "  ")
        return index == 0 ? console.bold(line) : line
    }.joined(separator: "\n")
}

struct EventsCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "events",
        abstract: "List stored events with their seq, anomaly flags and the cancellations the ledger appended.",
        discussion: """
            --transaction also lists the events of the transaction's downloads. A transaction or \
            download with no event in the ledger is an error (exit status 2), not an empty list.

            Examples:
              purchase-ledger events user.ledger --transaction t1
              purchase-ledger events user.ledger --type downloadFailed --json | jq -r .download
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
    }
    var line = String(e.seq).leftPad(7) + "  " + console.dim(e.event.at.description) + "  " + e.event.type.name.rightPad(24) + "  " + w
    if let rule = e.anomaly { line += "  " + console.yellow("[anomaly: \(rule.name)]") }
    if e.appendedByLedger { line += "  " + console.dim("[appended by the ledger]") }
    return line
}

extension String {
    func leftPad(_ width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }

    /// Pads to `width`, never cutting.
    func rightPad(_ width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}

struct TimelineCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline",
        abstract: "One transaction's life: time, event, state after it, its downloads beside it.",
        discussion: """
            Anomalies and the cancellations the ledger appended are marked. This is the view that shows \
            a bug at a glance.

            Example:
              purchase-ledger timeline user.ledger --transaction t1
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "The transaction id.") var transaction: String
    @Flag(help: "One JSON object per step.") var json = false

    func run() throws {
        let console = Console.current
        let ledger = try options.open()
        let entries = try ledger.timeline(transaction: transaction)
        if json {
            for entry in entries {
                console.print(
                    JSONWriter.object { w in
                        w.key("event")
                        w.raw(entry.event.jsonLine)
                        w.key("transaction")
                        if let t = entry.transaction { StateJSON.write(t, to: &w) } else { w.null() }
                        w.key("downloads")
                        w.array(entry.downloads) { w, d in StateJSON.write(d, to: &w) }
                    })
            }
            return
        }
        if let t = entries.last?.transaction {
            console.print(console.bold("transaction \(t.transaction)") + "  \(t.product)  user \(t.user ?? "-")  quantity \(t.quantity)")
        }
        for entry in entries {
            let e = entry.event
            var what = e.event.type.name
            switch e.event.body {
            case .downloadProgressed(let d, let p, _, _): what += " \(d) \(Int(p * 100))%"
            case .downloadStarted(let d), .downloadPaused(let d), .downloadResumed(let d), .downloadFinished(let d, _): what += " \(d)"
            case .downloadCancelled(let d, let reason): what += " \(d) (\(reason.rawValue))"
            case .downloadFailed(let d, let error): what += " \(d) \(error.domain) \(error.code)"
            case .contentCopiedOut(let d, let destination, _, _): what += " \(d) -> \(destination)"
            case .transactionFailed(_, let error): what += " \(error.domain) \(error.code)"
            case .transactionFinished(_, true): what += " (discardContent)"
            case .transactionRevoked(_, let reason): what += " (\(reason))"
            case .transactionFinished(_, false), .productRegistered, .contentVersionPublished, .paymentQueued, .transactionDeferred,
                .transactionPurchased, .transactionRestored, .contentDeleted, .restoreStarted, .restoreCompleted, .restoreFailed,
                .contentRegistered:
                break
            }
            var after = "-"
            if let t = entry.transaction {
                after = t.state.rawValue + (t.finished ? ", finished" : "") + (t.revoked ? ", revoked" : "")
            }
            let downloads = entry.downloads.map { d in
                "\(d.download): \(d.started ? d.state.rawValue : "not started")\(d.state == .active || d.state == .paused ? " \(Int(d.progress * 100))%" : "")\(d.copiedOut ? " copied" : "")\(d.lost ? " LOST" : "")\(d.discarded ? " discarded" : "")"
            }.joined(separator: "; ")
            var marks = ""
            if let rule = e.anomaly { marks += "  " + console.yellow("! anomaly: \(rule.name)") }
            if e.appendedByLedger { marks += "  " + console.dim("(appended by the ledger)") }
            console.print("\(String(e.seq).leftPad(6))  \(console.dim(e.event.at.description))  \(what.rightPad(44))  \(after.rightPad(20))  \(downloads)\(marks)")
        }
    }
}

struct VerifyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check the hash chain, every payload, every event against the rules, the snapshots, the projections and SQLite's integrity.",
        discussion: """
            Exits 1 with the first problem and its seq; --all lists every problem. Anomalies (observations \
            recorded in a state where they made no sense) are listed but are not problems. The newest \
            snapshot is compared with the log replayed to its seq; --every-snapshot compares each one.

            With --checkpoint and --public-key: checks that the file extends a signed checkpoint (same \
            ledger id, at least its seq, the same hash chain link there), recomputing the chain over the \
            whole log, and exits 1 naming the seq when it does not. A plain (unkeyed) chain can be \
            recomputed by anyone who edits the file; a checkpoint kept elsewhere cannot. With --against \
            postgres://..., the same check against the seq and link a fleet store holds of this ledger \
            (from its last ship): a file put back to an older copy or rewritten no longer extends it.

            Examples:
              purchase-ledger verify user.ledger --all
              purchase-ledger verify user.ledger --checkpoint user.checkpoint.json --public-key support.key.pub
              purchase-ledger verify user.ledger --against postgres://ledger_report@db.internal/fleet
            """)

    @OptionGroup var options: LedgerOptions
    @Flag(help: "List every problem and every anomaly, not just the first problem.") var all = false
    @Flag(help: "Compare every snapshot with the log, not only the newest (about 0.1 s each at 1,000,000 events).")
    var everySnapshot = false
    @Flag(help: "Print the report as JSON.") var json = false
    @Option(help: "A checkpoint (from `checkpoint`) the file must extend.", completion: .file()) var checkpoint: String?
    @Option(name: .customLong("public-key"), help: "The public key the checkpoint must be signed with (FILE.pub from keygen).", completion: .file())
    var publicKey: String?
    @Option(help: "A fleet store (postgres://...) the file must extend: the seq and link it holds of this ledger.") var against: String?

    func validate() throws {
        if (checkpoint == nil) != (publicKey == nil) { throw ValidationError("give --checkpoint and --public-key together") }
        if let against, !FleetAddress.isURL(against) { throw ValidationError("--against takes a postgres:// URL, not \(FleetAddress.redacted(against))") }
    }

    func run() throws {
        let console = Console.current
        let ledger: Ledger
        do {
            ledger = try options.open()
        } catch let error as LedgerError where error.code == .notKeyed {
            // Verifying with the key a ledger was made with, and finding it plain, is tampering.
            console.print(console.red("problem: ") + error.message)
            throw CommandExit(status: 1)
        }
        if let against {
            guard let id = try ledger.identity()?.id else { throw LedgerError.io("this ledger has no id yet; open it for writing once") }
            let held = try blocking { () -> (seq: Int64, link: [UInt8])? in
                let fleet = try await FleetStore.connect(against)
                do {
                    let held = try await fleet.shippedHead(ofLedger: id)
                    await fleet.close()
                    return held
                } catch {
                    await fleet.close()
                    throw error
                }
            }
            guard let held else {
                console.print(console.red("problem: ") + "the fleet store holds nothing of ledger \(id): it was never shipped there")
                throw CommandExit(status: 1)
            }
            try problemExit { try ledger.verifyExtends(seq: held.seq, link: held.link, witness: "what the fleet store holds") }
            console.print(
                console.green("ok") + ": the file extends what the fleet store holds of ledger \(id) (seq \(held.seq)); hash chain intact from the first event to the last")
            if checkpoint == nil { return }
        }
        if let checkpoint, let publicKey {
            let statement = try Checkpoint(json: String(decoding: try Data(contentsOf: URL(fileURLWithPath: checkpoint)), as: UTF8.self))
            let key = try CheckpointPublicKey(fileText: try KeyFiles.text(publicKey, what: "the public key", secret: false))
            try problemExit { try ledger.verify(against: statement, publicKey: key) }
            console.print(
                console.green("ok") + ": the file extends the checkpoint of ledger \(statement.ledgerID) at seq \(statement.seq) (signed \(statement.at)); "
                    + "hash chain intact from the first event to the last")
            return
        }
        let report = try ledger.verify(all: all, everySnapshot: everySnapshot) { done, total in console.progress("verified \(done)/\(total)") }
        try printReport(report)
    }

    /// Runs a check of the file's history; a mismatch or damage is a problem (exit 1), printed.
    private func problemExit(_ check: () throws -> Void) throws {
        let console = Console.current
        do {
            try check()
        } catch let mismatch as CheckpointMismatch {
            console.print(console.red("problem: ") + mismatch.description)
            throw CommandExit(status: 1)
        } catch let error as LedgerError where error.code == .corruptData {
            console.print(console.red("problem: ") + error.description)
            throw CommandExit(status: 1)
        }
    }

    private func printReport(_ report: VerificationReport) throws {
        let console = Console.current
        console.endProgress()
        if json {
            console.print(
                JSONWriter.object { w in
                    w.field("valid", report.isValid)
                    w.field("eventsChecked", report.eventsChecked)
                    w.field("snapshotsChecked", report.snapshotsChecked)
                    w.key("problems")
                    w.array(report.problems) { w, p in
                        w.object { w in
                            w.field("kind", p.kind.rawValue)
                            w.field("seq", p.seq)
                            w.field("rule", p.rule?.name)
                            w.field("message", p.message)
                        }
                    }
                    w.key("anomalies")
                    w.array(report.anomalies) { w, a in
                        w.object { w in
                            w.field("seq", a.seq); w.field("rule", a.rule.name)
                        }
                    }
                })
        } else {
            for p in report.problems { console.print(console.red("problem: ") + p.description) }
            if report.isValid {
                console.print(
                    console.green("ok")
                        + ": \(report.eventsChecked) events; hash chain intact, every payload decodes, every event passes the rules as recorded, "
                        + [0: "", 1: "the newest snapshot equals the log at its seq, "][
                            report.snapshotsChecked, default: "\(report.snapshotsChecked) snapshots equal the log at their seqs, "]
                        + "projections equal a fresh rebuild, SQLite integrity ok"
                )
            }
            if !report.anomalies.isEmpty {
                var byRule: [String: Int] = [:]
                for a in report.anomalies { byRule[a.rule.name, default: 0] += 1 }
                console.print(
                    "\(report.anomalies.count) anomal\(report.anomalies.count == 1 ? "y" : "ies") recorded: "
                        + byRule.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))
                let shown = all ? report.anomalies : Array(report.anomalies.prefix(5))
                for a in shown { console.print("  seq \(a.seq): \(a.rule.name)") }
                if !all && report.anomalies.count > 5 { console.print("  ... (--all lists them all)") }
            }
        }
        if !report.isValid { throw CommandExit(status: 1) }
    }
}

struct RebuildCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rebuild",
        abstract: "Rebuild every projection table from the log.",
        discussion: """
            Replays the log in memory and, in one transaction, makes every projection table equal \
            to what the log gives: rows missing, different or extra are written, the rest left \
            alone, and the counts printed. A table mostly wrong is rewritten whole. --full \
            rewrites every row (and so every index) even where it matches.

            Example:
              purchase-ledger rebuild user.ledger
              purchase-ledger rebuild user.ledger --full
              purchase-ledger rebuild user.ledger --json
            """)

    @OptionGroup var options: LedgerOptions

    @Flag(help: "Rewrite every row in bulk, even rows that already match the log.")
    var full = false

    @Flag(help: "Print the summary as JSON.") var json = false

    func run() throws {
        let console = Console.current
        let start = Date()
        let ledger = try options.open(readOnly: false)
        let summary = try ledger.rebuildProjections(rewritingEveryRow: full) { done, total in console.progress("replayed \(done)/\(total)") }
        console.endProgress()
        let seconds = String(format: "%.2f", Date().timeIntervalSince(start))
        if json {
            console.print(
                #"{"events":\#(summary.events),"rowsWritten":\#(summary.rowsWritten),"rowsDeleted":\#(summary.rowsDeleted),"rowsUnchanged":\#(summary.rowsUnchanged),"full":\#(full),"seconds":\#(seconds)}"#
            )
            return
        }
        let rows =
            full
            ? "\(summary.rowsWritten) rows rewritten"
            : "\(summary.rowsWritten) rows written, \(summary.rowsDeleted) deleted, \(summary.rowsUnchanged) already matched the log"
        console.print("rebuilt the projections from \(summary.events) events in \(seconds) s: \(rows)")
    }
}

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
            console.print(
                JSONWriter.object { w in
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
                })
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
        console.print(
            "log: \(String(format: "%.1f", s.logBytesPerEvent)) bytes/event stored, \(String(format: "%.1f", s.payloadBytesPerEvent)) bytes/event of binary payload; \(s.blocks) sealed blocks compressed \(String(format: "%.2f", s.compressionRatio))x, \(s.tailEvents) events in the open tail"
        )
        console.print("snapshots: \(s.snapshots) (\(s.snapshotBytes) bytes); dictionaries: \(s.dictionaries)")
    }
}
