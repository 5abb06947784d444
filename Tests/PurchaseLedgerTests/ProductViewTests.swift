import Foundation
import GRDB
import PurchaseLedger
import PurchaseLedgerFleet
import PurchaseLedgerStoreKit
import Testing

/// One transition of the store product view machine: the events that bring view `v1` to a
/// phase, the event that arrives, and what the reducer must make of it.
struct ProductViewTransition: Sendable, CustomTestStringConvertible {
    var phase: String
    var given: [Event]
    var event: Event
    var outcome: Outcome

    var testDescription: String { "\(event.type.name) when \(phase): \(outcome)" }

    static let presented = [E.viewPresented("v1")]
    static let loaded = presented + [E.viewLoaded("v1")]
    static let failed = presented + [E.viewFailed("v1")]
    static let dismissed = presented + [E.viewDismissed("v1")]
    static let phases: [(String, [Event])] = [("not presented", []), ("presented", presented), ("loaded", loaded), ("failed", failed), ("dismissed", dismissed)]

    /// Every event in every phase: the table of docs/rules.md, redeliveries and anomalies included.
    static let all: [ProductViewTransition] = {
        // What each event does in each phase (by the order of `phases`).
        let table: [(Event, [Outcome])] = [
            (E.viewPresented("v1"), [.applied, .unchanged, .unchanged, .unchanged, .unchanged]),
            // The same presentation delivered again later changes nothing either.
            (E.viewPresented("v1", at: 8), [.applied, .unchanged, .unchanged, .unchanged, .unchanged]),
            (
                E.viewPresented("v1", item: "42"),
                [
                    .applied, .anomaly(.illegalProductViewTransition), .anomaly(.illegalProductViewTransition), .anomaly(.illegalProductViewTransition),
                    .anomaly(.illegalProductViewTransition),
                ]
            ),
            (E.viewLoaded("v1"), [.anomaly(.productViewNotPresented), .applied, .unchanged, .anomaly(.illegalProductViewTransition), .anomaly(.illegalProductViewTransition)]),
            (E.viewFailed("v1"), [.anomaly(.productViewNotPresented), .applied, .anomaly(.illegalProductViewTransition), .unchanged, .anomaly(.illegalProductViewTransition)]),
            (
                E.viewFailed("v1", code: 5),
                [
                    .anomaly(.productViewNotPresented), .applied, .anomaly(.illegalProductViewTransition), .anomaly(.illegalProductViewTransition),
                    .anomaly(.illegalProductViewTransition),
                ]
            ),
            (E.viewDismissed("v1"), [.anomaly(.productViewNotPresented), .applied, .applied, .applied, .unchanged]),
            // Another view presented: an overlap while v1 is on screen (a failed sheet still is).
            (E.viewPresented("v2", at: 9), [.applied, .flagged(.productViewOverlap), .flagged(.productViewOverlap), .flagged(.productViewOverlap), .applied]),
        ]
        return table.flatMap { event, outcomes in
            zip(phases, outcomes).map { ProductViewTransition(phase: $0.0, given: $0.1, event: event, outcome: $1) }
        }
    }()
}

/// The views' fields but their stream counts, which only the log's writers move on.
func uncounted(_ views: [String: ProductViewRecord]) -> [String: ProductViewFields] {
    views.mapValues { v in
        var f = v.fields
        f.events = 0
        return f
    }
}

