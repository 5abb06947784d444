import Foundation
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerCLI
import ArgumentParser

/// One id, two byte sequences: precomposed (NFC) and decomposed (NFD). Each event below names the
/// ids in one form or the other; the ledger must treat them as one id everywhere.
@Suite struct IdentifierTests {
    static let nfc = "\u{E9}"  // é
    static let nfd = "e\u{301}"  // e + combining acute accent

    static func id(_ base: String, _ form: String) -> String { base + form }

    /// A log naming every id in both forms: transaction, product, content, download, user,
    /// original transaction, store id, a related product and a standalone url.
    static var log: [Event] {
        let (c, d) = (nfc, nfd)
        return [
            Event(
                at: E.at(0),
                .productRegistered(
                    ProductRegistration(
                        product: "livr" + c, kind: .nonConsumable, price: "4.99", currency: "EUR", downloadable: true,
                        contents: [ContentSpec(content: "chapitr" + d, contentVersion: ContentVersion("1.0")!, contentLength: 10)],
                        relatedProducts: ["livr" + d + "-ipad"]))),
            Event(
                at: E.at(0),
                .productRegistered(
                    ProductRegistration(
                        product: "livr" + c + "-ipad", kind: .nonConsumable, price: "5.99", currency: "EUR", downloadable: false))),
            Event(at: E.at(1), .paymentQueued(transaction: "t" + d, product: "livr" + d, quantity: 1, user: "ren" + d + "e")),
            Event(
                at: E.at(2),
                .transactionPurchased(
                    transaction: "t" + c, product: nil, user: "ren" + c + "e", storeTransactionId: "s" + d,
                    downloads: [DownloadSpec(download: "d" + d, content: "chapitr" + c, contentVersion: ContentVersion("1.0")!, contentLength: 10)])),
            Event(at: E.at(3), .downloadStarted(download: "d" + c)),
            Event(at: E.at(4), .downloadFinished(download: "d" + d, contentURL: "file:///cache/d/")),
            Event(at: E.at(5), .contentCopiedOut(download: "d" + c, destination: "Documents/caf" + d, checksum: nil, bytesCopied: 10)),
            Event(at: E.at(6), .contentVersionPublished(product: "livr" + d, content: "chapitr" + d, contentVersion: ContentVersion("1.1")!)),
            Event(at: E.at(7), .transactionFinished(transaction: "t" + d, discardContent: false)),
            Event(at: E.at(8), .restoreStarted(user: "ren" + d + "e")),
            Event(
                at: E.at(9),
                .transactionRestored(
                    transaction: "r" + d, originalTransaction: "t" + d, product: "livr" + c, user: "ren" + c + "e",
                    storeTransactionId: nil, downloads: nil)),
            Event(at: E.at(10), .restoreCompleted),
            Event(at: E.at(11), .contentRegistered(url: "https://cdn.example/caf" + d, download: "k" + d, contentLength: 5)),
            Event(at: E.at(12), .contentRegistered(url: "https://cdn.example/caf" + c, download: "k" + c, contentLength: 5)),
        ]
    }

