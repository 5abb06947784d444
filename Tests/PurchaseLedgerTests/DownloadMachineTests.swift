import CustomDump
import Foundation
import Testing

@testable import PurchaseLedger

/// The download state machine, event by phase: every download event applied to a download in
/// every phase, against the table docs/rules.md prints (read from the file, so the docs and the
/// reducer cannot drift apart). An allowed transition is applied and leaves the state the table
/// says; any other breaks `illegalDownloadTransition`: a command is refused with nothing changed,
/// an observation is flagged as an anomaly with nothing changed but the count.
@Suite struct DownloadMachineTests {
    typealias Row = DocumentedTransition

    static let documented = DocumentedTransition.table(under: "## The download state machine", eventsStartingWith: "download")

    static let phases = ["not started", "waiting", "active", "paused", "finished", "failed", "cancelled"]

    @Test func theDocsTableNamesEveryDownloadEvent() {
        #expect(Set(Self.documented.map(\.event)) == Set(EventType.allCases.filter { DownloadMachine.transition($0) != nil }.map(\.name)))
        #expect(Self.documented.count == 7)
    }

    /// A state with product p1, transaction t1 purchased with download t1-d1 brought to `phase`.
    static func state(in phase: String) throws -> LedgerState {
        var s = LedgerState()
        var events = [E.product("p1", contents: [("c1", "1.0")]), E.queued("t1"), E.purchased("t1", downloads: ["t1-d1"])]
        let d = "t1-d1"
        switch phase {
        case "not started": break
        case "waiting": events += [E.start(d)]
        case "active": events += [E.start(d), E.progress(d, 0.5)]
        case "paused": events += [E.start(d), E.pause(d)]
        case "finished": events += [E.start(d), E.done(d)]
        case "failed": events += [E.start(d), E.dlFailed(d)]
        case "cancelled": events += [E.start(d), E.cancel(d)]
        default: Issue.record("unknown phase \(phase)")
        }
        for e in events { #expect(try Reducer.reduce(&s, e) == .applied, "setting up \(phase): \(e.type.name)") }
        return s
    }

    static func event(_ name: String) -> Event {
        let d = "t1-d1"
        switch name {
        case "downloadStarted": return E.start(d, at: 7)
        case "downloadPaused": return E.pause(d, at: 7)
        case "downloadResumed": return E.resume(d, at: 7)
        case "downloadCancelled": return E.cancel(d, at: 7)
        case "downloadProgressed": return E.progress(d, 0.75, at: 7)
        case "downloadFinished": return E.done(d, at: 7)
        default: return E.dlFailed(d, at: 7)
        }
    }

    @Test(arguments: documented, phases)
    func everyDownloadEventInEveryPhase(_ row: Row, _ phase: String) throws {
        let before = try Self.state(in: phase)
        let event = Self.event(row.event)
        #expect(event.type.name == row.event)
        var after = before
        if row.from.contains(phase) {
            #expect(try Reducer.reduce(&after, event) == .applied, "\(row.event) from \(phase)")
            #expect(after.downloads["t1-d1"]?.state.rawValue == row.to, "\(row.event) from \(phase) leaves it \(row.to)")
        } else if event.type.isCommand {
            let error = #expect(throws: LedgerError.self, "\(row.event) from \(phase) is refused") { try Reducer.reduce(&after, event) }
            #expect(error?.rule == .illegalDownloadTransition)
            #expect(error?.message.contains("download t1-d1 is \(phase)") == true, "the refusal names the phase: \(error?.message ?? "")")
            expectNoDifference(after, before, "a refused command changes nothing")
        } else {
            #expect(try Reducer.reduce(&after, event) == .anomaly(.illegalDownloadTransition), "\(row.event) from \(phase) is flagged")
            var expected = before
            expected.anomalies += 1
            expectNoDifference(after, expected, "a flagged observation changes nothing but the anomaly count")
        }
    }
}
