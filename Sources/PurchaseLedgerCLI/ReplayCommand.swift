import ArgumentParser
import Foundation
import PurchaseLedger

struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Show the state at any point: after a seq, at a time, at the first anomaly, or when a condition first holds.",
        discussion: """
            The state is rebuilt from the log (and snapshots) in memory; the projection tables are not read.

            Examples:
              purchase-ledger replay user.ledger --at 120
              purchase-ledger replay user.ledger --until 2024-03-02T10:00:00Z --json \\
                  | jq '.downloads[] | select(.state == "failed")'
              purchase-ledger replay user.ledger --first-anomaly
              purchase-ledger replay user.ledger --first-anomaly --divergence
              purchase-ledger replay user.ledger --when download:t1-d1:failed
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "Replay through this seq.") var at: Int64?
    @Option(help: "Replay through the last event whose time is at or before this RFC 3339 time.") var until: String?
    @Flag(help: "Stop at the first anomaly.") var firstAnomaly = false
    @Flag(
        help: ArgumentHelp(
            "With --first-anomaly: stop at the first disagreement with Apple's record too, whichever comes first.",
            discussion: "The kinds of report --view divergence, from the records apple-import stored."))
    var divergence = false
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
    @OptionGroup var appleRoots: AppleRootOptions

    var focus: StateFocus { StateFocus(transactions: transactions, users: users, downloads: downloads) }

    func validate() throws {
        if [at != nil, until != nil, firstAnomaly, when != nil].filter({ $0 }).count > 1 {
            throw ValidationError("give at most one of --at, --until, --first-anomaly and --when")
        }
        try NumberOption.check("--at", at, 0...Int64.max)
        if divergence && !firstAnomaly { throw ValidationError("--divergence goes with --first-anomaly") }
    }

    func run() async throws {
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
            var first = try ledger.firstSeq(where: { _, e in e.anomaly != nil })
            var disagreements: [Divergence] = []
            if divergence, let (seq, rows) = try await ledger.firstDivergence(verifier: appleRoots.verifier()), seq <= first ?? .max {
                first = seq
                disagreements = rows
            }
            guard let seq = first else {
                console.print(divergence ? "no anomaly and no disagreement with Apple's record in this ledger" : "no anomaly in this ledger")
                return
            }
            if !disagreements.isEmpty {
                // What the state below shows: said on stderr beside JSON, above the state otherwise.
                let lines =
                    ["seq \(seq): the first disagreement with Apple's record (report --view divergence):"]
                    + disagreements.map { d in
                        "  \(d.kind.rawValue) \(d.transaction ?? "-") (Apple's \(d.appleTransaction ?? "-")): device: \(d.device); Apple: \(d.apple)"
                    }
                for line in lines { json ? console.error("note: " + line) : console.print(line) }
            }
            state = try ledger.state(atSeq: seq)
        } else if let when {
            let condition = try Condition(when)
            // An id the ledger never held is a usage error, as in every command (README, exit 2).
            let head = try ledger.state(atSeq: .max)
            if condition.isTransaction ? head.transactions[condition.id] == nil : head.downloads[condition.id] == nil {
                throw LedgerError.make(.malformedInput, "\(condition.isTransaction ? "transaction" : "download") \(condition.id) is not in this ledger")
            }
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
        console.keepUntilExit(state)
        let selection = focus.isEmpty ? nil : try ledger.select(focus, in: state)
        if let missing = selection?.missing, !missing.isEmpty {
            // Never held by the ledger: a usage error (exit 2). Held, but not yet at this seq: a note.
            let lastSeq = try ledger.lastSeq()
            let never = state.seq == lastSeq ? missing : try ledger.select(focus, in: try ledger.state(atSeq: .max)).missing
            if let id = never.first {
                throw LedgerError.make(
                    .malformedInput, id.hasPrefix("user ") ? "no transaction in this ledger names the user given with --user" : "\(id) is not in this ledger")
            }
            for id in missing { console.error("note: \(id) is not in the state after seq \(state.seq)") }
        }
        // What Apple's signature says of each transaction, its chains judged with the roots.
        let evidence = try await ledger.appleEvidence(verifier: appleRoots.verifier())
        if json {
            // A ledger without a signed transaction prints the state as ever, with no evidence.
            // Written as it is made: the whole state's JSON is never held (80 MB at 1,000,000 events).
            StateJSON.stream(state, selection: selection, evidence: evidence.isEmpty ? nil : evidence) { console.write($0) }
            console.write("\n")
        } else {
            printState(state, selection: selection, ledger: ledger, console: console, evidence: evidence)
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

/// `evidence`: Apple's, per transaction; a column says it when some transaction has any.
func printState(
    _ s: LedgerState, selection: StateFocus.Selection? = nil, ledger: Ledger?, console: Console, evidence: [String: TransactionEvidence] = [:]
) {
    let signed = !evidence.isEmpty
    let transactions = selection?.transactions ?? s.transactions.keys.sorted().map { s.transactions[$0]! }
    let downloads = selection?.downloads ?? s.downloads.keys.sorted().map { s.downloads[$0]! }
    let owned = selection?.ownedContent ?? s.ownedContent
    var heading = "\(s.transactions.count) transactions, \(s.downloads.count) downloads, \(s.ownedContent.count) owned content"
    if selection != nil { heading = "showing \(transactions.count) of \(s.transactions.count) transactions, \(downloads.count) of \(s.downloads.count) downloads" }
    // Store product views: only in a whole state that has any (a ledger without reads as before).
    let views = selection == nil ? s.productViews() : []
    if !views.isEmpty { heading += ", \(views.count) store product view\(views.count == 1 ? "" : "s") (\(s.productViewsOnScreen.count) on screen)" }
    console.print(
        console.bold("state after seq \(s.seq)") + "  \(heading), \(s.anomalies) anomal\(s.anomalies == 1 ? "y" : "ies")\(s.restoreInProgress ? ", restore in progress" : "")")
    if !transactions.isEmpty {
        console.print("")
        var rows = [["transaction", "product", "user", "qty", "state", "finished", "revoked"] + (signed ? ["evidence"] : []) + ["downloads"]]
        for t in transactions {
            let found = evidence[t.transaction]
            let level = found.map { $0.seq <= s.seq ? $0.evidence.name : "(later)" } ?? "unsigned"
            rows.append(
                [t.transaction, t.product, t.user ?? "-", String(t.quantity), t.state.rawValue, t.finished ? "yes" : "no", t.revoked ? "yes" : "no"]
                    + (signed ? [level] : []) + [t.downloads.joined(separator: " ")])
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
    if !views.isEmpty {
        console.print("")
        var rows = [["view", "item", "style", "state", "presented", "load ms", "error", "campaign", "on screen"]]
        for v in views {
            rows.append([
                v.view, v.item, v.style.rawValue, v.state.rawValue + (v.replacedAt != nil ? ", replaced" : ""), v.presentedAt?.description ?? "-",
                v.loadMilliseconds.map(String.init) ?? "-", v.error.map { "\($0.domain) \($0.code)" } ?? "-", v.campaignToken ?? "-", v.onScreen ? "yes" : "no",
            ])
        }
        console.print(textTable(rows, console: console))
    }
}

/// A plain text table: the first row is the header.
func textTable(_ rows: [[String]], console: Console) -> String {
    guard rows.first != nil else { return "" }
    // A cell is one line: a newline or carriage return in a value (a campaign token, a message)
    // is shown escaped, so it cannot start a row of its own that looks like the table's.
    let rows = rows.map { row in
        row.map { cell in
            cell.utf8.contains(where: { $0 == 10 || $0 == 13 })
                ? cell.replacingOccurrences(of: "\r\n", with: "\\r\\n").replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\r", with: "\\r")
                : cell
        }
    }
    var widths = rows[0].map(\.count)
    for row in rows { for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.count) } }
    return rows.enumerated().map { index, row in
        let line = row.enumerated().map { i, cell in
            i == row.count - 1 ? cell : cell.rightPad(widths[i])
        }.joined(separator: "  ")
        return index == 0 ? console.bold(line) : line
    }.joined(separator: "\n")
}
