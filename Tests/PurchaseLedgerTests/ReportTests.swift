import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Report figures against expectations computed by hand, on a hand-built ledger: a refund, a
/// restore, an early finish with lost content, related products, two currencies.
@Suite(.serialized) struct ReportTests {
    static let log = """
        {"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"book","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"contents":[{"content":"ch1","contentVersion":"1.0","contentLength":100}],"relatedProducts":["book-ipad"]}
        {"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"book-ipad","kind":"nonConsumable","price":"5.99","currency":"USD","downloadable":false}
        {"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"atlas","kind":"nonConsumable","price":"9.99","currency":"EUR","downloadable":true,"contents":[{"content":"maps","contentVersion":"2.0","contentLength":100}]}
        {"type":"productRegistered","at":"2024-03-01T08:00:00Z","product":"coins","kind":"consumable","price":"0.99","currency":"USD","downloadable":false}
        {"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"book","user":"alice"}
        {"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"t1","downloads":[{"download":"t1-d1","content":"ch1","contentVersion":"1.0","contentLength":100}]}
        {"type":"downloadStarted","at":"2024-03-01T09:00:02Z","download":"t1-d1"}
        {"type":"downloadFinished","at":"2024-03-01T09:00:03Z","download":"t1-d1","contentURL":"file:///c/"}
        {"type":"contentCopiedOut","at":"2024-03-01T09:00:04Z","download":"t1-d1","destination":"Documents/ch1"}
        {"type":"transactionFinished","at":"2024-03-01T09:00:05Z","transaction":"t1"}
        {"type":"paymentQueued","at":"2024-03-02T10:00:00Z","transaction":"t2","product":"coins","quantity":3,"user":"alice"}
        {"type":"transactionPurchased","at":"2024-03-02T10:00:01Z","transaction":"t2"}
        {"type":"transactionFinished","at":"2024-03-02T10:00:02Z","transaction":"t2"}
        {"type":"paymentQueued","at":"2024-03-03T11:00:00Z","transaction":"t3","product":"atlas","user":"alice"}
        {"type":"transactionPurchased","at":"2024-03-03T11:00:01Z","transaction":"t3","downloads":[{"download":"t3-d1","content":"maps","contentVersion":"2.0","contentLength":100}]}
        {"type":"downloadStarted","at":"2024-03-03T11:00:02Z","download":"t3-d1"}
        {"type":"transactionFinished","at":"2024-03-03T11:00:03Z","transaction":"t3"}
        {"type":"paymentQueued","at":"2024-03-04T12:00:00Z","transaction":"t4","product":"atlas","user":"bob"}
        {"type":"transactionPurchased","at":"2024-03-04T12:00:01Z","transaction":"t4"}
        {"type":"transactionRevoked","at":"2024-03-05T12:00:00Z","transaction":"t4","reason":"refund"}
        {"type":"restoreStarted","at":"2024-03-06T12:00:00Z","user":"alice"}
        {"type":"transactionRestored","at":"2024-03-06T12:00:01Z","transaction":"t5","originalTransaction":"t1","product":"book","user":"alice"}
        {"type":"restoreCompleted","at":"2024-03-06T12:00:02Z"}
        {"type":"paymentQueued","at":"2024-03-07T12:00:00Z","transaction":"t6","product":"coins","user":"bob"}
        {"type":"transactionFailed","at":"2024-03-07T12:00:01Z","transaction":"t6","error":{"domain":"SKErrorDomain","code":2,"message":"The payment was cancelled."}}
        """

