import Foundation
import Testing
@testable import PurchaseLedger

/// `extract` on the shared 100,000-event workload: for several transactions and users, the repro
/// replays, seq by seq, to the same state of the chosen records as the original.
@Suite(.serialized, .enabled(if: Workload.available, "needs python3 and Tools/gen_workload.py"))
struct ExtractTests {
    /// One 100,000-event ledger for the whole suite, imported through the library, and removed
    /// when the test process exits (a static is never deinitialized: its directory, and the
    /// repros the tests write in it, were left behind by every run).
    static let shared: Result<(TemporaryDirectory, String), any Error> = {
        let result = Result { () throws -> (TemporaryDirectory, String) in
            let dir = try TemporaryDirectory()
            let path = dir.path("workload.ledger")
            let input = try JSONLinesInput(bytes: [UInt8](try Data(contentsOf: URL(fileURLWithPath: try Workload.file(events: 100_000)))))
            var config = LedgerConfiguration()
            config.durability = .normal
            try Ledger(path: path, configuration: config).appendJSONLines(input)
            return (dir, path)
        }
        if case .success = result {
            atexit { if case .success(let (dir, _)) = ExtractTests.shared { try? FileManager.default.removeItem(at: dir.url) } }
        }
        return result
    }()

    static func workload() throws -> (TemporaryDirectory, Ledger) {
        let (dir, path) = try shared.get()
        var config = LedgerConfiguration()
        config.readOnly = true
        return (dir, try Ledger(path: path, configuration: config))
    }

    /// Interesting records of the workload, found by a pass over it: a transaction whose finish
    /// made the ledger cancel downloads, a restored one, one with an anomaly, one plain purchase;
    /// the user with the most transactions, and a restoring user.
    static func picks(_ ledger: Ledger) throws -> (transactions: [String], users: [String]) {
        var state = LedgerState()
        var cancelled: String?, restored: String?, anomalous: String?, plain: String?, restoringUser: String?
        try ledger.forEachEvent { e in
            LogReplay.step(&state, e.event, seq: e.seq)
            let owner = e.event.body.transactionID ?? e.event.body.downloadID.flatMap { state.downloads[$0]?.transaction }
            if e.appendedByLedger, cancelled == nil { cancelled = owner }
            if case .transactionRestored(let t, _, _, let u, _, _, _) = e.event.body, restored == nil { restored = t; restoringUser = u }
            if e.anomaly != nil, anomalous == nil, let owner { anomalous = owner }
            if case .transactionFinished(let t, _) = e.event.body, plain == nil, state.transactions[t]?.downloads.isEmpty == false { plain = t }
            return true
        }
        var counts: [String: Int] = [:]
        for t in state.transactions.values { if let u = t.user { counts[u, default: 0] += 1 } }
        let busiest = try #require(counts.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key)
        return ([cancelled, restored, anomalous, plain].compactMap { $0 }, [busiest] + [restoringUser].compactMap { $0 })
    }

