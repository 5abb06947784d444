import Foundation
import Testing
@testable import PurchaseLedger
import PurchaseLedgerFleetTesting

/// `forget postgres://... --user U` (contract 5.3): the user leaves every ledger's rows in a real
/// PostgreSQL (searched through `pg_dump`), reports still total, and a later ship of a device that
/// still holds the user does not bring it back.
@Suite(.serialized, .enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetErasureTests {
    @Test func forgetInTheFleetErasesEveryRowOfTheUserAndShipsKeepItOut() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let dir = try TemporaryDirectory()
        // Two devices: alice on both, bob on the second.
        let first = dir.path("phone.ledger"), second = dir.path("tablet.ledger")
        let phone = try Ledger(path: first)
        try phone.append(contentsOf: ErasureTests.catalog)
        try phone.append(contentsOf: ErasureTests.alice.events(at: 10))
        let tablet = try Ledger(path: second)
        try tablet.append(contentsOf: ErasureTests.catalog)
        try tablet.append(contentsOf: ErasureTests.bob.events(at: 100))
        let again = ErasureTests.Person(user: ErasureTests.alice.user, name: "alice.smith", email: "alice.smith@example.com", card: "4242", n: 11, key: "a2")
        try tablet.append(contentsOf: again.events(at: 200))
        #expect(try cli(["ship", first, second, "--to", url]).status == 0)
        let revenue = try cli(["report", url, "--view", "revenue", "--format", "csv"]).stdout
        let held = try server.dump(database)
        #expect(ErasureTests.alice.secrets.allSatisfy { held.contains($0) }, "alice is in the store before")

        // A role that may update the rows but does not own the tables cannot vacuum them: refused, nothing changed.
        let role = "eraser_" + database
        try server.psql(
            """
            CREATE ROLE \(role) LOGIN PASSWORD 'pw';
            GRANT SELECT, UPDATE ON ALL TABLES IN SCHEMA public TO \(role);
            GRANT INSERT ON erased_users TO \(role);
            """, database: database)
        let refused = try cli(["forget", server.url(database: database, password: "pw", user: role), "--user", ErasureTests.alice.user])
        #expect(refused.status == 3 && refused.stderr.contains("owns the fleet's tables"), "\(refused.stderr)")
        #expect(try server.dump(database).contains(ErasureTests.alice.user))

        let erased = try cli(["forget", url, "--user", ErasureTests.alice.user, "--json"])
        #expect(erased.status == 0, "\(erased.stderr)")
        #expect(!erased.stdout.contains(ErasureTests.alice.user) && !erased.stderr.contains(ErasureTests.alice.user))
        let summary = try #require(try JSONSerialization.jsonObject(with: Data(erased.stdout.utf8)) as? [String: Any])
        #expect(summary["ledgers"] as? Int == 2, "\(summary)")

        func survivors() throws -> [String] {
            let dump = try server.dump(database)
            return ErasureTests.alice.secrets.filter { dump.contains($0) }
        }
        let afterForget = try survivors()
        #expect(afterForget.isEmpty, "in pg_dump after forget: \(afterForget)")
        let dump = try server.dump(database)
        #expect(ErasureTests.bob.secrets.allSatisfy { dump.contains($0) }, "bob is intact")
        #expect(try cli(["report", url, "--view", "revenue", "--format", "csv"]).stdout == revenue, "the totals stay")
        #expect(try cli(["report", url, "--format", "csv"]).stdout.contains("[erased "))

        // The devices still hold alice; new events on her transactions ship her rows again: with markers.
        try phone.append(Event(at: E.at(900), .transactionFinished(transaction: "t-a-4", discardContent: false)))
        try tablet.append(Event(at: E.at(900), .transactionFinished(transaction: "t-a2-4", discardContent: false)))
        #expect(try cli(["ship", first, second, "--to", url]).status == 0)
        let afterShip = try survivors()
        #expect(afterShip.isEmpty, "brought back by a ship: \(afterShip)")
        let markedUsers = try server.psql("SELECT user_id, count(*) FROM transactions GROUP BY 1 ORDER BY 1", database: database)
        #expect(markedUsers.split(separator: "\n").contains { $0.hasPrefix("[erased ") && $0.hasSuffix("|4") }, "\(markedUsers)")

        // A device of hers never shipped before ships later: her values still do not come back.
        let laptop = dir.path("laptop.ledger")
        let newDevice = try Ledger(path: laptop)
        try newDevice.append(contentsOf: ErasureTests.catalog)
        let third = ErasureTests.Person(user: ErasureTests.alice.user, name: "alice.smith", email: "alice.smith@example.com", card: "4242", n: 11, key: "a3")
        try newDevice.append(contentsOf: third.events(at: 300))
        #expect(try cli(["ship", laptop, "--to", url]).status == 0)
        let afterNewDevice = try survivors()
        #expect(afterNewDevice.isEmpty, "brought back by a device shipped after the erasure: \(afterNewDevice)")
        #expect(try server.dump(database).contains("bob.jones@example.org"), "others' values still ship")

        // Asked again: the store holds no transaction of hers.
        #expect(try cli(["forget", url, "--user", ErasureTests.alice.user]).status == 2)
        // Erased rows keep which values were set and who shares a user: they still equal a replay.
        let audit = try cli(["verify", url])
        #expect(audit.status == 0 && audit.stdout.contains("3 ledgers' rows equal a replay"), "\(audit.stdout)")
    }
}