    static func ledger(_ dir: TemporaryDirectory) throws -> Ledger {
        let ledger = try Ledger(path: dir.path("ids.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: log)
        return ledger
    }

    @Test func normalizeIsNFCAndLeavesASCIIAlone() {
        #expect(Identifier.normalize("t-" + Self.nfd).utf8.elementsEqual(("t-" + Self.nfc).utf8))
        #expect(Identifier.normalize("t-" + Self.nfc).utf8.elementsEqual(("t-" + Self.nfc).utf8))
        #expect(Identifier.normalize("com.example.book1") == "com.example.book1")
        // Free text is not an id: destinations keep their bytes.
        let copied = EventBody.contentCopiedOut(download: "d" + Self.nfd, destination: "caf" + Self.nfd, checksum: nil, bytesCopied: nil).normalizingIDs()
        guard case .contentCopiedOut(let d, let destination, _, _) = copied else { Issue.record("changed type"); return }
        #expect(d.utf8.elementsEqual(("d" + Self.nfc).utf8))
        #expect(destination.utf8.elementsEqual(("caf" + Self.nfd).utf8))
    }

    @Test func oneIdInTwoFormsIsOneRecordInEveryLayer() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Self.ledger(dir)
        let (c, d) = (Self.nfc, Self.nfd)
        let isNFC = { (s: String) in s.utf8.elementsEqual(Identifier.normalize(s).utf8) && !s.utf8.elementsEqual(("x" + d).utf8) }

        // The reducer: one transaction, one download, no anomaly; the repeat url with the other
        // form is an identical repeat, not a contentKeyMismatch.
        let state = ledger.currentState
        #expect(state.transactions.count == 2)
        #expect(state.downloads.count == 2)
        #expect(state.anomalies == 0)

        // The log and export: every id stored as NFC bytes, the destination as given.
        var exported = ""
        try ledger.forEachEvent { e in
            exported += JSONLines.encode(e.event) + "\n"; return true
        }
        #expect(exported.unicodeScalars.contains("\u{301}"), "the destination keeps its decomposed form")
        #expect(
            exported.components(separatedBy: "\n").filter { !$0.contains("destination") }.allSatisfy { !$0.unicodeScalars.contains("\u{301}") },
            "no decomposed id in the log: \(exported)")

        // The projections, queried in either form: the download joins its transaction.
        for form in [c, d] {
            let t = try #require(try ledger.transaction("t" + form))
            #expect(isNFC(t.transaction) && isNFC(t.product) && t.user.map(isNFC) == true)
            #expect(t.downloads.count == 1)
            #expect(try ledger.downloads(transaction: "t" + form).count == 1)
            #expect(try ledger.transactions(user: "ren" + form + "e").count == 2)
            #expect(try ledger.owns(product: "livr" + form))
            #expect(try ledger.owns(product: "livr" + form + "-ipad"), "related in the other form")
            #expect(try ledger.updateAvailable(product: "livr" + form, content: "chapitr" + form))
            #expect(try ledger.download(forURL: "https://cdn.example/caf" + form).utf8.elementsEqual(("k" + c).utf8))
            #expect(try ledger.timeline(transaction: "t" + form).count == 6, "queued, purchased, started, finished, copied out, finished")
        }
        let owned = try ledger.ownedContent()
        #expect(owned.count == 1)
        #expect(owned.allSatisfy { isNFC($0.product) && isNFC($0.content) && isNFC($0.transaction) && isNFC($0.download) })

        // The reports: the user's history shows the transaction with its download.
        for form in [c, d] {
            let history = try ledger.purchaseHistory(PurchaseHistoryQuery(user: "ren" + form + "e", product: "livr" + form))
            #expect(history.count == 2)
            #expect(history.first { $0.transaction.state == .purchased }?.downloads.count == 1)
            #expect(try ledger.userSummary("ren" + form + "e").ownedProducts.count == 2)
        }
        #expect(try ledger.undelivered().isEmpty, "the copied-out download is found")
        #expect(try ledger.revenue().map(\.units) == [1])

        // The JSON state: NFC bytes in every id (the destination is free text, kept as given).
        let json = StateJSON.encode(state)
        #expect(json.unicodeScalars.filter { $0 == "\u{301}" }.count == 2, "only the two destinations: \(json)")
        #expect(json.replacingOccurrences(of: "Documents/caf" + d, with: "").unicodeScalars.allSatisfy { $0 != "\u{301}" })
        #expect(try ledger.verify().isValid)
    }

    @Test func theCLIFindsAnIdGivenInTheOtherForm() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("ids.ledger")
        let jsonl = Self.log.map { JSONLines.encode($0) }.joined(separator: "\n")
        #expect(try cli(["append", path], stdin: jsonl).status == 0)
        let report = try cli(["report", path, "--user", "ren" + Self.nfd + "e", "--format", "json"])
        #expect(report.status == 0, "\(report.stderr)")
        #expect(report.stdout.contains("\"download\":\"d\(Self.nfc)\""), "\(report.stdout)")
        let timeline = try cli(["timeline", path, "--transaction", "t" + Self.nfd])
        #expect(timeline.status == 0, "\(timeline.stderr)")
        #expect(try cli(["verify", path]).status == 0)
    }
}

/// Revenue totals per currency and revenue by period.
@Suite struct RevenueTotalsTests {
    /// The report tests' ledger.
    func ledger(_ dir: TemporaryDirectory) throws -> (Ledger, String) { try ReportTests().ledger(dir) }