    /// Replays the original once and every repro beside it: after each original event that names
    /// a chosen record or is kept, the chosen records are equal in both.
    static func expectReproduces(_ ledger: Ledger, _ repros: [(ExtractSummary, Ledger)]) throws {
        var reproEvents: [[RecordedEvent]] = []
        for (_, repro) in repros {
            var events: [RecordedEvent] = []
            try repro.forEachEvent {
                events.append($0); return true
            }
            reproEvents.append(events)
        }
        var original = LedgerState()
        var states = Array(repeating: LedgerState(), count: repros.count)
        var cursors = Array(repeating: 0, count: repros.count)
        var compared = Array(repeating: 0, count: repros.count)
        let chosen = repros.map { (Set($0.0.transactions), Set($0.0.downloads)) }
        var failures = 0
        try ledger.forEachEvent { e in
            LogReplay.step(&original, e.event, seq: e.seq)
            for i in repros.indices {
                let summary = repros[i].0
                let kept = cursors[i] < summary.originalSeqs.count && summary.originalSeqs[cursors[i]] == e.seq
                if kept {
                    let copy = reproEvents[i][cursors[i]]
                    #expect(
                        copy.event == e.event && copy.appendedByLedger == e.appendedByLedger && copy.anomaly == e.anomaly,
                        "repro seq \(copy.seq) differs from original seq \(e.seq)")
                    LogReplay.step(&states[i], copy.event, seq: copy.seq)
                    cursors[i] += 1
                }
                let names = e.event.body.transactionID.map(chosen[i].0.contains) == true || e.event.body.downloadID.map(chosen[i].1.contains) == true
                #expect(!names || kept, "original seq \(e.seq) names a chosen record but was not kept")
                guard kept || names else { continue }
                compared[i] += 1
                for t in chosen[i].0 where original.transactions[t] != states[i].transactions[t] {
                    failures += 1
                    Issue.record("transaction \(t) differs after original seq \(e.seq)")
                }
                for d in chosen[i].1 where original.downloads[d] != states[i].downloads[d] {
                    failures += 1
                    Issue.record("download \(d) differs after original seq \(e.seq)")
                }
            }
            return failures < 5
        }
        for i in repros.indices {
            #expect(cursors[i] == repros[i].0.originalSeqs.count, "every repro event matched")
            #expect(compared[i] == repros[i].0.keptEvents, "compared at every kept seq")
        }
    }

    @Test func extractsOfTransactionsAndUsersReplayLikeTheOriginal() throws {
        let (dir, ledger) = try Self.workload()
        let (transactions, users) = try Self.picks(ledger)
        #expect(transactions.count == 4, "the workload has an early finish, a restore, an anomaly and a plain purchase")
        var repros: [(ExtractSummary, Ledger)] = []
        let selections: [ExtractSelection] = [.transactions(transactions), .transactions([transactions[0]])] + users.map { .user($0) }
        for (i, selection) in selections.enumerated() {
            let path = dir.path("repro-\(i)-\(UUID().uuidString).ledger")
            let summary = try ledger.extract(selection, to: path)
            // The file alone is the repro: nothing waits in the WAL.
            let wal = (try? FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int) ?? 0
            #expect(wal == 0)
            #expect(summary.totalEvents == (try ledger.lastSeq()))
            #expect(summary.keptEvents > 0 && summary.keptEvents < 5_000, "\(selection): \(summary.keptEvents) events")
            #expect(summary.keptEvents == summary.originalSeqs.count)
            let repro = try Ledger(path: path)
            #expect(try repro.lastSeq() == Int64(summary.keptEvents))
            let report = try repro.verify()
            #expect(report.isValid, "\(report.problems)")
            #expect(try repro.extractedEvents(selection).count == summary.keptEvents, "extracting again keeps everything")
            if case .user(let u) = selection {
                #expect(Set(try ledger.transactions(user: u).map(\.transaction)).isSubset(of: summary.transactions))
                #expect(try repro.transactions(user: u).count == (try ledger.transactions(user: u).count))
            }
            repros.append((summary, repro))
        }
        #expect(repros.contains { $0.0.restores > 0 }, "a restore was kept")
        #expect(repros.contains { ((try? $0.1.statistics().appendedByLedger) ?? 0) > 0 }, "an automatic cancellation came back")
        try Self.expectReproduces(ledger, repros)
    }

    /// `replay --transaction / --user / --download`: exactly the matching records of the full
    /// state, filtered here independently from the full JSON.
    @Test func aFocusedReplayEqualsTheMatchingRecordsOfTheFullOne() throws {
        let (_, ledger) = try Self.workload()
        let (transactions, users) = try Self.picks(ledger)
        func canonical(_ items: [Any]) throws -> [String] {
            try items.map { String(decoding: try JSONSerialization.data(withJSONObject: $0, options: [.sortedKeys]), as: UTF8.self) }
        }
        func parse(_ json: String) throws -> [String: Any] {
            try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        }
        var checked = 0
        for seq in [Int64(5_000), 33_333, 77_777, try ledger.lastSeq()] {
            let state = try ledger.state(atSeq: seq)
            let full = try parse(StateJSON.encode(state))
            let allTransactions = full["transactions"] as! [[String: Any]]
            let allDownloads = full["downloads"] as! [[String: Any]]
            let allOwned = full["ownedContent"] as! [[String: Any]]
            let someDownload = allDownloads.first { $0["transaction"] is String }?["download"] as? String
            let cases: [(StateFocus, ([String: Any]) -> Bool)] = [
                (StateFocus(transactions: [transactions[0], transactions[1]]), { [transactions] t in transactions.prefix(2).contains(t["transaction"] as! String) }),
                (StateFocus(users: [users[0]]), { t in t["user"] as? String == users[0] }),
                (StateFocus(downloads: someDownload.map { [$0] } ?? []), { t in (t["downloads"] as! [String]).contains(someDownload ?? "") }),
            ]
            for (focus, chosen) in cases {
                #expect(try ledger.select(focus, in: state) == focus.select(in: state), "the user index finds the same records")
                let focused = try parse(StateJSON.encode(state, focus: focus))
                let expectedTransactions = allTransactions.filter(chosen)
                let ids = Set(expectedTransactions.map { $0["transaction"] as! String })
                #expect(try canonical(focused["transactions"] as! [Any]) == canonical(expectedTransactions), "\(focus) at \(seq)")
                #expect(try canonical(focused["downloads"] as! [Any]) == canonical(allDownloads.filter { ($0["transaction"] as? String).map(ids.contains) == true }))
                #expect(try canonical(focused["ownedContent"] as! [Any]) == canonical(allOwned.filter { ids.contains($0["transaction"] as! String) }))
                #expect(focused["seq"] as? Int == full["seq"] as? Int && focused["anomalies"] as? Int == full["anomalies"] as? Int)
                checked += expectedTransactions.count
            }
        }
        #expect(checked > 10, "the cases chose records")

        // Through the binary, as a support engineer would, for one user.
        let (_, path) = try Self.shared.get()
        let result = try cli(["replay", path, "--at", "77777", "--user", users[0], "--json"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout == StateJSON.encode(try ledger.state(atSeq: 77_777), focus: StateFocus(users: [users[0]])) + "\n")
        #expect(result.stdout.utf8.count < 20_000, "a few records, not the whole state")
    }

    /// `replay --json` streams the state: the pieces, whatever their size, join into exactly the
    /// text `encode` makes, for the whole state, a focus, and with Apple's evidence.
    @Test func theStreamedStateIsTheEncodedOne() throws {
        let (_, ledger) = try Self.workload()
        let (transactions, _) = try Self.picks(ledger)
        for seq in [Int64(77_777), try ledger.lastSeq()] {
            let state = try ledger.state(atSeq: seq)
            let selection = try ledger.select(StateFocus(transactions: [transactions[0], transactions[1]]), in: state)
            let evidence = [transactions[0]: TransactionEvidence(transaction: transactions[0], seq: 1, evidence: .invalid("a reason"))]
            for chunk in [1, 4096, 1 << 16] {
                func streamed(_ selection: StateFocus.Selection?, _ evidence: [String: TransactionEvidence]?) -> String {
                    var pieces: [String] = []
                    StateJSON.stream(state, selection: selection, evidence: evidence, chunk: chunk) { pieces.append($0) }
                    // Pieces stay near the size asked for: never the whole document at once.
                    if chunk == 4096 { #expect(pieces.count > 10 || selection != nil && pieces.count >= 1, "\(pieces.count) pieces") }
                    return pieces.joined()
                }
                #expect(streamed(nil, nil) == StateJSON.encode(state), "chunk \(chunk) at \(seq)")
                #expect(streamed(selection, nil) == StateJSON.encode(state, selection: selection))
                #expect(streamed(nil, evidence) == StateJSON.encode(state, evidence: evidence))
                #expect(streamed(selection, evidence) == StateJSON.encode(state, selection: selection, evidence: evidence))
            }
        }
    }

    @Test func aRedactedExtractPseudonymisesUsersAndDestinations() throws {
        let (dir, ledger) = try Self.workload()
        let user = try Self.picks(ledger).users[0]
        let path = dir.path("redacted-\(UUID().uuidString).ledger")
        let summary = try ledger.extract(.user(user), to: path, redact: true)
        let repro = try Ledger(path: path)
        let original = try ledger.transactions(user: user)
        #expect(try repro.transactions(user: user).isEmpty)
        #expect(try repro.transactions(user: ledger.redactor().pseudonym(user: user)).count == original.count)
        var exported = ""
        try repro.forEachEvent { e in
            exported += JSONLines.encode(e.event) + "\n"; return true
        }
        #expect(!exported.contains("\"\(user)\""))
        let kept = Set(summary.downloads)
        let destinations = try ledger.downloads().filter { kept.contains($0.download) }.compactMap(\.destination)
        #expect(!destinations.isEmpty, "the user copied content out")
        for destination in Set(destinations) where exported.contains("\"destination\":\"\(destination)\"") {
            Issue.record("destination \(destination) left unredacted")
        }
        #expect(try repro.verify().isValid)
    }

    @Test func sharedDownloadIdsBringTheirTransactionAndErrorsChangeNothing() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("l.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [
            E.product("p1", contents: [("c1", "1.0")]), E.product("p2"),
            E.queued("t1"), E.purchased("t1", downloads: ["d1"]),
            E.queued("t2", "p2", user: "u2"), E.purchased("t2", downloads: ["d1"]),  // duplicateDownload: an anomaly
            E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1"),
            E.restoreStarted(at: 20), E.restored("t3", original: "t1", downloads: ["d3"], at: 21), E.restoreCompleted(at: 22),
        ])
        let summary = try ledger.extract(.transactions(["t2"]), to: dir.path("t2.ledger"))
        #expect(summary.addedTransactions == ["t1"])
        #expect(summary.restores == 0)
        let repro = try Ledger(path: dir.path("t2.ledger"))
        #expect(try repro.statistics().anomaliesByRule[.duplicateDownload] == 1, "the purchase is flagged as in the original")
        #expect(try repro.state(atSeq: .max).transactions["t2"] == ledger.currentState.transactions["t2"])

        let restore = try ledger.extract(.transactions(["t3"]), to: dir.path("t3.ledger"))
        #expect(restore.restores == 1)
        #expect(try Ledger(path: dir.path("t3.ledger")).events(inStream: "restore").count == 2)

        // Unknown records, an existing output: typed errors, nothing written.
        #expect(throws: LedgerError.self) { try ledger.extract(.transactions(["nope"]), to: dir.path("x.ledger")) }
        #expect(throws: LedgerError.self) { try ledger.extract(.user("nobody"), to: dir.path("x.ledger")) }
        #expect(!FileManager.default.fileExists(atPath: dir.path("x.ledger")))
        let before = try fileBytes(dir.path("t2.ledger"))
        #expect(throws: LedgerError.self) { try ledger.extract(.transactions(["t1"]), to: dir.path("t2.ledger")) }
        #expect(try fileBytes(dir.path("t2.ledger")) == before)
    }

    @Test func theCLIWritesAReproAndSaysWhatItKept() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("user.ledger")
        #expect(try cli(["append", path], stdin: sampleLog).status == 0)
        let out = dir.path("t1.ledger")
        let result = try cli(["extract", path, "--transaction", "t1", "-o", out])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("kept "), "\(result.stdout)")
        #expect(result.stdout.contains(" of "), "\(result.stdout)")
        #expect(try cli(["verify", out]).status == 0)
        let again = try cli(["extract", path, "--transaction", "t1", "-o", out])
        #expect(again.status == 3)
        #expect(again.stderr.contains("--force"), "\(again.stderr)")
        #expect(try cli(["extract", path, "--transaction", "t1", "-o", out, "--force", "--json"]).stdout.contains("\"keptEvents\""))
        let both = try cli(["extract", path, "--transaction", "t1", "--user", "u1"])
        #expect(both.status == 2)
        let unknown = try cli(["extract", path, "--transaction", "nope"])
        #expect(unknown.status == 2)
        #expect(unknown.stderr.contains("nope"))
        #expect(!FileManager.default.fileExists(atPath: dir.path("user-repro.ledger")))
        #expect(try cli(["--help"]).stdout.contains("extract"))
    }
}