@Suite struct ProductViewTests {
    @Test(arguments: ProductViewTransition.all)
    func inTheReducer(_ t: ProductViewTransition) throws {
        var state = LedgerState()
        for e in t.given { #expect(try Reducer.reduce(&state, e) == .applied) }
        let before = state
        #expect(try Reducer.reduce(&state, t.event) == t.outcome)
        switch t.outcome {
        case .anomaly, .unchanged:
            // Nothing changes but the anomaly count.
            #expect(state.productViews == before.productViews)
            #expect(state.anomalies == before.anomalies + (t.outcome == .unchanged ? 0 : 1))
        case .flagged:
            #expect(state.anomalies == before.anomalies + 1)
            #expect(state.productViews["v1"]?.replacedAt == t.event.at && state.productViews["v2"]?.state == .presented)
            #expect(state.productViews["v2"]?.replaces == "v1")
            #expect(state.productViewsOnScreen.map(\.view) == ["v2"])
        case .applied, .ignored:
            #expect(state.productViews != before.productViews)
        }
    }

    @Test(arguments: ProductViewTransition.all)
    func inALedgerFile(_ t: ProductViewTransition) throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("views.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        if !t.given.isEmpty { try ledger.append(contentsOf: t.given) }
        let stored = try ledger.append(t.event)
        // Observations are never lost: every outcome is stored, an anomaly flagged with its rule.
        #expect(stored.events.count == 1)
        let rule: Rule? =
            switch t.outcome {
            case .anomaly(let r), .flagged(let r): r
            default: nil
            }
        #expect(stored.events.last?.anomaly == rule)
        let reopened = try Ledger(path: path, configuration: testConfiguration())
        #expect(try reopened.events().last?.anomaly == rule, "the flag is stored")
        var state = LedgerState()
        for e in t.given + [t.event] { _ = try Reducer.reduce(&state, e) }
        #expect(uncounted(reopened.currentState.productViews) == uncounted(state.productViews))
        #expect(try reopened.verify().isValid, "the projection equals a rebuild; every event replays as recorded")
    }

    /// An `item` that is not a positive integer is malformed: refused with its line and field,
    /// nothing written; so is a style that is neither sheet nor overlay.
    @Test func aBadItemOrStyleIsRefusedAndWritesNothing() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("views.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        try ledger.append(E.viewPresented("v0"))
        let files = try [path, path + "-wal"].map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
        for item in ["0", "-5", "01234", "12a", "", "99999999999999999999", "١٢٣"] {
            let error = #expect(throws: LedgerError.self) { try ledger.append(E.viewPresented("v1", item: item)) }
            #expect(error?.code == .malformedInput && error?.message.contains("`item`") == true, "\(item): \(String(describing: error))")
        }
        let lines = """
            {"type":"storeProductViewDismissed","at":"2024-03-01T08:00:05Z","view":"v0"}
            {"type":"storeProductViewPresented","at":"2024-03-01T08:00:06Z","view":"v1","item":1234567890,"style":"sheet"}
            """
        let numeric = #expect(throws: LedgerError.self) { try ledger.appendJSONLines(try JSONLinesInput(bytes: Array(lines.utf8))) }
        #expect(numeric?.line == 2 && numeric?.message.contains("`item`") == true, "\(String(describing: numeric))")
        let style = #expect(throws: LedgerError.self) {
            let line = #"{"type":"storeProductViewPresented","at":"2024-03-01T08:00:06Z","view":"v1","item":"1","style":"popover"}"#
            try ledger.appendJSONLines(try JSONLinesInput(bytes: Array(line.utf8)))
        }
        #expect(style?.line == 1 && style?.message.contains("`style`") == true, "\(String(describing: style))")
        #expect(try [path, path + "-wal"].map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == files, "a refused append writes nothing")
        #expect(try ledger.lastSeq() == 1)
    }

