import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Money as paid (contract 5.1): a transaction's price is fixed when it is purchased or restored,
/// and revenue counts production purchases their buyer paid for.
@Suite struct MoneyTests {
    /// The issue's example: p1 sold at 0.99 USD in March, re-registered at 1.99 EUR in April.
    static let repriced = [
        #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"p1","kind":"consumable","price":"0.99","currency":"USD","downloadable":false}"#,
        #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"t1","product":"p1","user":"u1"}"#,
        #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"t1"}"#,
        #"{"type":"transactionFinished","at":"2024-03-01T09:00:02Z","transaction":"t1"}"#,
        #"{"type":"productRegistered","at":"2024-04-01T00:00:00Z","product":"p1","kind":"consumable","price":"1.99","currency":"EUR","downloadable":false}"#,
        #"{"type":"paymentQueued","at":"2024-04-01T09:00:00Z","transaction":"t2","product":"p1","user":"u1"}"#,
        #"{"type":"transactionPurchased","at":"2024-04-01T09:00:01Z","transaction":"t2"}"#,
        #"{"type":"transactionFinished","at":"2024-04-01T09:00:02Z","transaction":"t2"}"#,
    ]

    static func prices(_ lines: [RevenueLine]) -> Set<String> {
        Set(lines.map { "\($0.product) \($0.price) \($0.currency) \($0.units) \($0.net)" })
    }

    /// Amounts as tables, CSV and HTML print them: the currency's decimals (ISO 4217's minor
    /// unit), padded, never rounded; what is not a plain decimal comes back as it is.
    @Test func amountsPrintWithTheirCurrencysDecimals() {
        for (amount, currency, text) in [
            ("7498.5", "USD", "7498.50"), ("-0.5", "EUR", "-0.50"), ("0", "USD", "0.00"), ("120", "JPY", "120"), ("12.5", "JPY", "12.5"),
            ("1.5", "BHD", "1.500"), ("1.23456", "USD", "1.23456"), ("4.99", "usd", "4.99"), ("2", "XYZ", "2.00"),
            ("", "USD", ""), (".", "USD", "."), ("-", "USD", "-"), ("1e5", "USD", "1e5"), ("1.", "USD", "1."), (".5", "USD", ".5"),
            ("-.5", "USD", "-.5"),
        ] {
            #expect(MoneyText.text(amount, currency: currency) == text, "\(amount) \(currency)")
        }
        #expect(MoneyText.text(Decimal(string: "7498.5")!, currency: "USD") == "7498.50")
        #expect(MoneyText.decimals(of: "KWD") == 3 && MoneyText.decimals(of: "KRW") == 0 && MoneyText.decimals(of: "GBP") == 2)
    }

