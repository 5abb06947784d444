import CustomDump
import Foundation
import Testing

@testable import PurchaseLedger

/// The transaction transitions, event by state: each event that moves a known transaction, applied
/// to a transaction in every state, against the table docs/rules.md prints (read from the file).
/// From an allowed state the event is applied and leaves what the table says; already there, it is
/// a redelivery and changes nothing; from any other state it breaks `illegalTransactionTransition`
/// and, an observation, is flagged with nothing changed but the anomaly count.
@Suite struct TransactionMachineTests {
    typealias Row = DocumentedTransition

    static let documented = DocumentedTransition.table(under: "## The transaction transitions", eventsStartingWith: "transaction")

    /// "revoked" is a purchased transaction refunded: a flag on top of its state.
    static let states = ["purchasing", "deferred", "purchased", "failed", "restored", "revoked"]

    /// The names that describe a transaction in `state`: its status, and "revoked" as a flag.
    static func names(_ state: String) -> Set<String> { state == "revoked" ? ["purchased", "revoked"] : [state] }

    @Test func theDocsTableNamesEveryTransition() {
        #expect(Set(Self.documented.map(\.event)) == Set(EventType.allCases.filter { TransactionMachine.transition($0) != nil }.map(\.name)))
        #expect(Self.documented.count == 4)
    }

    /// A state with product p1 and transaction t1 in `state`.
    static func state(in state: String) throws -> LedgerState {
        var s = LedgerState()
        var events = [E.product("p1")]
        switch state {
        case "purchasing": events += [E.queued("t1")]
        case "deferred": events += [E.queued("t1"), E.deferred("t1")]
        case "purchased": events += [E.queued("t1"), E.purchased("t1")]
        case "failed": events += [E.queued("t1"), E.failed("t1")]
        case "restored": events += [E.restored("t1", original: "o1")]
        case "revoked": events += [E.queued("t1"), E.purchased("t1"), E.revoked("t1")]
        default: Issue.record("unknown state \(state)")
        }
        for e in events { #expect(try Reducer.reduce(&s, e) == .applied, "setting up \(state): \(e.type.name)") }
        return s
    }

    /// The event, equal to what the set-up recorded (so that arriving twice is a redelivery).
    static func event(_ name: String) -> Event {
        switch name {
        case "transactionDeferred": return E.deferred("t1", at: 7)
        case "transactionPurchased": return E.purchased("t1", at: 7)
        case "transactionFailed": return E.failed("t1", at: 7)
        default: return E.revoked("t1", at: 7)
        }
    }

    @Test(arguments: documented, states)
    func everyTransitionFromEveryState(_ row: Row, _ state: String) throws {
        let before = try Self.state(in: state)
        let event = Self.event(row.event)
        #expect(event.type.name == row.event)
        #expect(!event.type.isCommand, "the table's events are all observations")
        var after = before
        let names = Self.names(state)
        if names.contains(row.to) {
            #expect(try Reducer.reduce(&after, event) == .unchanged, "\(row.event) on a \(state) transaction is a redelivery")
            expectNoDifference(after, before, "a redelivery changes nothing")
        } else if !names.isDisjoint(with: row.from) {
            #expect(try Reducer.reduce(&after, event) == .applied, "\(row.event) from \(state)")
            let t = try #require(after.transactions["t1"])
            #expect(row.to == "revoked" ? t.revoked : t.state.rawValue == row.to, "\(row.event) from \(state) leads to \(row.to)")
        } else {
            var probe = before
            let error = #expect(throws: LedgerError.self) { try Reducer.decide(&probe, event) }
            #expect(error?.rule == .illegalTransactionTransition)
            #expect(error?.message.contains("transaction t1 is \(before.transactions["t1"]?.state.rawValue ?? "")") == true, "\(error?.message ?? "")")
            #expect(try Reducer.reduce(&after, event) == .anomaly(.illegalTransactionTransition), "\(row.event) from \(state) is flagged")
            var expected = before
            expected.anomalies += 1
            expectNoDifference(after, expected, "a flagged observation changes nothing but the anomaly count")
        }
    }
}
