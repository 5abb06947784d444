import PropertyBased
import Testing
@testable import PurchaseLedger

/// For random sequences of events (valid, invalid and nonsensical alike), appended one by one to a
/// real ledger with tiny blocks and frequent snapshots:
/// - replaying the stored log gives exactly the live state and the ledger's time travel, at every
///   seq;
/// - enough of each run is accepted for that to mean something (the run fails otherwise);
/// - no accepted sequence finishes a transaction with finished, un-copied content (unless
///   discarded), exposes a content URL after a finish, or leaves a download running after its
///   transaction finished.
@Suite struct PropertyTests {
    static let transactions = ["t0", "t1", "t2", "t3"]
    static let products = ["p1", "p2", "coins"]

    /// Decodes one generated number into an event of a small universe, so that events often
    /// meet each other: a few transactions, their downloads, two content URLs.
    static func event(_ n: Int, index: Int) -> Event {
        let action = n / 1000
        let p = n % 1000
        let t = transactions[p % transactions.count]
        let d = "\(t)-d\(1 + (p / 4) % 2)"
        let s = index
        switch action {
        case 0: return E.queued(t, products[(p / 4) % products.count], quantity: 1 + p % 3, user: "u\(p % 2)", at: s)
        case 1: return E.deferred(t, at: s)
        case 2:
            // Some purchases say what they were paid, where and in which environment.
            var e = E.purchased(t, downloads: p % 3 == 0 ? [] : ["\(t)-d1", "\(t)-d2"], version: "1.\(p % 3)", at: s)
            if case .transactionPurchased(let t, let product, let user, let store, let downloads, _) = e.body, p % 4 != 0 {
                let terms = [
                    PurchaseTerms(price: "\(p % 9).49", currency: "EUR", storefront: "FRA"), PurchaseTerms(environment: .sandbox),
                    PurchaseTerms(ownership: .familyShared, offer: Offer(type: .introductory)),
                ][p % 4 - 1]
                e.body = .transactionPurchased(transaction: t, product: product, user: user, storeTransactionId: store, downloads: downloads, terms: terms)
            }
            return e
        case 3: return E.failed(t, at: s)
        case 4: return E.restored("r\(p % 3)", original: t, product: products[p % 2], downloads: ["r\(p % 3)-d1"], at: s)
        case 5: return E.revoked(t, at: s)
        case 6: return E.finished(t, discard: p % 5 == 0, at: s)
        case 7: return E.start(p % 7 == 0 ? "r\(p % 3)-d1" : d, at: s)
        case 8: return E.progress(d, Double(p % 100) / 100, at: s)
        case 9: return E.pause(d, at: s)
        case 10: return E.resume(d, at: s)
        case 11: return E.cancel(d, at: s)
        case 12: return E.done(p % 7 == 0 ? "r\(p % 3)-d1" : d, at: s)
        case 13: return E.dlFailed(d, at: s)
        case 14: return E.copied(p % 7 == 0 ? "r\(p % 3)-d1" : d, at: s)
        case 15: return E.deleted(products[p % products.count], at: s)
        case 16: return E.published(products[p % 2], "c1", "1.\(p % 5)", at: s)
        case 17: return [E.restoreStarted(at: s), E.restoreCompleted(at: s), E.restoreFailed(at: s)][p % 3]
        case 18: return E.registered("https://cdn/\(p % 2)", "k\(p % 3)", at: s)
        default:
            // A product registered again at another price, in another currency.
            var e = E.product(products[p % products.count], kind: p % products.count == 2 ? .consumable : .nonConsumable, t: s)
            if case .productRegistered(var r) = e.body {
                (r.price, r.currency) = ("\(p % 13).99", ["USD", "JPY", "GBP"][p % 3])
                e.body = .productRegistered(r)
            }
            return e
        }
    }

    static let generator = Gen.int(in: 0...19_999).array(of: 1...70)