    @Test func totalsArePerCurrencyAndFollowThePeriod() throws {
        let dir = try TemporaryDirectory()
        let (ledger, _) = try ledger(dir)
        // book 4.99 + coins 3 x 0.99 in USD; atlas 9.99 twice in EUR, one refunded.
        let totals = RevenueTotal.totals(of: try ledger.revenue())
        #expect(totals.map(\.currency) == ["EUR", "USD"])
        #expect(totals[0].gross == Decimal(string: "19.98")! && totals[0].refunds == Decimal(string: "9.99")! && totals[0].net == Decimal(string: "9.99")!)
        #expect(totals[0].units == 2 && totals[0].refundedUnits == 1 && totals[0].purchases == 2)
        #expect(totals[1].gross == Decimal(string: "7.96")! && totals[1].refunds == 0 && totals[1].units == 4 && totals[1].purchases == 2)

        let march2 = try ledger.revenue(from: Timestamp.parse("2024-03-02T00:00:00Z"), to: Timestamp.parse("2024-03-04T00:00:00Z"))
        let periodTotals = RevenueTotal.totals(of: march2)
        #expect(periodTotals.map(\.currency) == ["EUR", "USD"])
        #expect(periodTotals[0].gross == Decimal(string: "9.99")! && periodTotals[1].gross == Decimal(string: "2.97")!)

        let daily = try ledger.revenue(groupBy: .day)
        #expect(daily.compactMap(\.period) == ["2024-03-01", "2024-03-02", "2024-03-03", "2024-03-04"])
        #expect(RevenueTotal.totals(of: daily) == totals, "grouping moves no money")
        #expect(RevenueLine.acrossPeriods(daily) == (try ledger.revenue()), "the daily lines merged are the lines without periods")
        // The chart's figures: one per day and currency, in order, adding up to the net totals.
        let chart = try ledger.dailyRevenue()
        #expect(Set(chart.map { "\($0.day) \($0.currency)" }).count == chart.count && chart.count >= 4)
        #expect(chart.map(\.day) == chart.map(\.day).sorted())
        for total in totals { #expect(chart.filter { $0.currency == total.currency }.map(\.net).reduce(0, +) == total.net, "\(total.currency)") }
        let weekly = try ledger.revenue(groupBy: .week)
        #expect(Set(weekly.compactMap(\.period)) == ["2024-W09", "2024-W10"])
        #expect(RevenueTotal.totals(of: weekly) == totals)
        #expect(Set(try ledger.revenue(groupBy: .month).compactMap(\.period)) == ["2024-03"])
    }

    @Test(arguments: [
        ("1970-01-01", "1970-W01", "1970-01"), ("2024-12-30", "2025-W01", "2024-12"), ("2021-01-03", "2020-W53", "2021-01"),
        ("2024-02-29", "2024-W09", "2024-02"), ("2026-11-22", "2026-W47", "2026-11"), ("1969-12-31", "1970-W01", "1969-12"),
    ])
    func periodLabels(day: String, week: String, month: String) throws {
        let ms = try Timestamp.parse(day + "T12:00:00Z").nanosecondsSinceEpoch / 1_000_000
        let days = Int64((Double(ms) / 86_400_000).rounded(.down))
        #expect(RevenuePeriod.day.label(ofDay: days) == day)
        #expect(RevenuePeriod.week.label(ofDay: days) == week)
        #expect(RevenuePeriod.month.label(ofDay: days) == month)
    }

    @Test func everyFormatShowsTheTotals() throws {
        let dir = try TemporaryDirectory()
        let (_, path) = try ledger(dir)
        let table = try cli(["report", path, "--view", "revenue"])
        #expect(table.stdout.split(separator: "\n").contains { $0.hasPrefix("TOTAL") && $0.contains("EUR") && $0.contains("19.98") && $0.contains("9.99") })
        let csv = try cli(["report", path, "--view", "revenue", "--format", "csv"]).stdout.split(separator: "\n")
        #expect(csv.first?.hasPrefix("kind,product,currency") == true)
        // Amounts with their currency's decimals.
        #expect(csv.filter { $0.hasPrefix("total,") } == ["total,TOTAL,EUR,,2,2,1,19.98,9.99,9.99", "total,TOTAL,USD,,2,4,0,7.96,0.00,7.96"])
        let json = try cli(["report", path, "--view", "revenue", "--format", "json", "--from", "2024-03-02T00:00:00Z"])
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])
        let totals = try #require(object["totals"] as? [[String: Any]])
        #expect(totals.map { $0["currency"] as? String } == ["EUR", "USD"])
        #expect(totals.map { $0["gross"] as? String } == ["19.98", "2.97"], "the period applies to the totals")
        #expect((object["rows"] as? [Any])?.count == 2)
        let monthly = try cli(["report", path, "--view", "revenue", "--group-by", "month", "--format", "csv"]).stdout
        #expect(monthly.hasPrefix("kind,month,product"))
        #expect(monthly.contains("row,2024-03,atlas,EUR"))
        let html = try cli(["report", path, "--view", "revenue", "--format", "html"]).stdout
        #expect(html.contains("<tfoot>") && html.contains("<h3>EUR</h3>") && html.contains("<dt>units sold</dt><dd>4</dd>"))
        let wrongView = try cli(["report", path, "--group-by", "week"])
        #expect(wrongView.status == 2 && wrongView.stderr.contains("revenue"))
    }
}

