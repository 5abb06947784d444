import PropertyBased
import Testing
@testable import PurchaseLedger

/// For random sequences of events (valid, invalid and nonsensical alike), appended one by one to a
/// real ledger with tiny blocks and frequent snapshots:
/// - replaying the stored log gives exactly the live state, at the end and at every seq;
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
        case 2: return E.purchased(t, downloads: p % 3 == 0 ? [] : ["\(t)-d1", "\(t)-d2"], version: "1.\(p % 3)", at: s)
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
        default: return E.registered("https://cdn/\(p % 2)", "k\(p % 3)", at: s)
        }
    }

    static let generator = Gen.int(in: 0...18_999).array(of: 1...70)

    @Test func replayEqualsLiveAndNoAcceptedSequenceBreaksARule() async throws {
        await propertyCheck(count: 60, input: Self.generator) { numbers in
            let dir = try TemporaryDirectory()
            let ledger = try Ledger(path: dir.path("prop.ledger"), configuration: testConfiguration(blockSize: 4, snapshotInterval: 7))
            try ledger.append(contentsOf: [
                E.product("p1", contents: [("c1", "1.0")], related: ["p2"]), E.product("p2", contents: [("c1", "1.0")]),
                E.product("coins", kind: .consumable),
            ])
            for (i, n) in numbers.enumerated() {
                guard (try? ledger.append(Self.event(n, index: i + 1))) != nil else { continue }
                let s = ledger.currentState
                for t in s.transactions.values where t.finished {
                    for id in t.downloads {
                        let d = try #require(s.downloads[id])
                        #expect(!(d.state == .finished && !d.copiedOut && !d.discarded), "finished \(t.transaction) left \(id) un-copied")
                        #expect(s.contentURL(for: id) == nil, "a URL after the finish of \(t.transaction)")
                        #expect(!d.inFlight, "\(id) still running after \(t.transaction) finished")
                    }
                }
            }
            let live = ledger.currentState
            #expect(try ledger.state(atSeq: .max) == live)
            var folded = LedgerState()
            for e in try ledger.events(limit: 100_000) {
                Reducer.replay(&folded, e.event, seq: e.seq)
            }
            #expect(folded == live)
            let middle = live.seq / 2
            var prefix = LedgerState()
            for e in try ledger.events(limit: Int(middle)) { Reducer.replay(&prefix, e.event, seq: e.seq) }
            #expect(try ledger.state(atSeq: middle) == prefix)
            #expect(try ledger.verify().isValid)
        }
    }
}
