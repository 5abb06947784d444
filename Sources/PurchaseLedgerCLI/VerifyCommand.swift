import ArgumentParser
import Foundation
import PurchaseLedger
import PurchaseLedgerFleet

struct VerifyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check the hash chain, every payload, every event against the rules, the snapshots, the projections and SQLite's integrity.",
        discussion: """
            Exits 1 with the first problem and its seq; --all lists every problem. Anomalies (observations \
            recorded in a state where they made no sense) are listed but are not problems. The newest \
            snapshot is compared with the log replayed to its seq; --every-snapshot compares each one.

            With --checkpoint and --public-key: checks that the file extends a signed checkpoint (same \
            ledger id, at least its seq, the same hash chain link there), recomputing the chain over the \
            whole log, and exits 1 naming the seq when it does not; then every check above. A plain (unkeyed) chain can be \
            recomputed by anyone who edits the file; a checkpoint kept elsewhere cannot. With --against \
            postgres://..., the same check against the seq and link a fleet store holds of this ledger \
            (from its last ship): a file put back to an older copy or rewritten no longer extends it.

            Given a fleet store's postgres:// URL instead of a file (as its owner): audits every \
            ledger there, one line per ledger with a problem: each signed head against the key the \
            store holds, each key-derived id against its key, no event missing or past a head (one \
            the shipping credential planted), each plain chain recomputed from its first event, each \
            ledger's rows against a replay of its events (personal values by whether they are set), \
            no erased user in the rows. With --witness FILE, also against the heads an earlier \
            audit kept there: no ledger gone, gone back or rewritten since.

            Examples:
              purchase-ledger verify user.ledger --all
              purchase-ledger verify user.ledger --checkpoint user.checkpoint.json \\
                  --public-key support.key.pub
              purchase-ledger verify user.ledger \\
                  --against postgres://ledger_report@db.internal/fleet
              purchase-ledger verify postgres://fleet_owner@db.internal/fleet \\
                  --witness /secure/fleet-heads.json
            """)

    @OptionGroup var options: LedgerOptions
    @Flag(help: "List every problem and every anomaly, not just the first problem.") var all = false
    @Flag(help: "Compare every snapshot with the log, not only the newest (about 0.1 s each at 1,000,000 events).")
    var everySnapshot = false
    @Flag(help: "Print the report as JSON.") var json = false
    @OptionGroup var appleRoots: AppleRootOptions
    @Option(help: "A checkpoint (from `checkpoint`) the file must extend.", completion: .file()) var checkpoint: String?
    @Option(name: .customLong("public-key"), help: "The public key the checkpoint must be signed with (FILE.pub from keygen).", completion: .file())
    var publicKey: String?
    @Option(help: "A fleet store (postgres://...) the file must extend: the seq and link it holds of this ledger.") var against: String?
    @Option(
        help: ArgumentHelp(
            "With a fleet store: the heads the last audit saw, kept outside the store; no ledger may have gone, gone back or been rewritten since. Written after an audit that finds nothing.",
            valueName: "file"), completion: .file())
    var witness: String?

    func validate() throws {
        if (checkpoint == nil) != (publicKey == nil) { throw ValidationError("give --checkpoint and --public-key together") }
        if let against, !FleetAddress.isURL(against) { throw ValidationError(notAURL("--against", against)) }
        if FleetAddress.isURL(options.ledger) && (checkpoint != nil || against != nil) {
            throw ValidationError("verify postgres://... audits a fleet store; --checkpoint and --against check a ledger file")
        }
        if witness != nil && !FleetAddress.isURL(options.ledger) {
            throw ValidationError("--witness goes with a fleet store: verify postgres://... --witness FILE")
        }
    }

    /// `text` on one line, every control character (newline and tab too) and every escape
    /// sequence written out as `\uXXXX`: a value from the store cannot forge a line or a colour.
    static func oneLine(_ text: String) -> String {
        TerminalText.escape(text.replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\t", with: "\\t"))
    }

    /// `verify postgres://...`: the whole fleet, one line per ledger with a problem.
    func auditFleet() async throws {
        let console = Console.current
        let earlier = try witness.flatMap { path in FileManager.default.fileExists(atPath: path) ? try FleetWitness.read(path) : nil }
        let fleet = try await FleetStore.connect(options.ledger)
        let audit: FleetAudit
        // Under --json the problems go into the one JSON object; otherwise each is a line, its
        // text (ids and values from the store) escaped whole, newlines and colour codes included.
        let collected = Locked<[FleetAuditProblem]>([])
        let json = json
        do {
            audit = try await fleet.audit(
                witness: earlier, appleVerifier: try appleRoots.verifier(),
                progress: { done, total in console.progress("audited \(done)/\(total) (each ledger's log, then each table's rows)") }
            ) {
                problem in
                if json { return collected.withLock { $0.append(problem) } }
                console.endProgress()
                console.print(console.red("problem: ") + Self.oneLine(problem.description))
            }
            await fleet.close()
        } catch {
            await fleet.close()
            throw error
        }
        console.endProgress()
        let summary =
            "\(audit.ledgers) ledgers, \(audit.events) events: every signed head verifies with its ledger's key and names the store's head, "
            + "every key-derived id is its key's, no event is missing or past a head, \(audit.chainsRecomputed) chains recomputed from their first event"
            + (audit.chainsNotRecomputable > 0 ? " (\(audit.chainsNotRecomputable) keyed or altered at seq 1: not recomputable here)" : "")
            + (audit.unsignedLedgers > 0 ? ", \(audit.unsignedLedgers) shipped before heads were signed (nothing vouches for them)" : "")
            + ", \(audit.projectionsCompared) ledgers' rows equal a replay of their events, no erased user in the rows"
            + (audit.appleRecords > 0 ? ", \(audit.appleRecords) of Apple's records verify as Apple's and state what their columns say" : "")
        if json {
            console.printJSON { w in
                w.field("valid", audit.problems == 0)
                w.field("ledgers", audit.ledgers)
                w.field("events", audit.events)
                w.field("chainsRecomputed", audit.chainsRecomputed)
                w.field("chainsNotRecomputable", audit.chainsNotRecomputable)
                w.field("unsignedLedgers", audit.unsignedLedgers)
                w.field("projectionsCompared", audit.projectionsCompared)
                w.field("appleRecords", audit.appleRecords)
                w.field("problemCount", audit.problems)
                w.key("problems")
                w.array(collected.withLock { $0 }) { w, problem in
                    w.object { w in
                        w.field("ledger", problem.ledgerID)
                        w.field("seq", problem.seq)
                        w.field("message", problem.message)
                    }
                }
            }
        } else if audit.problems == 0 {
            console.print(console.green("ok") + ": " + summary)
        } else {
            console.print("\(audit.problems) problem\(audit.problems == 1 ? "" : "s") in the fleet store (\(audit.ledgers) ledgers, \(audit.events) events)")
        }
        if let witness {
            // Only a store found sound becomes the next witness: a head put back must not be.
            if audit.problems == 0 {
                let now = Timestamp(millisecondsSinceEpoch: Int64(Date().timeIntervalSince1970 * 1000)).description
                try FleetWitness(at: now, store: audit.store, heads: audit.heads).write(to: witness)
                if !json {
                    if earlier == nil { console.print("witness: \(witness) did not exist, so nothing was compared with it; it starts now") }
                    console.print("witness: \(witness) holds these \(audit.heads.count) heads for the next audit")
                }
            } else if !json {
                console.print("witness: \(witness) left as it was (problems found)")
            }
        }
        if audit.problems > 0 { throw CommandExit(status: 1) }
    }

    func run() async throws {
        if FleetAddress.isURL(options.ledger) { return try await auditFleet() }
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
            guard let identity = try ledger.identity() else { throw LedgerError.io("this ledger has no id yet; open it for writing once") }
            let id = identity.id
            let fleet = try await FleetStore.connect(against)
            let held: ShippedHead?
            do {
                held = try await fleet.shippedHead(ofLedger: id)
                await fleet.close()
            } catch {
                await fleet.close()
                throw error
            }
            guard let held else {
                console.print(console.red("problem: ") + "the fleet store holds nothing of ledger \(id): it was never shipped there")
                throw CommandExit(status: 1)
            }
            if let key = held.publicKey, key != identity.publicKey?.rawRepresentation {
                console.print(
                    console.red("problem: ")
                        + "the fleet store holds ledger \(id) under another ledger's identity key: this file claims an id that is not its own (an id conflict)")
                throw CommandExit(status: 1)
            }
            try problemExit { try ledger.verifyExtends(seq: held.seq, link: held.link, witness: "what the fleet store holds") }
            console.print(
                console.green("ok") + ": the file extends what the fleet store holds of ledger \(id) (seq \(held.seq)); hash chain intact from the first event to the last")
        }
        if let checkpoint, let publicKey {
            let statement = try Checkpoint(json: String(decoding: try Data(contentsOf: URL(fileURLWithPath: checkpoint)), as: UTF8.self))
            let key = try CheckpointPublicKey(fileText: try KeyFiles.text(publicKey, what: "the public key", secret: false))
            try problemExit { try ledger.verify(against: statement, publicKey: key) }
            console.print(
                console.green("ok") + ": the file extends the checkpoint of ledger \(statement.ledgerID) at seq \(statement.seq) (signed \(statement.at)); "
                    + "hash chain intact from the first event to the last")
        }
        // Then everything else the chain commits to, whatever witness was given: a checkpoint
        // vouches for the links, not for a personal value edited beside its commitment or a
        // snapshot bound to another chain (the check an edit of personal_values must not pass).
        let report = try ledger.verify(all: all, everySnapshot: everySnapshot) { done, total in console.progress("verified \(done)/\(total)") }
        // What Apple's signatures say, their chains judged with the roots: a count, not a
        // problem (a signature that does not verify is what the device recorded).
        try printReport(report, evidence: try await appleRoots.evidenceLevels(of: ledger))
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

    /// `evidence`: how many signed transactions have each evidence level (nil: none signed).
    private func printReport(_ report: VerificationReport, evidence: [String: Int]? = nil) throws {
        let console = Console.current
        console.endProgress()
        if json {
            console.printJSON { w in
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
                if let evidence { AppleRootOptions.write(evidence, to: &w) }
            }
        } else {
            for p in report.problems { console.print(console.red("problem: ") + p.description) }
            if report.isValid {
                console.print(
                    console.green("ok")
                        + ": \(report.eventsChecked) events; hash chain intact, every payload decodes, every event passes the rules as recorded, "
                        + [0: "", 1: "every snapshot bound to the chain, the newest equal to the log at its seq, "][
                            report.snapshotsChecked,
                            default: "every snapshot bound to the chain, \(report.snapshotsChecked) equal to the log at their seqs, "]
                        + "every personal value matches its commitment, projections equal a fresh rebuild, SQLite integrity ok"
                )
            }
            if let evidence { console.print(AppleRootOptions.describe(evidence, checkedAgain: true)) }
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
