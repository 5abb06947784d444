import Foundation
import GRDB
import PostgresNIO
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// Money over a fleet (contract 5.1): each ledger keeps its own catalog, and fleet revenue is the
/// sum of its ledgers' revenue per product, currency and price, whatever their catalogs say.
@Suite(.serialized, .enabled(if: FleetServer.available && Workload.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetMoneyTests {
    /// Device `i`'s storefront, currency and price factor.
    static let storefronts: [(storefront: String, currency: String, factor: Double)] = [
        ("USA", "USD", 1), ("FRA", "EUR", 0.92), ("JPN", "JPY", 150), ("GBR", "GBP", 0.79),
    ]

    /// The workload split into `devices` ledgers, each with a catalog in its own storefront's
    /// currency and prices, its purchases and restores saying their storefront, and some of them
    /// sandbox or family-shared.
    static func devices(_ count: Int, in dir: TemporaryDirectory) throws -> [String] {
        let lines = try String(contentsOfFile: try Workload.file(events: 20_000), encoding: .utf8).split(separator: "\n")
        let logs = DeviceSplit.split(try lines.map { try JSONLines.decode(String($0)) }, devices: count)
        return try logs.enumerated().map { i, log in
            let front = storefronts[i % storefronts.count]
            var n = 0
            let events = log.map { event -> Event in
                var e = event
                switch event.body {
                case .productRegistered(var r):
                    let price = (Double(r.price) ?? 1) * front.factor * (1 + Double(i) / 100)
                    r.price = front.currency == "JPY" ? String(Int(price.rounded())) : String(format: "%.2f", price)
                    r.currency = front.currency
                    e.body = .productRegistered(r)
                case .transactionPurchased(let t, let p, let u, let s, let d, _):
                    n += 1
                    let terms = PurchaseTerms(
                        storefront: front.storefront, environment: n % 7 == 0 ? .sandbox : nil, ownership: n % 11 == 0 ? .familyShared : nil)
                    e.body = .transactionPurchased(transaction: t, product: p, user: u, storeTransactionId: s, downloads: d, terms: terms)
                case .transactionRestored(let t, let o, let p, let u, let s, let d, _):
                    e.body = .transactionRestored(
                        transaction: t, originalTransaction: o, product: p, user: u, storeTransactionId: s, downloads: d,
                        terms: PurchaseTerms(storefront: front.storefront))
                default:
                    break
                }
                return e
            }
            let path = dir.path("device-\(i).ledger")
            _ = try Ledger(path: path).append(contentsOf: events)
            return path
        }
    }

    /// The ledgers' revenue lines summed per product, currency, price, environment and
    /// ownership (and storefront when split by it).
    static func sum(_ paths: [String], byStorefront: Bool = false) throws -> [String: RevenueLine] {
        var merged: [String: RevenueLine] = [:]
        for path in paths {
            for line in try Ledger(path: path).revenue(byStorefront: byStorefront, allEnvironments: true) {
                let key = Self.key(line)
                if merged[key] == nil { merged[key] = line } else { merged[key]!.add(line) }
            }
        }
        return merged
    }

    static func key(_ line: RevenueLine) -> String {
        [line.storefront ?? "-", line.product, line.currency, line.price, line.environment.rawValue, line.ownership.rawValue].joined(separator: " ")
    }

    static func expectFleetEqualsTheSum(_ paths: [String], _ fleet: FleetStore, sourceLocation: SourceLocation = #_sourceLocation) async throws {
        for byStorefront in [false, true] {
            let expected = try sum(paths, byStorefront: byStorefront)
            let lines = try await fleet.revenue(byStorefront: byStorefront, allEnvironments: true)
            #expect(lines.count == expected.count, sourceLocation: sourceLocation)
            #expect(Dictionary(uniqueKeysWithValues: lines.map { (key($0), $0) }) == expected, sourceLocation: sourceLocation)
            #expect(RevenueTotal.totals(of: lines) == RevenueTotal.totals(of: Array(expected.values)), sourceLocation: sourceLocation)
        }
        let production = try await fleet.revenue()
        #expect(Set(production) == Set(try sum(paths).values.filter(\.countsAsRevenue)), sourceLocation: sourceLocation)
    }

    @Test func fleetRevenueIsTheSumOfItsLedgersWhateverTheirCatalogsSay() async throws {
        let dir = try TemporaryDirectory()
        let (_, url) = try FleetServer.database()
        let paths = try Self.devices(12, in: dir)
        // Shipped with kills at random moments, then to the end.
        let kills = try ShipKiller.run(binary: binary, paths: paths, url: url, kills: 3, maxDelay: 0.6)
        #expect(kills.killed + kills.finished == 3)
        #expect(try cli(["ship"] + paths + ["--to", url]).status == 0)
        try await ShipKiller.check(paths: paths, url: url)
        let fleet = try await FleetStore.connect(url)
        let currencies = Set(try await fleet.revenue().map(\.currency))
        #expect(currencies == ["USD", "EUR", "JPY", "GBP"])
        #expect(try await fleet.revenue(allEnvironments: true).contains { !$0.countsAsRevenue })
        try await Self.expectFleetEqualsTheSum(paths, fleet)

        // One device registers a product again at an absurd price and sells it: its own rows
        // change, nobody else's.
        let product = try #require(try Ledger(path: paths[1]).revenue().first).product
        let others = try await fleet.fetch("SELECT ledger_id::text, price, currency FROM products WHERE product = \(product) ORDER BY ledger_id")
        let before = try await fleet.revenue(allEnvironments: true)
        let device = try Ledger(path: paths[0])
        let deviceID = try #require(try device.identity()).id
        let at = try #require(try device.events(limit: 1_000_000).last).event.at
        try device.append(contentsOf: [
            Event(at: at, .productRegistered(ProductRegistration(product: product, kind: .consumable, price: "99999.00", currency: "JPY", downloadable: false))),
            Event(at: at, .paymentQueued(transaction: "absurd-1", product: product, quantity: 1, user: "u-absurd")),
            Event(at: at, .transactionPurchased(transaction: "absurd-1")),
        ])
        #expect(try cli(["ship", paths[0], "--to", url]).status == 0)
        let after = try await fleet.fetch("SELECT ledger_id::text, price, currency FROM products WHERE product = \(product) ORDER BY ledger_id")
        func described(_ rows: [Row]) -> [String] {
            rows.filter { $0["ledger_id"] != deviceID }.map { "\($0["ledger_id"] as String) \($0["price"] as String) \($0["currency"] as String)" }
        }
        #expect(described(after) == described(others) && described(others).count == 11)
        #expect(after.first { $0["ledger_id"] == deviceID }?["price"] == "99999.00")
        try await Self.expectFleetEqualsTheSum(paths, fleet)
        let changed = Set(try await fleet.revenue(allEnvironments: true)).subtracting(before)
        #expect(changed.map { "\($0.product) \($0.price) \($0.currency) \($0.units)" } == ["\(product) 99999.00 JPY 1"])
        await fleet.close()
    }

    /// A fleet store migrated from before 0003: each ledger gets the old shared catalog rows of
    /// its products and its transactions the old shared price; its next ship, even with no new
    /// event, replaces them with the ledger's own.
    @Test func aFleetFromBeforeIsApproximatedThenMadeExactByTheNextShip() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database(migrated: false)
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        // The schema as 0001 and 0002 left it, with one ledger's rows.
        var sql = "CREATE TABLE fleet_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());\n"
        for migration in PurchaseLedgerFleet.embeddedMigrations.prefix(2) { sql += migration.sql + "\nINSERT INTO fleet_migrations (name) VALUES ('\(migration.name)');\n" }
        sql += """
            INSERT INTO ledgers VALUES ('00000000-0000-4000-8000-000000000001', 'created', 3, '\\x00', now(), now());
            INSERT INTO products VALUES ('p1', 'consumable', '1.99', 'EUR', false, NULL, 0);
            INSERT INTO transactions (ledger_id, transaction_id, product, quantity, state, finished, revoked, was_deferred, discarded_content, purchased_at_ms, events)
                VALUES ('00000000-0000-4000-8000-000000000001', 't1', 'p1', 1, 'purchased', true, false, false, false, 0, 3);
            """
        _ = try server.psql(sql, database: database)
        let migrated = try cli(["migrate", url])
        #expect(migrated.status == 0 && migrated.stdout.contains("0003_money_as_paid"), "\(migrated.stderr)")
        let fleet = try await FleetStore.connect(url)
        let old = try await fleet.fetch("SELECT t.price, t.currency, t.price_source, l.rows_version FROM transactions t JOIN ledgers l USING (ledger_id)")
        #expect(old.count == 1 && old[0]["price"] == "1.99" && old[0]["currency"] == "EUR")
        #expect((old[0]["price_source"] as String?) == nil && old[0]["rows_version"] == 1)
        #expect(try await fleet.fetch("SELECT ledger_id::text FROM products").map { $0["ledger_id"] as String } == ["00000000-0000-4000-8000-000000000001"])

        // A real ledger shipped, then its rows made as an old version would have left them.
        let path = dir.path("one.ledger")
        #expect(try cli(["append", path], stdin: MoneyTests.repriced.joined(separator: "\n")).status == 0)
        #expect(try cli(["ship", path, "--to", url]).status == 0)
        let id = try #require(try Ledger(path: path).identity()).id
        _ = try server.psql(
            "UPDATE transactions SET price = '1.99', currency = 'EUR', price_source = NULL WHERE ledger_id = '\(id)'; UPDATE ledgers SET rows_version = 1 WHERE ledger_id = '\(id)'",
            database: database)
        #expect(Set(try await fleet.revenue().map { "\($0.price) \($0.currency) \($0.units)" }) == ["1.99 EUR 3"])
        let again = try cli(["ship", path, "--to", url, "--json"])
        #expect(again.status == 0 && again.stdout.contains(#""shippedEvents":0"#), "\(again.stdout)")
        #expect(Set(try await fleet.revenue().map { "\($0.price) \($0.currency) \($0.units)" }) == ["1.99 EUR 2", "0.99 USD 1"])
        try await FleetFixture.expectSameProjections(try Ledger(path: path), fleet, id: id)
        await fleet.close()
    }
}