    func ledger(_ dir: TemporaryDirectory) throws -> (Ledger, String) {
        let path = dir.path("r.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        try ledger.appendJSONLines(try JSONLinesInput(bytes: Array(Self.log.utf8)))
        return (ledger, path)
    }

    @Test func libraryFigures() throws {
        let dir = try TemporaryDirectory()
        let (ledger, _) = try ledger(dir)
        let alice = try ledger.userSummary("alice")
        #expect(alice.ownedProducts == ["atlas", "book", "book-ipad", "coins"], "related products count; a purchased consumable is owned too, as the contract defines it")
        #expect(alice.netSpent == ["USD": Decimal(string: "7.96")!, "EUR": Decimal(string: "9.99")!], "4.99 + 3 x 0.99; the restore is not a payment")
        #expect(alice.ownedContent.map(\.content.content) == ["ch1"])
        let bob = try ledger.userSummary("bob")
        #expect(bob.netSpent["EUR"] == 0 && bob.refunded["EUR"] == Decimal(string: "9.99")!)
        let revenue = try ledger.revenue()
        let atlas = try #require(revenue.first { $0.product == "atlas" })
        #expect(atlas.units == 2 && atlas.refundedUnits == 1 && atlas.net == Decimal(string: "9.99")!)
        #expect(try ledger.undelivered().map(\.transaction.transaction) == ["t3"], "paid, never copied out (lost to an early finish)")
        #expect(try ledger.purchaseHistory(transactionID: "t3")?.contentLost == true)
        #expect(try ledger.unfinishedTransactions().map(\.transaction) == ["t4", "t5", "t6"])
        let failures = try ledger.failureRates()
        #expect(failures.count == 1 && failures[0].code == 2 && failures[0].count == 1)
        #expect(abs(failures[0].share - 1.0 / 5.0) < 1e-9, "1 failed of the 5 that were purchased or failed (a restore is not a payment)")
        let history = try ledger.purchaseHistory(PurchaseHistoryQuery(user: "alice"))
        #expect(history.map(\.transaction.transaction) == ["t1", "t2", "t3", "t5"], "sorted by purchase date")
        #expect(history.last?.isRestore == true)
        #expect(try ledger.purchaseHistory(PurchaseHistoryQuery(user: "alice", limit: 2, offset: 2)).map(\.transaction.transaction) == ["t3", "t5"])
        #expect(try ledger.purchaseHistory(PurchaseHistoryQuery(kinds: [.consumable])).map(\.transaction.transaction) == ["t2", "t6"])
        #expect(try ledger.purchaseHistory(PurchaseHistoryQuery(from: try Timestamp.parse("2024-03-03T00:00:00Z"), to: try Timestamp.parse("2024-03-05T00:00:00Z"))).count == 2)
    }

    /// The report queries read projection rows by column position, found once per query: what
    /// they decode equals the records of the state the log gives, and a row whose columns come in
    /// another order, with a name repeated, reads as GRDB reads it by name (the first of the two).
    @Test func reportQueriesDecodeTheRecordsTheStateHolds() throws {
        let dir = try TemporaryDirectory()
        let (ledger, path) = try ledger(dir)
        let state = try ledger.state(atSeq: .max)
        let history = try ledger.purchaseHistory(PurchaseHistoryQuery(limit: .max))
        #expect(history.count == state.transactions.count)
        for entry in history {
            let id = entry.transaction.transaction
            #expect(entry.transaction == state.transactions[id], "\(id)")
            #expect(entry.downloads == entry.transaction.downloads.map { state.downloads[$0] }, "\(id)")
            #expect(try ledger.purchaseHistory(transactionID: id) == entry)
        }
        #expect(try ledger.transactions() == state.transactions.values)
        #expect(try ledger.downloads() == state.downloads.values)
        #expect(try ledger.undelivered() == history.filter { $0.transaction.transaction == "t3" })

        let t5 = try #require(state.transactions["t5"])
        var columns: [String: (any DatabaseValueConvertible)?] = [
            "events": t5.events, "user_id": t5.user, "state": t5.state.rawValue, "quantity": t5.quantity, "product": t5.product,
            "transaction_id": t5.transaction, "finished": t5.finished, "revoked": t5.revoked, "was_deferred": t5.wasDeferred,
            "discarded_content": t5.discardedContent, "original_transaction": t5.originalTransaction,
            "queued_at_ms": t5.queuedAt.map(Projector.ms), "purchased_at_ms": t5.purchasedAt.map(Projector.ms),
        ]
        columns["price"] = t5.paid.price
        columns["currency"] = t5.paid.currency
        columns["price_source"] = t5.paid.priceSource?.rawValue
        columns["ownership"] = t5.paid.ownership.rawValue
        columns["environment"] = t5.paid.environment.rawValue
        let shuffled = Row(columns)
        var expected = t5
        expected.downloads = []
        #expect(TransactionRecord(row: shuffled) == expected)
        let repeated = try DatabaseQueue().read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT 'first' AS product, 'second' AS PRODUCT, 't9' AS transaction_id, 1 AS quantity, 'purchased' AS state,
                      0 AS finished, 0 AS revoked, 0 AS was_deferred, 0 AS discarded_content, 2 AS events
                    """)!
        }
        #expect(TransactionRecord(row: repeated).product == "first")
        // The same through SQLite's C API, as the report queries read: the first of a repeated
        // name, text as UTF-8 of its stored length, NULL as nil.
        let read = try DatabaseQueue().read { db in
            try StatementColumns.fetchAll(
                db,
                sql: """
                    SELECT 'first' AS product, 'second' AS PRODUCT, 't9' AS transaction_id, 1 AS quantity, 'purchased' AS state,
                      0 AS finished, 1 AS revoked, 'é✓ x' AS user_id, NULL AS original_transaction, 'SKErrorDomain' AS error_domain,
                      2 AS error_code, 'a' || char(0) || 'b' AS error_message, 1709900000123 AS queued_at_ms, 2 AS events
                    """
            ) { TransactionRecord(columns: $0) }
        }
        #expect(read.map(\.product) == ["first"])
        #expect(read.first?.user == "é✓ x")
        #expect(read.first?.revoked == true && read.first?.finished == false)
        #expect(read.first?.originalTransaction == nil)
        #expect(read.first?.error == StoreError(domain: "SKErrorDomain", code: 2, message: "a\u{0}b"))
        #expect(read.first?.queuedAt == Timestamp(millisecondsSinceEpoch: 1_709_900_000_123))

        // A field holding a CR LF pair is quoted in CSV (it is one character to Swift, which the
        // check for "\r" and "\n" once missed).
        let failed =
            #"{"type":"paymentQueued","at":"2024-03-08T12:00:00Z","transaction":"t7","product":"coins","user":"bob"}"#
            + "\n" + #"{"type":"transactionFailed","at":"2024-03-08T12:00:01Z","transaction":"t7","error":{"domain":"SKErrorDomain","code":0,"message":"line one\r\nline two"}}"#
        #expect(try cli(["append", path], stdin: failed).status == 0)
        let csv = try cli(["report", path, "--user", "bob", "--format", "csv"]).stdout
        #expect(csv.contains("\"SKErrorDomain 0: line one\r\nline two\""), "\(csv)")

        // What the page shows is escaped, markup and all.
        let marked =
            #"{"type":"paymentQueued","at":"2024-03-09T12:00:00Z","transaction":"t8","product":"coins","user":"bob"}"#
            + "\n" + #"{"type":"transactionFailed","at":"2024-03-09T12:00:01Z","transaction":"t8","error":{"domain":"SKErrorDomain","code":1,"message":"<b>\"x\" & y</b>"}}"#
        #expect(try cli(["append", path], stdin: marked).status == 0)
        let html = try cli(["report", path, "--user", "bob", "--format", "html"]).stdout
        #expect(html.contains("&lt;b&gt;&quot;x&quot; &amp; y&lt;/<wbr>b&gt;"), "escaped (a path-like word may break after its slash)")
        #expect(!html.contains("<b>\"x\""))
    }

    @Test func everyFormatAndView() throws {
        let dir = try TemporaryDirectory()
        let (_, path) = try ledger(dir)
        let csv = try cli(["report", path, "--view", "revenue", "--format", "csv"]).stdout
        #expect(csv.contains("atlas,EUR,9.99,2,2,1,19.98,9.99,9.99"))
        let json = try cli(["report", path, "--view", "undelivered", "--format", "json"]).stdout
        let object = try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
        let rows = try #require(object["rows"] as? [[String: Any]])
        #expect(object["truncated"] as? Bool == false)
        #expect(rows.count == 1 && rows[0]["contentLost"] as? Bool == true)
        for view in ["history", "revenue", "undelivered", "stuck", "unfinished", "failures"] {
            for format in ["table", "csv", "json", "html"] {
                let r = try cli(["report", path, "--view", view, "--format", format])
                #expect(r.status == 0, "\(view) \(format): \(r.stderr)")
            }
        }
        let user = try cli(["report", path, "--user", "alice"]).stdout
        #expect(user.contains("alice owns: atlas, book, book-ipad, coins"))
        #expect(user.contains("spent, net of refunds: 9.99 EUR, 7.96 USD"))
        let table = try cli(["report", path, "--view", "failures"]).stdout
        #expect(table.contains("SKErrorDomain") && table.contains("20.00%"))
        // Filters reach SQL as bound parameters: injection attempts find nothing.
        for attack in ["' OR '1'='1", "alice'; DROP TABLE transactions; --", "%", "alice\" OR 1=1 --"] {
            // A user no transaction names: exit 2, nothing printed (README, exit status).
            let byUser = try cli(["report", path, "--user", attack, "--format", "json"])
            #expect(byUser.status == 2 && byUser.stdout.isEmpty && byUser.stderr.contains("names the user given with --user"), "\(byUser.stderr)")
            #expect(try cli(["report", path, "--product", attack, "--format", "csv"]).stdout.split(separator: "\n").count == 1)
        }
        #expect(try cli(["verify", path]).status == 0, "nothing was dropped")
    }

    /// A ledger whose history fills every column with long values: store and original ids,
    /// storefronts, offers, long product and download ids, paths, errors and refund reasons.
    static var wideLog: String {
        var lines = [Self.log]
        for i in 1...40 {
            let product = "com.example.reference.library.volume.\(100 + i)", t = "tx-wide-\(1000 + i)"
            let contents = (1...2).map { #"{"content":"volume-\#(100 + i)-chapter-\#($0)","contentVersion":"1.\#($0)","contentLength":4096}"# }
            lines.append(
                #"{"type":"productRegistered","at":"2024-03-08T08:00:00Z","product":"\#(product)","kind":"nonConsumable","price":"12.5","currency":"\#(i % 3 == 0 ? "JPY" : "EUR")","downloadable":true,"contents":[\#(contents.joined(separator: ","))]}"#
            )
            lines.append(#"{"type":"paymentQueued","at":"2024-03-08T09:\#(10 + i):00Z","transaction":"\#(t)","product":"\#(product)","user":"u-\#(10000 + i)"}"#)
            let downloads = (1...2).map {
                #"{"download":"\#(t)-volume-\#(100 + i)-chapter-\#($0)","content":"volume-\#(100 + i)-chapter-\#($0)","contentVersion":"1.\#($0)","contentLength":4096}"#
            }
            let offer = i % 2 == 0 ? #","offer":{"type":"promotional","id":"spring-campaign-2024"}"# : ""
            lines.append(
                #"{"type":"transactionPurchased","at":"2024-03-08T09:\#(10 + i):01Z","transaction":"\#(t)","storeTransactionId":"20000000000\#(10000 + i)","storefront":"FRA","environment":"production","ownership":"purchased"\#(offer),"downloads":[\#(downloads.joined(separator: ","))]}"#
            )
            for c in 1...2 {
                let d = "\(t)-volume-\(100 + i)-chapter-\(c)"
                lines.append(#"{"type":"downloadStarted","at":"2024-03-08T09:\#(10 + i):02Z","download":"\#(d)"}"#)
                lines.append(#"{"type":"downloadFinished","at":"2024-03-08T09:\#(10 + i):03Z","download":"\#(d)","contentURL":"file:///cache/\#(d)/"}"#)
                lines.append(
                    #"{"type":"contentCopiedOut","at":"2024-03-08T09:\#(10 + i):04Z","download":"\#(d)","destination":"Library/Application Support/Content/volume-\#(100 + i)-chapter-\#(c)/1.\#(c)/"}"#
                )
            }
            lines.append(#"{"type":"transactionFinished","at":"2024-03-08T09:\#(10 + i):05Z","transaction":"\#(t)"}"#)
            if i % 5 == 0 {
                lines.append(
                    #"{"type":"transactionRevoked","at":"2024-03-09T09:\#(10 + i):00Z","transaction":"\#(t)","reason":"Refunded by customer support after a duplicate charge"}"#)
            }
        }
        // A download that started and stalled: the stuck view's row.
        lines.append(#"{"type":"paymentQueued","at":"2024-03-10T10:00:00Z","transaction":"tx-wide-stuck","product":"book","user":"u-10099"}"#)
        lines.append(
            #"{"type":"transactionPurchased","at":"2024-03-10T10:00:01Z","transaction":"tx-wide-stuck","downloads":[{"download":"tx-wide-stuck-ch1","content":"ch1","contentVersion":"1.0","contentLength":100}]}"#
        )
        lines.append(#"{"type":"downloadStarted","at":"2024-03-10T10:00:02Z","download":"tx-wide-stuck-ch1"}"#)
        lines.append(#"{"type":"downloadProgressed","at":"2024-03-10T10:00:03Z","download":"tx-wide-stuck-ch1","progress":0.3}"#)
        // A restore of a purchase made on another device: a long original id, never broken.
        lines.append(#"{"type":"restoreStarted","at":"2024-03-10T11:00:00Z","user":"u-10001"}"#)
        lines.append(
            #"{"type":"transactionRestored","at":"2024-03-10T11:00:01Z","transaction":"tx-wide-restored","originalTransaction":"tx-wide-original-from-old-device-1000","product":"book","user":"u-10001"}"#
        )
        lines.append(#"{"type":"restoreCompleted","at":"2024-03-10T11:00:02Z"}"#)
        lines.append(#"{"type":"paymentQueued","at":"2024-03-10T12:00:00Z","transaction":"tx-wide-failed","product":"coins","user":"bob"}"#)
        lines.append(
            #"{"type":"transactionFailed","at":"2024-03-10T12:00:01Z","transaction":"tx-wide-failed","error":{"domain":"SKErrorDomain","code":0,"message":"Cannot connect to the App Store: the network connection was lost while confirming the purchase."}}"#
        )
        return lines.joined(separator: "\n")
    }

    /// Every view's HTML page, opened in headless Chromium 1280 pixels wide: it leads with its own
    /// subject (the count of its rows; revenue figures on the revenue view only), nothing runs off
    /// the page sideways, the table's header is on the first screen, and no id, time or amount is
    /// broken across lines. The measurements come from a script this test adds to a copy of each
    /// page: the page itself has none.
    @Test(.enabled(if: FileManager.default.fileExists(atPath: "/usr/bin/chromium"), "needs chromium"))
    func everyHTMLViewLeadsWithItsSubjectAndFitsThePage() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("wide.ledger")
        let imported = try cli(["import", path, "-"], stdin: Self.wideLog)
        #expect(imported.status == 0, "\(imported.stderr)")
        let views: [(view: String, lead: String)] = [
            ("history", "49 transactions"), ("undelivered", "2 transactions"), ("revenue", "revenue lines"),
            ("stuck", "1 download"), ("unfinished", "6 transactions"), ("failures", "kinds of payment failure"),
        ]
        // A page --limit cut says so where it gives the count.
        let cut = try cli(["report", path, "--format", "html", "--limit", "2"]).stdout
        #expect(cut.contains("<p class=\"lead\">the first <b>2 transactions</b>") && cut.contains("(cut by --limit: more match)"))
        for (view, lead) in views {
            let html = try cli(["report", path, "--view", view, "--format", "html"] + (view == "stuck" ? ["--as-of", "2024-03-11T00:00:00Z"] : [])).stdout
            #expect(!html.contains("<script") && !html.contains("https://"), "\(view): no script, nothing fetched")
            #expect(html.contains("<p class=\"lead\"><b>") && html.contains(lead), "\(view) leads with its rows: \(lead)")
            #expect(html.contains("<section class=\"currencies\">") == (view == "revenue"), "\(view): revenue figures only on the revenue view")
            #expect(!html.contains("registered prices"), "the subtitle says amounts are as paid")
            let probe = """
                <script>
                const broken = [...document.querySelectorAll('table.rows td:not(.text):not(.t), table.rows .nw')].filter(el => {
                  const node = [...el.childNodes].find(n => n.nodeType === 3 && n.textContent.trim());
                  if (!node) return false;
                  const range = document.createRange(); range.selectNodeContents(node);
                  return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1;
                }).map(el => el.textContent);
                const head = document.querySelector('table.rows thead').getBoundingClientRect();
                document.body.setAttribute('data-probe', [document.documentElement.scrollWidth, Math.round(head.bottom), innerHeight, broken.length].join(' ') + ' ' + broken.slice(0, 3).join('|'));
                </script>
                """
            let file = dir.path("\(view).html")
            try html.replacingOccurrences(of: "</body>", with: probe + "</body>").write(toFile: file, atomically: true, encoding: .utf8)
            let png = dir.path("\(view).png")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/chromium")
            process.arguments = [
                "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,800", "--screenshot=\(png)", "--dump-dom",
                "file://\(file)",
            ]
            let out = Pipe()
            process.standardOutput = out
            process.standardError = FileHandle.nullDevice
            try process.run()
            let dom = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            #expect(process.terminationStatus == 0)
            let measured = try #require(dom.firstRange(of: "data-probe=\"").map { dom[$0.upperBound...].prefix { $0 != "\"" } }, "\(view): the probe ran")
            let figures = measured.split(separator: " ", maxSplits: 4).map(String.init)
            let (width, headerBottom, screen, broken) = (Int(figures[0]) ?? .max, Int(figures[1]) ?? .max, Int(figures[2]) ?? 0, Int(figures[3]) ?? .max)
            #expect(width <= 1280, "\(view): the page is \(width) pixels wide at 1280")
            #expect(headerBottom <= screen, "\(view): the table starts below the first screen (\(headerBottom) > \(screen))")
            #expect(broken == 0, "\(view): \(broken) ids, times or amounts broken across lines: \(figures.count > 4 ? figures[4] : "")")
            let size = (try? FileManager.default.attributesOfItem(atPath: png)[.size] as? NSNumber)?.intValue ?? 0
            #expect(size > 10_000, "\(view): a screenshot was drawn")
            if let keep = ProcessInfo.processInfo.environment["REPORT_SCREENSHOTS"] {
                try? FileManager.default.copyItem(atPath: png, toPath: "\(keep)/\(view).png")
            }
        }
    }
}