    /// Views survive snapshots, time travel and a rebuild; `replay --json` lists them only when
    /// the ledger has some; their tokens read back as given.
    @Test func viewsComeBackFromSnapshotsAndTheirJSON() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("views.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 4, snapshotInterval: 3))
        #expect(!StateJSON.encode(ledger.currentState).contains("productViews"))
        var events: [Event] = []
        for i in 0..<12 {
            events.append(
                Event(
                    at: E.at(10 * i),
                    .storeProductViewPresented(
                        view: "v\(i)", item: "\(100 + i % 3)", style: i % 2 == 0 ? .sheet : .overlay, affiliateToken: "aff", campaignToken: "c\(i % 2)", providerToken: "prov")))
            events.append(i % 4 == 3 ? E.viewFailed("v\(i)", at: 10 * i + 1) : E.viewLoaded("v\(i)", at: 10 * i + 1))
            events.append(E.viewDismissed("v\(i)", at: 10 * i + 2))
        }
        try ledger.append(contentsOf: events)
        // The same log without snapshots: every state replayed from the first event.
        let plain = try Ledger(path: dir.path("plain.ledger"), configuration: testConfiguration(blockSize: 4, snapshotInterval: 1_000_000))
        try plain.append(contentsOf: events)
        let snapshots = try DatabaseQueue(path: dir.path("views.ledger")).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots") }
        #expect(snapshots.count >= 10, "\(snapshots)")
        for seq in [1, 5, 17, 36] {
            var expected = LedgerState()
            for e in events.prefix(seq) { _ = try Reducer.reduce(&expected, e) }
            let state = try ledger.state(atSeq: Int64(seq))
            #expect(uncounted(state.productViews) == uncounted(expected.productViews), "seq \(seq)")
            #expect(state.productViews == (try plain.state(atSeq: Int64(seq))).productViews, "seq \(seq): stream counts too")
        }
        let v3 = try #require(ledger.currentState.productViews["v3"])
        #expect(v3.state == .dismissed && v3.error?.code == 0 && v3.affiliateToken == "aff" && v3.providerToken == "prov" && v3.failedAt != nil)
        let json = StateJSON.encode(ledger.currentState)
        #expect(json.contains(#""productViews":[{"view":"v0","item":"100","style":"sheet","state":"dismissed","affiliateToken":"aff","campaignToken":"c0""#), "\(json.prefix(600))")
        #expect(try ledger.rebuildProjections().rowsWritten == 0)
        #expect(try ledger.verify().isValid)
    }