/// The CLI's rough edges a support engineer met.
@Suite struct CLIEdgeTests {
    @Test func helpParagraphsAreNotHardWrapped() throws {
        // Each paragraph of every command's discussion is one line; only indented example lines
        // break, so the argument parser wraps prose to the terminal.
        let commands: [any ParsableCommand.Type] = [Root.self] + Root.configuration.subcommands
        for command in commands {
            let lines = command.configuration.discussion.split(separator: "\n", omittingEmptySubsequences: false)
            for (a, b) in zip(lines, lines.dropFirst()) where !a.isEmpty && !b.isEmpty && !b.hasPrefix(" ") && !a.hasSuffix(":") {
                Issue.record("\(command.configuration.commandName ?? "?"): a paragraph breaks after \"\(a.suffix(30))\"")
            }
        }
        let help = try cli(["--help"], environment: ["COLUMNS": "80"]).stdout
        #expect(help.contains("finish call as an event."), "\(help)")
    }

    @Test func aRefusedFirstAppendLeavesNoFile() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("new.ledger")
        let refused = try cli(["append", path], stdin: #"{"type":"transactionFinished","at":"2024-03-01T09:15:02Z","transaction":"t1"}"#)
        #expect(refused.status == 2)
        let malformed = try cli(["append", path], stdin: "{not json")
        #expect(malformed.status == 2)
        let rule = try cli(["append", path], stdin: #"{"type":"restoreStarted","at":"2024-03-01T09:15:02Z"}"# + "\n" + #"{"type":"restoreStarted","at":"2024-03-01T09:15:03Z"}"#)
        #expect(rule.status == 1 && rule.stderr.contains("restoreInProgress"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir.url.path).isEmpty)
        #expect(try cli(["append", path], stdin: #"{"type":"restoreStarted","at":"2024-03-01T09:15:02Z"}"#).status == 0)
    }

    @Test func aDirectoryIsNamedAsSuch() throws {
        let dir = try TemporaryDirectory()
        #expect { try Ledger(path: dir.url.path) } throws: { ($0 as? LedgerError)?.message.contains("is a directory") == true }
        for arguments in [["append", dir.url.path], ["replay", dir.url.path], ["verify", dir.url.path]] {
            let result = try cli(arguments, stdin: "")
            #expect(result.status == 3)
            #expect(result.stderr.contains("is a directory"), "\(arguments): \(result.stderr)")
            #expect(!result.stderr.contains("disk I/O"))
        }
    }

    @Test func replayPastTheEndSaysWhereTheLedgerEnds() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        #expect(try cli(["append", path], stdin: sampleLog).status == 0)
        let past = try cli(["replay", path, "--at", "500", "--json"])
        #expect(past.status == 0)
        #expect(past.stderr.contains("the ledger ends at seq 10"), "\(past.stderr)")
        #expect(past.stdout.contains("\"seq\":10"))
        let inside = try cli(["replay", path, "--at", "5"])
        #expect(inside.stderr.isEmpty)
    }
}
