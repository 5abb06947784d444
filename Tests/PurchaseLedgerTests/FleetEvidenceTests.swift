import Foundation
import PostgresNIO
import PurchaseLedgerTesting
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// Apple's evidence in a fleet (#50): `ship` checks every signed transaction from the signed data
/// in the device's file, so a device that books a price its own signed transaction does not say
/// is `invalid` in the store too, and fleet revenue `--evidence apple` is the sum of the devices'.
@Suite(.serialized, .enabled(if: FleetServer.available && Workload.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetEvidenceTests {
    /// The shared workload split into `count` device ledgers, every purchase signed by `chain`
    /// with what the event and the catalog say; device `liar`'s first purchase books 0.99 where
    /// its signed transaction says 9.99. Returns the paths and the liar's transaction.
    static func devices(_ count: Int, liar: Int, chain: SigningChain, in dir: TemporaryDirectory) throws -> (paths: [String], lie: String) {
        let lines = try String(contentsOfFile: try Workload.file(events: 20_000), encoding: .utf8).split(separator: "\n")
        let logs = DeviceSplit.split(try lines.map { try JSONLines.decode(String($0)) }, devices: count)
        var lie = ""
        var storeID = 3_000_000_000
        let paths = try logs.enumerated().map { i, log -> String in
            var catalog: [String: (price: String, currency: String)] = [:]
            var queued: [String: (product: String, quantity: Int)] = [:]
            var events: [Event] = []
            for var e in log {
                switch e.body {
                case .productRegistered(let r): catalog[r.product] = (r.price, r.currency)
                case .paymentQueued(let t, let p, let q, _): queued[t] = (p, q)
                case .transactionPurchased(let t, let p, let u, let s, let d, var terms):
                    guard let product = p ?? queued[t]?.product, let paid = catalog[product] else { break }
                    storeID += 1
                    let store = s ?? String(storeID)
                    var price = Int64((Decimal(string: paid.price)! * 1000 as NSDecimalNumber).int64Value)
                    if i == liar && lie.isEmpty {
                        lie = t
                        terms.price = "0.99"
                        terms.currency = paid.currency
                        price = 9990
                    }
                    let payload = SigningChain.payload(
                        transaction: store, product: product, price: price, currency: paid.currency, quantity: queued[t]?.quantity ?? 1,
                        signedDate: e.at.nanosecondsSinceEpoch / 1_000_000)
                    terms.signedTransaction = try chain.sign(payload)
                    e.body = .transactionPurchased(transaction: t, product: p, user: u, storeTransactionId: store, downloads: d, terms: terms)
                default: break
                }
                events.append(e)
            }
            let path = dir.path("device-\(i).ledger")
            _ = try Ledger(path: path).append(contentsOf: events)
            return path
        }
        return (paths, lie)
    }

    static func key(_ line: RevenueLine) -> String { [line.product, line.currency, line.price].joined(separator: " ") }

    @Test func fleetRevenueVouchedByAppleIsTheSumOfTheDevicesAndTheLiarIsInvalidThere() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database()
        let chain = try SigningChain()
        let (paths, lie) = try Self.devices(12, liar: 5, chain: chain, in: dir)
        #expect(!lie.isEmpty)
        // The liar's ledger flags it and counts it as invalid: it books 0.99 as reported.
        let liar = try Ledger(path: paths[5])
        let verifier = AppleSignatureVerifier(roots: try chain.roots)
        let liarEvidence = try await liar.appleEvidence(verifier: verifier)
        #expect(liarEvidence[lie]?.evidence.reason?.contains("price is 0.99 in the event, 9.99 in its signed transaction") == true)
        try chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        let shipped = try cli(["ship"] + paths + ["--to", url, "--apple-root", dir.path("root.pem"), "--json"])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        // Every signed purchase of the twelve is Apple's but the liar's one.
        let evidence = try #require((try JSONSerialization.jsonObject(with: Data(shipped.stdout.utf8)) as? [String: Any])?["evidence"] as? [String: Int])
        #expect(evidence["invalid"] == 1 && evidence["xcode"] == 0 && (evidence["apple"] ?? 0) > 0, "\(evidence)")

        // The devices' Apple-vouched revenue, summed, against the fleet's.
        var expected: [String: RevenueLine] = [:]
        var all: [String: RevenueLine] = [:]
        for path in paths {
            let ledger = try Ledger(path: path)
            let chains = try await AppleChains.judged(in: ledger, verifier: verifier)
            for line in try ledger.revenue(apple: chains, onlyApple: true) {
                if expected[Self.key(line)] == nil { expected[Self.key(line)] = line } else { expected[Self.key(line)]!.add(line) }
            }
            for line in try ledger.revenue(apple: chains) {
                if all[Self.key(line)] == nil { all[Self.key(line)] = line } else { all[Self.key(line)]!.add(line) }
            }
        }
        let fleet = try await FleetStore.connect(url)
        let chains = try await fleet.appleChains(verifier: verifier)
        #expect(chains.chains == 1 && chains.trustedCount == 1)
        let vouched = try await fleet.revenue(apple: chains, onlyApple: true)
        let every = try await fleet.revenue(apple: chains)
        await fleet.close()
        #expect(Dictionary(uniqueKeysWithValues: vouched.map { (Self.key($0), $0) }) == expected)
        #expect(Dictionary(uniqueKeysWithValues: every.map { (Self.key($0), $0) }) == all)
        #expect(RevenueTotal.totals(of: vouched) == RevenueTotal.totals(of: Array(expected.values)))
        // The lie: 0.99 counted as revenue, never as Apple's; Apple's total is less than the revenue by it.
        let totals = RevenueTotal.totals(of: every)
        #expect(totals.contains { $0.appleNet < $0.net }, "\(totals)")
        let row = try server.psql(
            "SELECT level || ' ' || reason FROM transaction_evidence WHERE transaction_id = '\(lie)'", database: String(url.split(separator: "/").last!))
        #expect(row.hasPrefix("invalid the event states otherwise than its signed transaction: price is 0.99"), "\(row)")
        // The same through the command line, with the chain's root trusted.
        try chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        let report = try cli(["report", url, "--view", "revenue", "--format", "json", "--evidence", "apple", "--apple-root", dir.path("root.pem")])
        #expect(report.status == 0, "\(report.stderr)")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(report.stdout.utf8)) as? [String: Any])
        let reported = ((json["totals"] as? [[String: Any]]) ?? []).map { "\($0["currency"]!) \($0["net"]!)" }.sorted()
        #expect(reported == RevenueTotal.totals(of: Array(expected.values)).map { "\($0.currency) \($0.net)" }.sorted())
    }
}