    /// Counts across the cases of one property check (its body runs one case at a time).
    final class Tally: @unchecked Sendable {
        var generated = 0
        var accepted = 0
        var seqsChecked = 0
    }

    /// The property library draws a new seed each run and prints it when a case fails; pass it to
    /// `.fixedSeed("...")` on this test to replay that case.
    @Test func replayEqualsLiveAndNoAcceptedSequenceBreaksARule() async throws {
        let tally = Tally()
        await propertyCheck(count: 60, input: Self.generator) { numbers in
            let dir = try TemporaryDirectory()
            let ledger = try Ledger(path: dir.path("prop.ledger"), configuration: testConfiguration(blockSize: 4, snapshotInterval: 7))
            try ledger.append(contentsOf: [
                E.product("p1", contents: [("c1", "1.0")], related: ["p2"]), E.product("p2", contents: [("c1", "1.0")]),
                E.product("coins", kind: .consumable),
            ])
            // The live state after every accepted append, by the seq it ends at.
            var live: [Int64: LedgerState] = [ledger.currentState.seq: ledger.currentState]
            for (i, n) in numbers.enumerated() {
                tally.generated += 1
                guard (try? ledger.append(Self.event(n, index: i + 1))) != nil else { continue }
                tally.accepted += 1
                let s = ledger.currentState
                live[s.seq] = s
                for t in s.transactions.values where t.finished {
                    for id in t.downloads {
                        let d = try #require(s.downloads[id])
                        #expect(!(d.state == .finished && !d.copiedOut && !d.discarded), "finished \(t.transaction) left \(id) un-copied")
                        #expect(s.contentURL(for: id) == nil, "a URL after the finish of \(t.transaction)")
                        #expect(!d.inFlight, "\(id) still running after \(t.transaction) finished")
                    }
                }
            }
            // At every seq: the log folded from the first event, the ledger's time travel (from
            // its snapshots), and, where an append ended, the state it had live, are one state.
            var folded = LedgerState()
            // Each transaction's timeline as folding from the first event gives it: the seq, and
            // the transaction and its downloads after the event.
            var timelines: [String: [(Int64, TransactionRecord?, [DownloadRecord])]] = [:]
            // What each transaction was paid when it was purchased or restored: never changed after.
            var fixed: [String: PaidTerms] = [:]
            for e in try ledger.events(limit: 100_000) {
                LogReplay.step(&folded, e.event, seq: e.seq)
                for t in folded.transactions.values where t.purchasedAt != nil {
                    if let paid = fixed[t.transaction] {
                        #expect(t.paid == paid, "the price of \(t.transaction) changed at seq \(e.seq)")
                    } else {
                        fixed[t.transaction] = t.paid
                        #expect(t.paid.price != nil, "\(t.transaction) was purchased without a price")
                    }
                }
                if let owner = e.event.body.transactionID ?? e.event.body.downloadID.flatMap({ folded.downloads[$0]?.transaction }) {
                    let t = folded.transactions[owner]
                    timelines[owner, default: []].append((e.seq, t, (t?.downloads ?? []).compactMap { folded.downloads[$0] }))
                }
                #expect(try ledger.state(atSeq: e.seq) == folded, "time travel to seq \(e.seq)")
                if let state = live[e.seq] { #expect(folded == state, "replay equals the live state at seq \(e.seq)") }
                tally.seqsChecked += 1
            }
            #expect(folded == ledger.currentState)
            // Revenue, from the projections, is the state's purchases at their fixed prices.
            var gross: [String: Int] = [:]
            for t in folded.transactions.values where t.state == .purchased {
                gross["\(t.product) \(t.paid.price!) \(t.paid.currency!) \(t.paid.environment) \(t.paid.ownership)", default: 0] += t.quantity
            }
            let lines = try ledger.revenue(allEnvironments: true)
            #expect(Dictionary(uniqueKeysWithValues: lines.map { ("\($0.product) \($0.price) \($0.currency) \($0.environment) \($0.ownership)", $0.units) }) == gross)
            // A timeline starts from the latest snapshot before the transaction's first event.
            for (id, expected) in timelines {
                let timeline = try ledger.timeline(transaction: id)
                #expect(timeline.map(\.event.seq) == expected.map(\.0), "timeline of \(id)")
                #expect(timeline.map(\.transaction) == expected.map(\.1), "timeline of \(id)")
                #expect(timeline.map(\.downloads) == expected.map(\.2), "timeline of \(id)")
            }
            // A transaction's events (with those of the downloads its purchase or restore named),
            // a download's, and a stream's are read from a snapshot too: the same as filtering
            // the whole log.
            let all = try ledger.events(limit: 100_000)
            for id in timelines.keys {
                var named = Set<String>()
                var expected: [Int64] = []
                for e in all {
                    let body = e.event.body
                    if body.transactionID == id {
                        if case .transactionPurchased(_, _, _, _, let specs?, _) = body { named.formUnion(specs.map(\.download)) }
                        if case .transactionRestored(_, _, _, _, _, let specs?, _) = body { named.formUnion(specs.map(\.download)) }
                    }
                    if body.transactionID == id || body.downloadID.map(named.contains) == true { expected.append(e.seq) }
                }
                var seqs: [Int64] = []
                try ledger.forEachEvent(ofTransaction: id) { e in
                    seqs.append(e.seq)
                    return true
                }
                #expect(seqs == expected, "events of transaction \(id)")
                let from = expected.count > 1 ? expected[1] : 1
                var later: [Int64] = []
                try ledger.forEachEvent(ofTransaction: id, from: from) { e in
                    later.append(e.seq)
                    return true
                }
                #expect(later == expected.filter { $0 >= from }, "events of transaction \(id) from \(from)")
                #expect(try ledger.events(inStream: "transaction:" + id).map(\.seq) == all.filter { $0.stream == "transaction:" + id }.map(\.seq))
                // When a condition on it first holds: the same from its snapshot as from the start.
                for holds in [
                    { (s: LedgerState) in s.transactions[id]?.state == .purchased }, { s in s.transactions[id]?.finished == true },
                    { s in (s.transactions[id]?.downloads ?? []).contains { s.downloads[$0]?.copiedOut == true } },
                ] {
                    #expect(try ledger.firstSeq(involvingTransaction: id) { s, _ in holds(s) } == ledger.firstSeq { s, _ in holds(s) }, "\(id)")
                }
            }
            for id in Set(all.compactMap(\.event.body.downloadID)) {
                var seqs: [Int64] = []
                try ledger.forEachEvent(ofDownload: id) { e in
                    seqs.append(e.seq)
                    return true
                }
                #expect(seqs == all.filter { $0.event.body.downloadID == id }.map(\.seq), "events of download \(id)")
                #expect(try ledger.events(inStream: "download:" + id).map(\.seq) == all.filter { $0.stream == "download:" + id }.map(\.seq))
                for holds in [{ (s: LedgerState) in s.downloads[id]?.state == .finished }, { s in s.downloads[id]?.state == .failed }] {
                    #expect(try ledger.firstSeq(involvingDownload: id) { s, _ in holds(s) } == ledger.firstSeq { s, _ in holds(s) }, "\(id)")
                }
            }
            #expect(try ledger.verify().isValid)
        }
        // A generator whose events the rules mostly refuse would prove little: most of a run must
        // be accepted, and every stored seq checked.
        #expect(tally.generated > 0)
        #expect(Double(tally.accepted) >= 0.3 * Double(tally.generated), "accepted \(tally.accepted) of \(tally.generated) generated events")
        #expect(tally.seqsChecked >= tally.accepted)
        print("property: accepted \(tally.accepted) of \(tally.generated) generated events; \(tally.seqsChecked) seqs checked")
    }
}