    /// What a reference count of a generated workload says: presented, loaded, failed,
    /// dismissed without loading, the load times' median and 95th percentile (nearest rank), the
    /// campaign tokens; per item and style, in a period too.
    @Test func theReportEqualsAStraightforwardCount() throws {
        let workload = ViewWorkload(views: 600, seed: 7)
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("views.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: workload.events)
        #expect(try ledger.productViewSummary() == workload.expected())
        let from = workload.views[200].presentedAt, to = workload.views[400].presentedAt
        #expect(try ledger.productViewSummary(from: from, to: to) == workload.expected(from: from, to: to))
        #expect(workload.expected().contains { $0.dismissedWithoutLoading > 0 && $0.failed > 0 && $0.loaded > 0 && $0.campaignTokens.count > 1 })

        // The CLI prints the same figures, in every format.
        let json = try cli(["report", dir.path("views.ledger"), "--view", "product-views", "--format", "json"])
        #expect(json.status == 0)
        let rows = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])["rows"] as? [[String: Any]]
        #expect(rows?.count == workload.expected().count)
        let first = try #require(rows?.first), expected = workload.expected()[0]
        #expect(first["item"] as? String == expected.item && first["presented"] as? Int == expected.presented)
        #expect(first["medianLoadMs"] as? Int == expected.medianLoadMilliseconds.map(Int.init))
        let csv = try cli(["report", dir.path("views.ledger"), "--view", "product-views", "--format", "csv"])
        #expect(csv.status == 0 && csv.stdout.split(separator: "\n").count == workload.expected().count + 1)
        #expect(csv.stdout.hasPrefix("item,style,presented,loaded,failed,dismissed without loading,median load ms,p95 load ms,campaign tokens\n"))
        let html = try cli(["report", dir.path("views.ledger"), "--view", "product-views", "--format", "html"])
        #expect(html.status == 0 && html.stdout.contains("Store product views") && html.stdout.contains(expected.item))
        let table = try cli(["report", dir.path("views.ledger"), "--view", "product-views"])
        #expect(table.status == 0 && table.stdout.contains("dismissed without loading") && table.stdout.contains("\(workload.expected().count) rows"))
    }

    /// A load time is the same figure everywhere: the state, `timeline` and the report all take
    /// it between whole milliseconds (0.9999 s to 1.0001 s is 1 ms in each).
    @Test func aLoadTimeIsOneFigureEverywhere() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("views.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        let presented = try Timestamp.parse("2024-03-01T08:00:00.9999Z"), loaded = try Timestamp.parse("2024-03-01T08:00:01.0001Z")
        try ledger.append(contentsOf: [
            Event(at: presented, .storeProductViewPresented(view: "v1", item: "1", style: .sheet)), Event(at: loaded, .storeProductViewLoaded(view: "v1")),
        ])
        #expect(ledger.currentState.productViews["v1"]?.loadMilliseconds == 1)
        #expect(try ledger.productViewSummary().first?.medianLoadMilliseconds == 1)
        #expect(try cli(["timeline", path, "--product-view", "v1"]).stdout.contains("loaded in 1 ms"))
        // A token with a newline cannot make a row of its own in a table.
        try ledger.append(Event(at: loaded, .storeProductViewPresented(view: "v2", item: "2", style: .sheet, campaignToken: "x\n=1  sheet  9")))
        let table = try cli(["report", path, "--view", "product-views"])
        #expect(table.status == 0 && table.stdout.contains("x\\n=1") && !table.stdout.contains("\n=1"), "\(table.stdout)")
        #expect(try cli(["report", path, "--view", "product-views", "--user", "u1"]).status == 2, "--user does not apply")
    }

    /// The timeline of one item's views, and the first anomaly in the replay.
    @Test func timelineAndFirstAnomalyShowTheViews() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("views.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        try ledger.append(contentsOf: [
            E.viewPresented("v1", campaign: "spring", at: 1), E.viewFailed("v1", at: 2), E.viewDismissed("v1", at: 3),
            E.viewPresented("v2", item: "42", at: 4), E.viewLoaded("v2", at: 5), E.viewPresented("v3", style: .overlay, at: 6),
        ])
        let steps = try ledger.productViewTimeline(item: "1234567890")
        #expect(steps.map(\.event.seq) == [1, 2, 3, 6] && steps.last?.event.anomaly == .productViewOverlap)
        #expect(try ledger.productViewTimeline(item: "42").map(\.event.seq) == [4, 5])
        let timeline = try cli(["timeline", path, "--item", "1234567890"])
        #expect(
            timeline.status == 0 && timeline.stdout.contains("storeProductViewFailed v1 SKErrorDomain 0") && timeline.stdout.contains("ANOMALY productViewOverlap"),
            "\(timeline.stdout)")
        let one = try cli(["timeline", path, "--product-view", "v2", "--json"])
        #expect(one.status == 0 && one.stdout.split(separator: "\n").count == 2 && one.stdout.contains(#""state":"loaded""#), "\(one.stdout)")
        #expect(try cli(["timeline", path, "--product-view", "nope"]).status == 2)
        #expect(try cli(["timeline", path, "--item", "1", "--transaction", "t1"]).status != 0)
        let replay = try cli(["replay", path, "--first-anomaly"])
        #expect(replay.status == 0 && replay.stdout.contains("state after seq 6") && replay.stdout.contains("3 store product views (1 on screen)"), "\(replay.stdout)")
        #expect(replay.stdout.contains("v2    42") && replay.stdout.contains("loaded, replaced"), "\(replay.stdout)")
    }

    /// The recorder's platform-neutral calls, as the Apple adapters make them: a view id per
    /// presentation, the tokens kept, a refused item reported and nothing written.
    @Test func theRecorderRecordsAPresentationItsLoadAndItsDismissal() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("views.ledger"), configuration: testConfiguration())
        let errors = Locked<[LedgerError]>([])
        let recorder = StoreKitRecorder(ledger: ledger, onError: { e in errors.withLock { $0.append(e) } }, clock: { E.at(1) })
        let sheet = recorder.productViewPresented(
            ProductViewParameters(item: ProductViewParameters.item(NSNumber(value: 1234567890)) ?? "", campaignToken: "spring"), style: .sheet)
        recorder.productViewFailed(view: sheet, error: StoreError(domain: "SKErrorDomain", code: 0, message: "Cannot connect"))
        recorder.productViewDismissed(view: sheet)
        let overlay = recorder.productViewPresented(ProductViewParameters(item: "987654321", providerToken: "prov"), style: .overlay, view: "o1")
        recorder.productViewLoaded(view: overlay)
        recorder.productViewDismissed(view: overlay)
        #expect(errors.withLock { $0 }.isEmpty)
        #expect(overlay == "o1" && UUID(uuidString: sheet) != nil)
        let views = ledger.currentState.productViews
        #expect(views[sheet]?.item == "1234567890" && views[sheet]?.campaignToken == "spring" && views[sheet]?.state == .dismissed)
        #expect(views["o1"]?.providerToken == "prov" && views["o1"]?.loadedAt != nil && views["o1"]?.style == .overlay)
        // An item StoreKit would not take: reported, nothing written; what follows is kept as an anomaly.
        let before = try ledger.lastSeq()
        let bad = recorder.productViewPresented(ProductViewParameters(item: ProductViewParameters.item("com.example.app") ?? ""), style: .sheet)
        #expect(try ledger.lastSeq() == before)
        #expect(errors.withLock { $0 }.first?.code == .malformedInput)
        recorder.productViewDismissed(view: bad)
        #expect(try ledger.events().last?.anomaly == .productViewNotPresented)
        #expect(ProductViewParameters.item(NSNumber(value: 42)) == "42" && ProductViewParameters.item(7) == "7" && ProductViewParameters.item(nil) == nil)
    }
}

