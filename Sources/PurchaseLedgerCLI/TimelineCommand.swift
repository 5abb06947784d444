import ArgumentParser
import Foundation
import PurchaseLedger

struct TimelineCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "timeline",
        abstract: "One transaction's life, or store product views': time, event, state after it.",
        discussion: """
            Anomalies and the cancellations the ledger appended are marked, and what Apple's signature says \
            of each event that carries one (apple, xcode or invalid with why; --apple-root trusts more roots). \
            Apple's records about the transaction (stored by apple-import) are lines of their own, saying \
            what Apple says. This is the view that shows a bug at a glance.

            With --product-view (one presentation) or --item (every presentation of an App Store item), the \
            store product views' events instead, each with the view's state after it.

            Examples:
              purchase-ledger timeline user.ledger --transaction t1
              purchase-ledger timeline user.ledger --item 1234567890
            """)

    @OptionGroup var options: LedgerOptions
    @Option(help: "The transaction id.") var transaction: String?
    @Option(name: .customLong("product-view"), help: "A store product view's id (the app's id for one presentation).") var productView: String?
    @Option(help: "Every store product view of this item (its Apple ID).") var item: String?
    @Flag(help: "One JSON object per step.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions

    func validate() throws {
        guard [transaction, productView, item].compactMap({ $0 }).count == 1 else {
            throw ValidationError("give one of --transaction, --product-view or --item")
        }
    }

    func run() async throws {
        let console = Console.current
        let ledger = try options.open()
        guard let transaction else { return try printProductViews(ledger) }
        let entries = try ledger.timeline(transaction: transaction)
        // What Apple's signature says of each event carrying one, judged here with the roots.
        let verifier = try appleRoots.verifier()
        var evidence: [Int64: AppleEvidence] = [:]
        for entry in entries {
            // Apple's records are checked as a device's signed transactions are.
            if let found = await Reconciliation.evidence(of: entry.event, verifier: verifier) {
                evidence[entry.event.seq] = found
                continue
            }
            guard let jws = entry.event.event.body.signedTransaction else { continue }
            evidence[entry.event.seq] = await Self.evidence(jws, entry.event, verifier: verifier)
        }
        if json {
            for entry in entries {
                console.printJSON { w in
                    w.key("event")
                    w.raw(entry.event.jsonLine)
                    if let found = evidence[entry.event.seq] {
                        w.field("evidence", found.name)
                        if let reason = found.reason { w.field("evidenceReason", reason) }
                    }
                    w.key("transaction")
                    if let t = entry.transaction { StateJSON.write(t, to: &w) } else { w.null() }
                    w.key("downloads")
                    w.array(entry.downloads) { w, d in StateJSON.write(d, to: &w) }
                }
            }
            return
        }
        if let t = entries.last?.transaction {
            console.print(console.bold("transaction \(t.transaction)") + "  \(t.product)  user \(t.user ?? "-")  quantity \(t.quantity)")
        }
        // Each line's columns first: the widths are those of the longest cells (a copy-out's
        // destination can be long), so every column lines up.
        var lines: [(seq: String, at: String, what: String, after: String, downloads: String, marks: String)] = []
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
            case .transactionRevoked(_, let reason, _): what += " (\(reason))"
            case .assetPackProgressed(let pack, let v, let p): what += " \(pack) v\(v) \(Int(p * 100))%"
            case .assetPackBegan(let pack, let v), .assetPackPaused(let pack, let v), .assetPackFinished(let pack, let v),
                .assetPackOpened(let pack, let v), .assetPackPublished(let pack, let v, _):
                what += " \(pack) v\(v)"
            case .assetPackFailed(let pack, let v, let error): what += " \(pack) v\(v) \(error.domain) \(error.code)"
            case .assetPackRemoved(let pack): what += " \(pack)"
            case .storePaymentPromoted(let product, let accepted): what += " \(product) (\(accepted ? "accepted" : "declined"))"
            case .personalDataErased(let refs): what += " (\(refs.count) personal values)"
            case .appleTransactionReceived(_, let source, _): what += " (\(source.rawValue))"
            case .appleHistoryCompleted(let revision, _): what += " (revision \(revision))"
            case .appleNotificationReceived: break
            case .transactionFinished(_, false), .productRegistered, .contentVersionPublished, .paymentQueued, .transactionDeferred,
                .transactionPurchased, .transactionRestored, .contentDeleted, .restoreStarted, .restoreCompleted, .restoreFailed,
                .contentRegistered, .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
                break
            }
            var after = "-"
            if let t = entry.transaction {
                after = t.state.rawValue + (t.finished ? ", finished" : "") + (t.revoked ? ", revoked" : "")
            }
            // Apple's side beside the device's: what its record says.
            if let said = AppleRecord.statement(in: e) { after = "Apple: " + said }
            let downloads = entry.downloads.map { d in
                "\(d.download): \(d.started ? d.state.rawValue : "not started")\(d.state == .active || d.state == .paused ? " \(Int(d.progress * 100))%" : "")\(d.copiedOut ? " copied" : "")\(d.lost ? " LOST" : "")\(d.discarded ? " discarded" : "")"
            }.joined(separator: "; ")
            var marks = ""
            if let rule = e.anomaly { marks += "  " + console.yellow("! anomaly: \(rule.name)") }
            if let found = evidence[e.seq] {
                // The reason may quote the JWS (its alg): one line, escaped.
                marks += "  " + (found == .apple ? console.dim("signed by Apple") : console.yellow("Apple's signature: " + VerifyCommand.oneLine("\(found)")))
            }
            if e.appendedByLedger { marks += "  " + console.dim("(appended by the ledger)") }
            // Values from the ledger (a revision, a signed field) stay on their line.
            lines.append((String(e.seq), e.event.at.description, VerifyCommand.oneLine(what), VerifyCommand.oneLine(after), VerifyCommand.oneLine(downloads), marks))
        }
        let seqWidth = max(6, lines.map(\.seq.width).max() ?? 0)
        let whatWidth = lines.map(\.what.width).max() ?? 0, afterWidth = lines.map(\.after.width).max() ?? 0
        for line in lines {
            var text = "\(line.seq.leftPad(seqWidth))  \(console.dim(line.at))  \(line.what.rightPad(whatWidth))  \(line.after.rightPad(afterWidth))  \(line.downloads)"
            while text.last == " " { text.removeLast() }
            console.print(text + line.marks)
        }
    }

    /// What Apple's signature says of one stored event's `jws`: `invalid` when the event states
    /// fields otherwise (its `signedFieldsDiffer` flag), or an erased signature, else the
    /// verifier's verdict at the event's time.
    static func evidence(_ jws: String, _ e: RecordedEvent, verifier: AppleSignatureVerifier) async -> AppleEvidence {
        guard let signed = try? SignedTransaction(jws: jws) else { return .invalid("erased with its user, or not a signed transaction") }
        let verdict = await verifier.evidence(of: signed, recordedAt: e.event.at.date)
        if verdict == .apple, e.anomaly == .signedFieldsDiffer { return .invalid("the event states fields otherwise than its signed transaction") }
        return verdict
    }

    /// The store product views' timeline: one line per event, the view's state after it.
    func printProductViews(_ ledger: Ledger) throws {
        let console = Console.current
        let steps = try ledger.productViewTimeline(view: productView, item: item)
        guard !steps.isEmpty else {
            throw LedgerError.make(
                .malformedInput, productView.map { "store product view \($0) is not in this ledger" } ?? "no store product view of item \(item ?? "") in this ledger")
        }
        if json {
            for step in steps {
                console.printJSON { w in
                    w.key("event")
                    w.raw(step.event.jsonLine)
                    w.key("productView")
                    if let v = step.view { StateJSON.write(v, to: &w) } else { w.null() }
                }
            }
            return
        }
        var rows: [[String]] = [["seq", "at", "event", "view after it", ""]]
        for step in steps {
            let e = step.event
            var what = e.event.type.name
            switch e.event.body {
            case .storeProductViewPresented(let view, let item, let style, _, let campaign, _):
                what += " \(view) item \(item) (\(style.rawValue))" + (campaign.map { " campaign \($0)" } ?? "")
            case .storeProductViewFailed(let view, let error): what += " \(view) \(error.domain) \(error.code)"
            case .storeProductViewLoaded(let view), .storeProductViewDismissed(let view): what += " \(view)"
            default: break
            }
            let after = step.view.map { v in v.state.rawValue + (v.loadMilliseconds.map { " (loaded in \($0) ms)" } ?? "") + (v.replacedAt != nil ? ", replaced" : "") } ?? "-"
            rows.append([String(e.seq), e.event.at.description, what, after, e.anomaly.map { "ANOMALY \($0.name)" } ?? ""])
        }
        console.print(textTable(rows, console: console))
    }
}