    /// Prices have a documented range and scale (12 digits before the point, 6 after): past it
    /// input is refused with its line and field and nothing is written; within it every total is
    /// exact; a price spelt with leading zeros is the same price, one revenue line.
    @Test func pricesHaveARangeAndOneSpellingAndTotalsAreExact() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("m.ledger")
        func register(_ product: String, _ price: String) -> String {
            #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"\#(product)","kind":"consumable","price":"\#(price)","currency":"USD","downloadable":false}"#
        }
        func buy(_ t: String, _ product: String, quantity: Int = 1, price: String? = nil) -> String {
            #"{"type":"paymentQueued","at":"2024-03-01T09:00:00Z","transaction":"\#(t)","product":"\#(product)","quantity":\#(quantity),"user":"u1"}"#
                + "\n"
                + #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"\#(t)"\#(price.map { #","price":"\#($0)","currency":"USD""# } ?? "")}"#
        }
        // Within the range: a trillion less a millionth, ten units, exact.
        let log = [register("big", "999999999999.999999"), register("p", "4.99"), buy("t1", "big", quantity: 10), buy("t2", "p"), buy("t3", "p", price: "00000000000000000004.99")]
        #expect(try cli(["import", path, "-"], stdin: log.joined(separator: "\n")).status == 0)
        let json = try cli(["report", path, "--view", "revenue", "--format", "json"]).stdout
        #expect(json.contains(#""gross":"9999999999999.99999""#), "exact: \(json)")
        #expect(json.contains(#""product":"p","currency":"USD","price":"4.99","purchases":2"#), "one line for 4.99 however spelt: \(json)")
        #expect(json.contains(#""currency":"USD","purchases":3,"units":12"#) && json.contains(#""gross":"10000000000009.97999""#), "the total: \(json)")
        // Past it: refused, naming the line and the field; nothing written.
        let before = try fileBytes(path)
        for (price, line) in [("1" + String(repeating: "0", count: 300), 2), (String(repeating: "9", count: 39), 2), ("1.1234567", 2)] {
            let refused = try cli(["append", path], stdin: register("ok", "1") + "\n" + register("huge", price))
            #expect(refused.status == 2 && refused.stderr.contains("line \(line)") && refused.stderr.contains("`price`"), "\(price.prefix(12)): \(refused.stderr)")
            #expect(try fileBytes(path) == before, "nothing written")
        }
        // A price written before these limits (7 decimals, taken by earlier versions) still verifies.
        var unchecked = testConfiguration()
        unchecked.checksInput = false
        let old = try Ledger(path: dir.path("old.ledger"), configuration: unchecked)
        try old.append(
            Event(at: E.at(1), .productRegistered(ProductRegistration(product: "o", kind: .consumable, price: "4.9900000", currency: "USD", downloadable: false))))
        #expect(try cli(["verify", dir.path("old.ledger")]).status == 0, "a stored price past today's input limits is not damage")
        // The library is told the one spelling.
        #expect(throws: LedgerError.self) {
            try Ledger(path: path).append(
                Event(at: E.at(9), .productRegistered(ProductRegistration(product: "z", kind: .consumable, price: "04.99", currency: "USD", downloadable: false))))
        }
    }

    @Test func aLaterRegistrationNeverChangesAnEarlierPriceInAnyView() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("pc.ledger"), configuration: testConfiguration(blockSize: 2, snapshotInterval: 3))
        try ledger.append(contentsOf: Self.repriced.map { try JSONLines.decode($0) })
        let expected: Set<String> = ["p1 0.99 USD 1 0.99", "p1 1.99 EUR 1 1.99"]
        #expect(Self.prices(try ledger.revenue()) == expected)
        #expect(try ledger.transaction("t1")?.paid.price == "0.99" && ledger.transaction("t1")?.paid.priceSource == .catalog)
        #expect(try ledger.state(atSeq: 4).transactions["t1"]?.paid.currency == "USD", "time travel")
        #expect(try ledger.state(atSeq: 8).transactions["t1"]?.paid.currency == "USD", "from a snapshot")
        #expect(try ledger.purchaseHistory().map { "\($0.price ?? "") \($0.currency ?? "")" } == ["0.99 USD", "1.99 EUR"])
        #expect(try ledger.userSummary("u1").netSpent == ["USD": Decimal(string: "0.99")!, "EUR": Decimal(string: "1.99")!])
        try ledger.rebuildProjections(rewritingEveryRow: true)
        #expect(Self.prices(try ledger.revenue()) == expected, "after a rebuild")
        #expect(try ledger.verify(all: true, everySnapshot: true).isValid)

        // Export and import: the same prices, from the same log.
        let exported = try cli(["export", dir.path("pc.ledger")])
        try exported.stdout.write(toFile: dir.path("pc.jsonl"), atomically: true, encoding: .utf8)
        #expect(try cli(["import", dir.path("copy.ledger"), dir.path("pc.jsonl")]).status == 0)
        #expect(Self.prices(try Ledger(path: dir.path("copy.ledger")).revenue()) == expected)

        // The CLI's revenue table, as a finance person reads it.
        let table = try cli(["report", dir.path("pc.ledger"), "--view", "revenue", "--format", "csv"])
        #expect(table.status == 0)
        #expect(table.stdout.contains("p1,USD,0.99,1,1,0,0.99,0.00,0.99") && table.stdout.contains("p1,EUR,1.99,1,1,0,1.99,0.00,1.99"), "\(table.stdout)")
    }

    /// The v2 fields, through every form: JSON in, the binary payload, the state, export, the
    /// projections and the history report.
    @Test func termsRoundTripThroughEveryForm() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("terms.ledger")
        let lines = [
            #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"sub","kind":"autoRenewable","price":"9.99","currency":"USD","downloadable":false}"#,
            #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"t1","product":"sub","user":"u1","price":"0","currency":"EUR","storefront":"FRA","offer":{"type":"introductory"}}"#,
            #"{"type":"transactionPurchased","at":"2024-03-02T09:00:01Z","transaction":"t2","product":"sub","user":"u2","price":"8.99","currency":"EUR","storefront":"DEU","environment":"sandbox","offer":{"type":"promotional","id":"spring"}}"#,
            #"{"type":"transactionPurchased","at":"2024-03-03T09:00:01Z","transaction":"t3","product":"sub","user":"u3","ownership":"familyShared"}"#,
            #"{"type":"transactionRestored","at":"2024-03-04T09:00:01Z","transaction":"t4","originalTransaction":"t0","product":"sub","user":"u4","environment":"xcode","storefront":"USA"}"#,
        ]
        #expect(try cli(["append", path], stdin: lines.joined(separator: "\n")).status == 0)
        let ledger = try Ledger(path: path)
        let t1 = try #require(try ledger.transaction("t1")).paid
        #expect(t1.price == "0" && t1.currency == "EUR" && t1.priceSource == .event && t1.storefront == "FRA" && t1.offer == Offer(type: .introductory))
        let t2 = try #require(try ledger.transaction("t2")).paid
        #expect(t2.environment == .sandbox && t2.offer == Offer(type: .promotional, id: "spring") && !t2.countsAsRevenue)
        let t3 = try #require(try ledger.transaction("t3")).paid
        #expect(t3.ownership == .familyShared && t3.price == "9.99" && t3.priceSource == .catalog)
        #expect(try ledger.transaction("t4")?.paid.environment == .xcode)
        #expect(try ledger.transactions() == ledger.currentState.transactions.values, "projections equal the state")

        // Export writes the lines back field for field (the order of keys aside).
        let exported = try cli(["export", path]).stdout.split(separator: "\n").map(String.init)
        for (line, out) in zip(lines, exported) {
            let given = try JSONSerialization.jsonObject(with: Data(line.utf8)) as! NSDictionary
            let b = (try JSONSerialization.jsonObject(with: Data(out.utf8)) as! NSDictionary).mutableCopy() as! NSMutableDictionary
            b.removeObject(forKey: "seq")
            b.removeObject(forKey: "at")  // written with milliseconds
            let a = given.mutableCopy() as! NSMutableDictionary
            a.removeObject(forKey: "at")
            #expect(a == b, "\(out)")
        }
        let state = try cli(["replay", path, "--json"]).stdout
        #expect(
            state.contains(
                #""price":"0","currency":"EUR","priceSource":"event","storefront":"FRA","environment":"production","ownership":"purchased","offer":{"type":"introductory"}"#))
        let history = try cli(["report", path, "--format", "csv"]).stdout
        #expect(history.contains(",EUR,FRA,,introductory,purchased,") && history.contains(",EUR,DEU,sandbox,promotional spring,purchased,"), "\(history)")
        #expect(history.contains(",USD,,familyShared,,purchased,") && history.contains(",USD,USA,xcode,,restored,"), "\(history)")
    }

    @Test func revenueCountsProductionPurchasesAndShowsTheRestApart() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("env.ledger")
        func purchase(_ t: String, _ extra: String) -> String {
            #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"\#(t)","product":"p","user":"u"\#(extra)}"#
        }
        let lines = [
            #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"p","kind":"consumable","price":"2.00","currency":"USD","downloadable":false}"#,
            purchase("a", #","storefront":"USA""#), purchase("b", #","storefront":"CAN","price":"2.50","currency":"CAD""#),
            purchase("c", #","environment":"sandbox""#), purchase("d", #","environment":"xcode""#),
            purchase("e", #","ownership":"familyShared""#), purchase("f", #","price":"0","currency":"USD","offer":{"type":"introductory"}"#),
        ]
        #expect(try cli(["append", path], stdin: lines.joined(separator: "\n")).status == 0)
        let ledger = try Ledger(path: path)
        let lines1 = try ledger.revenue()
        #expect(Self.prices(lines1) == ["p 2.00 USD 1 2", "p 2.50 CAD 1 2.5", "p 0 USD 1 0"])
        #expect(RevenueTotal.totals(of: lines1).map { "\($0.currency) \($0.net) \($0.purchases)" } == ["CAD 2.5 1", "USD 2 2"])

        let all = try ledger.revenue(allEnvironments: true)
        #expect(all.count == 6 && all.filter(\.countsAsRevenue).count == 3)
        let totals = RevenueTotal.totals(of: all)
        #expect(totals.filter(\.countsAsRevenue).map { "\($0.currency) \($0.net)" } == ["CAD 2.5", "USD 2"], "the rest is never added")
        #expect(
            Set(totals.filter { !$0.countsAsRevenue }.map { "\($0.environment) \($0.ownership) \($0.net)" }) == [
                "sandbox purchased 2", "xcode purchased 2", "production familyShared 2",
            ])
        let byStorefront = try ledger.revenue(byStorefront: true)
        #expect(Set(byStorefront.map { "\($0.storefront ?? "-") \($0.currency) \($0.net)" }) == ["USA USD 2", "CAN CAD 2.5", " USD 0"])

        let csv = try cli(["report", path, "--view", "revenue", "--all-environments", "--format", "csv"]).stdout
        #expect(csv.hasPrefix("kind,product,currency,price,environment,ownership,purchases"))
        #expect(csv.contains("row,p,USD,2.00,sandbox,purchased,1,1,0,2.00,0.00,2.00") && csv.contains("total,NOT REVENUE,USD,,sandbox,purchased"), "\(csv)")
        let grouped = try cli(["report", path, "--view", "revenue", "--group-by", "storefront", "--format", "json"]).stdout
        #expect(grouped.contains(#""storefront":"CAN","product":"p","currency":"CAD","price":"2.50""#), "\(grouped)")
        let misuse = try cli(["report", path, "--all-environments"])
        #expect(misuse.status == 2 && misuse.stderr.contains("--all-environments applies to the revenue view only"))
    }

    @Test func malformedTermsAreRefusedNamingTheLineAndFieldAndNothingIsWritten() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("bad.ledger")
        let good = #"{"type":"productRegistered","at":"2024-03-01T00:00:00Z","product":"p","kind":"consumable","price":"2.00","currency":"USD","downloadable":false}"#
        let cases: [(String, String)] = [
            (#","price":"1.00""#, "fields `price` and `currency` go together"),
            (#","price":"-1","currency":"USD""#, "field `price` must be a decimal"),
            (#","price":"1","currency":"usd""#, "field `currency` must be an ISO 4217 code"),
            (#","storefront":"FR""#, "field `storefront` must be an ISO 3166-1 alpha-3"),
            (#","environment":"staging""#, "field `environment` must be production, sandbox or xcode"),
            (#","ownership":"shared""#, "field `ownership` must be purchased or familyShared"),
            (#","offer":{"id":"x"}"#, "missing field `offer.type`"),
            (#","offer":{"type":"trial"}"#, "field `offer.type` must be introductory, promotional, code or winBack"),
            (#","offer":"introductory""#, "field `offer` must be an object"),
        ]
        for (extra, message) in cases {
            let bad = #"{"type":"transactionPurchased","at":"2024-03-01T09:00:01Z","transaction":"t","product":"p"\#(extra)}"#
            let result = try cli(["append", path], stdin: good + "\n" + bad)
            #expect(result.status == 2 && result.stderr.contains("line 2") && result.stderr.contains(message), "\(extra): \(result.stderr)")
            let stored = FileManager.default.fileExists(atPath: path) ? try Ledger(path: path).lastSeq() : 0
            #expect(stored == 0, "nothing written")
        }
        // The library refuses the same values, with nothing written.
        let ledger = try Ledger(path: path)
        #expect {
            try ledger.append(contentsOf: [E.product("p"), Event(at: E.at(1), .transactionPurchased(transaction: "t", product: "p", terms: PurchaseTerms(price: "1")))])
        } throws: {
            ($0 as? LedgerError)?.code == .malformedInput && "\($0)".contains("go together")
        }
        #expect(try ledger.lastSeq() == 0)
    }

    /// A redelivered purchase may leave its terms out, never contradict them.
    @Test func aRedeliveryWithOtherTermsIsADuplicate() throws {
        var state = LedgerState()
        let terms = PurchaseTerms(price: "1.00", currency: "USD", storefront: "USA")
        let purchase = Event(at: E.at(2), .transactionPurchased(transaction: "t1", storeTransactionId: "s-t1", terms: terms))
        try reduceAll([E.product("p1"), E.queued("t1"), purchase], into: &state)
        #expect(state.transactions["t1"]?.paid.price == "1.00")
        #expect(try Reducer.reduce(&state, purchase) == .unchanged)
        #expect(try Reducer.reduce(&state, Event(at: E.at(3), .transactionPurchased(transaction: "t1", storeTransactionId: "s-t1"))) == .unchanged)
        // An observation is never lost: stored as an anomaly, the recorded terms kept.
        var other = terms
        other.price = "0.50"
        var after = state
        #expect(
            try Reducer.reduce(&after, Event(at: E.at(3), .transactionPurchased(transaction: "t1", storeTransactionId: "s-t1", terms: other))) == .anomaly(.duplicateTransaction))
        other = terms
        other.environment = .sandbox
        #expect(
            try Reducer.reduce(&after, Event(at: E.at(3), .transactionPurchased(transaction: "t1", storeTransactionId: "s-t1", terms: other))) == .anomaly(.duplicateTransaction))
        #expect(after.transactions["t1"]?.paid == state.transactions["t1"]?.paid && after.anomalies == 2)
    }

    /// A ledger written before prices were fixed (projections of reducer 1, no price columns)
    /// gets each transaction's price as the registration in force at its seq, on its first
    /// writable open; a read-only open reads the log and says its report tables are stale.
    @Test func aLedgerFromBeforeGetsThePriceInForceAtEachSeq() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("v1.ledger")
        do {
            let ledger = try Ledger(path: path, configuration: testConfiguration())
            try ledger.append(contentsOf: Self.repriced.map { try JSONLines.decode($0) })
        }
        try DatabaseQueue(path: path).write { db in
            try undoCompactProjections(db)
            try db.execute(sql: "UPDATE ledger_info SET value = 'reducer 1, projections 1' WHERE key = 'projection_stamp'")
            for column in ["price", "currency", "price_source", "storefront", "environment", "ownership", "offer_type", "offer_id"] {
                try db.execute(sql: "ALTER TABLE transactions DROP COLUMN \(column)")
            }
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = '0005_transaction_terms'")
        }
        let readOnly = try cli(["report", path, "--view", "revenue"])
        #expect(readOnly.status == 3 && readOnly.stderr.contains("purchase-ledger rebuild"), "\(readOnly.stderr)")
        #expect(try cli(["replay", path, "--json"]).stdout.contains(#""price":"0.99","currency":"USD""#), "the log reads as ever")
        #expect(try cli(["rebuild", path]).status == 0)
        #expect(Self.prices(try Ledger(path: path).revenue()) == ["p1 0.99 USD 1 0.99", "p1 1.99 EUR 1 1.99"])
    }
}