/// Store product views made up for a test: presentations of a few items, as sheets and
/// overlays, with and without campaign tokens, each loaded after a while, failed, dismissed while
/// loading, or left on screen until the next, and the figures a plain count gives.
struct ViewWorkload {
    struct View {
        var id: String
        var item: String
        var style: ProductViewStyle
        var campaign: String?
        var presentedAt: Timestamp
        var loadMilliseconds: Int64?
        var failed: Bool
        var dismissedWhileLoading: Bool
    }

    var views: [View] = []
    var events: [Event] = []

    init(views count: Int, seed: UInt64) {
        var random = LZ4CodecTests.SplitMix(state: seed)
        var at: Int64 = 1_709_280_000_000
        for i in 0..<count {
            at += Int64(random.next() % 60_000) + 1000
            let outcome = random.next() % 10
            let view = View(
                id: "view-\(i)", item: String(1_000_000 + random.next() % 4), style: random.next() % 3 == 0 ? .overlay : .sheet,
                campaign: random.next() % 2 == 0 ? nil : "campaign-\(random.next() % 3)", presentedAt: Timestamp(millisecondsSinceEpoch: at),
                loadMilliseconds: outcome < 6 ? Int64(random.next() % 3000) : nil, failed: outcome == 6 || outcome == 7, dismissedWhileLoading: outcome == 8)
            views.append(view)
            let base = Timestamp(millisecondsSinceEpoch: at)
            func after(_ ms: Int64) -> Timestamp { Timestamp(millisecondsSinceEpoch: base.nanosecondsSinceEpoch / 1_000_000 + ms) }
            events.append(Event(at: base, .storeProductViewPresented(view: view.id, item: view.item, style: view.style, campaignToken: view.campaign)))
            if let load = view.loadMilliseconds { events.append(Event(at: after(load), .storeProductViewLoaded(view: view.id))) }
            if view.failed {
                events.append(Event(at: after(400), .storeProductViewFailed(view: view.id, error: StoreError(domain: "SKErrorDomain", code: 0, message: "no network"))))
            }
            // Outcome 9 stays on screen until the next presentation replaces it.
            if outcome != 9 { events.append(Event(at: after(3500), .storeProductViewDismissed(view: view.id))) }
        }
    }

    /// The figures of the views presented in `from..<to`, counted plainly.
    func expected(from: Timestamp? = nil, to: Timestamp? = nil) -> [ProductViewSummary] {
        let chosen = views.filter { v in from.map { v.presentedAt >= $0 } ?? true && to.map { v.presentedAt < $0 } ?? true }
        var groups: [String: [View]] = [:]
        for v in chosen { groups[v.item + " " + v.style.rawValue, default: []].append(v) }
        return groups.values.map { group in
            let times = group.compactMap(\.loadMilliseconds).sorted()
            func rank(_ p: Double) -> Int64? { times.isEmpty ? nil : times[Int((p * Double(times.count)).rounded(.up)) - 1] }
            return ProductViewSummary(
                item: group[0].item, style: group[0].style, presented: group.count, loaded: times.count, failed: group.filter(\.failed).count,
                dismissedWithoutLoading: group.filter(\.dismissedWhileLoading).count, medianLoadMilliseconds: rank(0.5), p95LoadMilliseconds: rank(0.95),
                campaignTokens: Set(group.compactMap(\.campaign)).sorted())
        }
        .sorted { ($0.item, $0.style.rawValue) < ($1.item, $1.style.rawValue) }
    }
}

@Suite(.enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct ProductViewFleetTests {
    /// Three devices' views shipped to one store: the fleet's report is the devices' counts
    /// summed, its percentiles those of every device's load times together, its tokens all of
    /// theirs; the CLI over the store prints the same.
    @Test func theFleetsReportIsTheSumOfTheDevices() async throws {
        let (_, url) = try FleetServer.database()
        let workload = ViewWorkload(views: 450, seed: 11)
        let dir = try TemporaryDirectory()
        var paths: [String] = []
        var devices: [[ProductViewSummary]] = []
        for device in 0..<3 {
            let path = dir.path("device-\(device).ledger")
            let ledger = try Ledger(path: path, configuration: testConfiguration())
            // Each device its own presentations (the views are in order of presentation).
            let mine = Set(workload.views.indices.filter { $0 % 3 == device }.map { workload.views[$0].id })
            try ledger.append(contentsOf: workload.events.filter { mine.contains($0.body.productViewID ?? "") })
            devices.append(try ledger.productViewSummary())
            paths.append(path)
        }
        let shipped = try cli(["ship"] + paths + ["--to", url])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        let fleet = try await FleetStore.connect(url)
        let summary = try await fleet.productViewSummary()
        let from = workload.views[100].presentedAt, to = workload.views[300].presentedAt
        let period = try await fleet.productViewSummary(from: from, to: to)
        await fleet.close()
        #expect(summary == workload.expected())
        for s in summary {
            let same = devices.flatMap { $0 }.filter { $0.item == s.item && $0.style == s.style }
            #expect(s.presented == same.map(\.presented).reduce(0, +) && s.loaded == same.map(\.loaded).reduce(0, +))
            #expect(s.failed == same.map(\.failed).reduce(0, +) && s.dismissedWithoutLoading == same.map(\.dismissedWithoutLoading).reduce(0, +))
            #expect(s.campaignTokens == Array(Set(same.flatMap(\.campaignTokens))).sorted())
        }
        #expect(period == workload.expected(from: from, to: to))
        let json = try cli(["report", url, "--view", "product-views", "--format", "json"])
        #expect(
            json.status == 0 && json.stdout.contains(#""item":"\#(summary[0].item)","style":"\#(summary[0].style.rawValue)","presented":\#(summary[0].presented),"#),
            "\(json.stdout)")
        let html = try cli(["report", url, "--view", "product-views", "--format", "html"])
        #expect(html.status == 0 && html.stdout.contains("Store product views"))
    }
}
