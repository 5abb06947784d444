import Foundation
import PostgresNIO
import PurchaseLedgerTesting
import Testing

@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// Apple's record in a fleet store (#51): `apple-import` into PostgreSQL by the ledger's rules,
/// and the divergence report joined across all of a user's devices. Documents are signed at test
/// time by a chain with Apple's marker OIDs (ReconciliationTests' helpers).
@Suite(.serialized, .enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetReconciliationTests {
    let docs: ReconciliationTests

    init() throws { docs = try ReconciliationTests() }

    var verifier: AppleSignatureVerifier { get throws { AppleSignatureVerifier(roots: try docs.chain.roots) } }

    func placed(_ documents: [String]) throws -> [PlacedAppleDocument] {
        var placed: [PlacedAppleDocument] = []
        for (i, text) in documents.enumerated() { placed += try AppleDocument.parse(Array(text.utf8), file: "doc\(i).json") }
        return placed
    }

    /// A row as both sides print it, without what differs by design: the fleet's record numbers.
    static func shown(_ d: Divergence) -> String {
        [
            d.kind.rawValue, d.transaction ?? "-", d.appleTransaction ?? "-", d.user ?? "-", d.product ?? "-", d.device, d.apple,
            d.deviceSeq.map(String.init) ?? "-", d.notification ?? "-", d.history ?? "-",
        ].joined(separator: " | ")
    }

    /// How many rows Apple's three tables hold: transactions, notifications, histories.
    func counts(_ fleet: FleetStore) async throws -> [Int] {
        var counts: [Int] = []
        for table in ["apple_transactions", "apple_notifications", "apple_histories"] {
            let rows = try await fleet.fetchRows(PostgresQuery(unsafeSQL: "SELECT count(*) AS n FROM \(table)"))
            counts.append(Int(rows.first?["n"]?.int64 ?? -1))
        }
        return counts
    }

    /// Every kind, from one device: the fleet's rows are the ledger's own, row for row.
    @Test func eachKindInTheFleetIsTheLedgersOwn() async throws {
        let d = docs
        let device = [
            d.purchase("t1", store: "1001"),
            d.purchase("t2", store: "1002", extra: #","ownership":"familyShared""#),
            d.purchase("t3", store: "1003", price: "0.99"),
            d.purchase("t4", store: "1004", extra: #","environment":"sandbox""#),
            d.purchase("t5", store: "1005"),
            d.purchase("t6", store: "1006", product: "gems", price: "0.99"),
            #"{"type":"transactionFinished","at":"2026-05-28T20:06:00Z","transaction":"t6"}"#,
            d.purchase("t7", store: "1007"),
        ].joined(separator: "\n")
        let ledger = try d.ledger(device)
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        let shipped = try await fleet.ship(ledger)
        let apple = [
            d.history(
                [
                    try d.signed("1001"), try d.signed("1003"), try d.signed("1004"), try d.signed("1005", ownership: "FAMILY_SHARED"),
                    try d.signed("1006", product: "gems", price: 990, type: "Consumable"), try d.signed("1008"),
                ], revision: "rev-9"),
            try d.notification("REFUND", uuid: "n-1", transaction: try d.signed("1001", revoked: true, signedDate: ReconciliationTests.at + 1000)),
            try d.notification("REVOKE", uuid: "n-2", transaction: try d.signed("1002", ownership: "FAMILY_SHARED", revoked: true)),
        ]
        let inLedger = try await ledger.importApple(try placed(apple), verifier: try verifier)
        let inFleet = try await fleet.importApple(try placed(apple), verifier: try verifier, user: "u1")
        #expect(inFleet.transactions == 6 && inFleet.notifications == 2 && inFleet.histories == 1 && inFleet.alreadyHeld == 0 && inFleet.firstSeq == nil)
        #expect(inLedger.transactions == 6 && inLedger.notifications == 2 && inLedger.histories == 1)
        let ledgerRows = try await ledger.divergences(verifier: try verifier)
        let fleetRows = try await fleet.divergences()
        #expect(
            ledgerRows.map { "\($0.kind.rawValue) \($0.transaction ?? "-")" } == [
                "refundNotSeen t1", "familyRevokeNotSeen t2", "chargedNotRecorded -", "recordedNotCharged t7", "priceDiffers t3",
                "ownershipDiffers t5", "environmentDiffers t4", "unfinishedAtApple t6",
            ])
        #expect(fleetRows.map(Self.shown) == ledgerRows.map(Self.shown))
        // Compared in parts (by a hash of Apple's id), the rows are the same.
        #expect(try await fleet.divergences(partSize: 2).map(Self.shown) == ledgerRows.map(Self.shown))
        // Each fleet row names its device ledger and Apple's record.
        #expect(fleetRows.allSatisfy { $0.transaction == nil ? $0.ledger == nil : $0.ledger == shipped.ledgerID }, "\(fleetRows)")
        #expect(fleetRows.filter { $0.kind != .recordedNotCharged }.allSatisfy { $0.appleSeq != nil })
        await fleet.close()
    }

    /// A purchase recorded on the user's iPad is not missing from the iPhone's ledger.
    @Test func aPurchaseOnAnotherDeviceOfTheUserIsNoDivergence() async throws {
        let d = docs
        let iphone = try d.ledger(d.purchase("t1", store: "1001"), name: "iphone.ledger")
        let ipad = try d.ledger(d.purchase("t9", store: "1002"), name: "ipad.ledger")
        let history = d.history([try d.signed("1001"), try d.signed("1002")])
        // Alone, the iPhone's ledger cannot know the iPad's purchase.
        try await iphone.importApple(try placed([history]), verifier: try verifier)
        #expect(try await iphone.divergences(verifier: try verifier).map(\.kind) == [.chargedNotRecorded])
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        _ = try await fleet.ship(iphone)
        _ = try await fleet.ship(ipad)
        try await fleet.importApple(try placed([history]), verifier: try verifier, user: "u1")
        #expect(try await fleet.divergences().isEmpty)
        // A charge no device of the user recorded is one row.
        try await fleet.importApple(try placed([d.info(try d.signed("1003"))]), verifier: try verifier, user: "u1")
        #expect(
            try await fleet.divergences().map(Self.shown) == [
                "chargedNotRecorded | - | 1003 | u1 | book | no transaction | purchased for 4.99 USD 2026-05-28T20:10:00.000Z | - | - | -"
            ])
        await fleet.close()
    }

    @Test func theSameNotificationTwiceIsStoredOnceAndABadSignatureWritesNothing() async throws {
        let d = docs
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        _ = try await fleet.ship(try d.ledger(d.purchase()))
        let body = try d.notification("REFUND", uuid: "n-7", transaction: try d.signed("1001", revoked: true))
        let first = try await fleet.importApple(try placed([body]), verifier: try verifier)
        let again = try await fleet.importApple(try placed([body, d.info(try d.signed("1001", revoked: true))]), verifier: try verifier)
        #expect(first.notifications == 1 && again.notifications == 0 && again.transactions == 0 && again.alreadyHeld == 2)
        #expect(try await counts(fleet) == [1, 1, 0])
        #expect(try await fleet.divergences().map(\.kind) == [.refundNotSeen])
        // A notification signed by another chain: refused, naming the file and line; nothing written.
        let stranger = try SigningChain()
        let foreign =
            #"{"signedPayload":""#
            + (try stranger.sign(["notificationType": "REFUND", "notificationUUID": "n-8", "signedDate": ReconciliationTests.at])) + #""}"#
        await #expect {
            try await fleet.importApple(try placed([d.info(try d.signed("1009")), foreign]), verifier: try verifier)
        } throws: { error in
            "\(error)".hasPrefix("doc1.json:1: signedPayload: not verified as Apple's: ")
        }
        #expect(try await counts(fleet) == [1, 1, 0])
        // A complete history of nobody the fleet knows needs its user.
        await #expect {
            try await fleet.importApple(try placed([d.history([try d.signed("5555")])]), verifier: try verifier)
        } throws: { error in
            "\(error)" == "doc0.json: history pages in a fleet store are the customer's named for them: give its user (--user)"
        }
        #expect(try await counts(fleet) == [1, 1, 0])
        // Erasing the user deletes Apple's records of the user too.
        let erased = try await fleet.forget(user: "u1")
        #expect(erased.appleRecords == 2)
        #expect(try await counts(fleet) == [0, 0, 0])
        await fleet.close()
    }

    /// The commands: apple-import into a fleet URL, and the fleet's divergence report naming each row's device.
    @Test func theCommandsImportIntoAFleetAndReportItsDivergences() throws {
        let d = docs
        let (server, url) = try FleetServer.database()
        _ = try d.ledger(d.purchase("t1", store: "1001", price: "0.99"))
        #expect(try cli(["ship", d.dir.path("user.ledger"), "--to", url]).status == 0)
        try d.chain.rootPEM.write(toFile: d.dir.path("root.pem"), atomically: true, encoding: .utf8)
        try d.info(try d.signed("1001")).write(toFile: d.dir.path("info.json"), atomically: true, encoding: .utf8)
        let refused = try cli(["apple-import", url, d.dir.path("info.json")])
        #expect(refused.status == 2 && refused.stderr.contains("info.json:1: signedTransactionInfo: not verified as Apple's"), "\(refused.stderr)")
        let imported = try cli(["apple-import", url, d.dir.path("info.json"), "--apple-root", d.dir.path("root.pem")])
        #expect(imported.status == 0 && imported.stdout == "stored 1 Apple transaction, 0 notifications\n", "\(imported.stdout)\(imported.stderr)")
        let id = try #require(try Ledger(path: d.dir.path("user.ledger")).identity()?.id)
        let table = try cli(["report", url, "--view", "divergence"])
        #expect(table.status == 0 && table.stdout.contains("priceDiffers") && table.stdout.contains(id) && table.stdout.contains("0.99 USD"), "\(table.stdout)")
        let json = try cli(["report", url, "--view", "divergence", "--format", "json"])
        let rows = try #require((try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["rows"] as? [[String: Any]])
        #expect(rows.count == 1 && rows.first?["ledger"] as? String == id && rows.first?["kind"] as? String == "priceDiffers", "\(rows)")

        // The fleet audit checks every record of Apple's again: its JWS is Apple's, its columns what it states.
        let audited = try cli(["verify", url, "--apple-root", d.dir.path("root.pem")])
        #expect(audited.status == 0 && audited.stdout.contains("1 of Apple's records verify as Apple's and state what their columns say"), "\(audited.stdout)")
        let database = String(url.split(separator: "/").last!)
        try server.psql("UPDATE apple_transactions SET price = 990", database: database)
        let altered = try cli(["verify", url, "--apple-root", d.dir.path("root.pem")])
        #expect(altered.status != 0 && altered.stdout.contains("(transaction 1001): its columns are not what its JWS states: altered in the store"), "\(altered.stdout)")
        // A chain's header row replaced (the shipping role may write them) is named as such.
        try server.psql("UPDATE apple_transactions SET price = 4990", database: database)
        let header = try server.psql("SELECT header FROM signing_headers", database: database).trimmingCharacters(in: .whitespacesAndNewlines)
        try server.psql("UPDATE signing_headers SET header = 'eyJhbGciOiJFUzI1NiJ9'", database: database)
        let spoiled = try cli(["verify", url, "--apple-root", d.dir.path("root.pem")])
        #expect(spoiled.status != 0 && spoiled.stdout.contains("does not hold the header its digest names"), "\(spoiled.stdout)")
        try server.psql("UPDATE signing_headers SET header = '\(header)'", database: database)
        // Without the root it was signed with, it is not Apple's.
        let untrusted = try cli(["verify", url])
        #expect(untrusted.status != 0 && untrusted.stdout.contains("(transaction 1001): not verified as Apple's: "), "\(untrusted.stdout)")
    }

    /// A device that claims another user's Apple transaction id hides nothing and takes nothing:
    /// the record stays its user's, the claim is a row of its own, and a history is credited to
    /// the user named for it.
    @Test func aStoreIDClaimedByAnotherUsersDeviceIsNamedAndHidesNothing() async throws {
        let d = docs
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        _ = try await fleet.ship(try d.ledger(d.purchase("t1", store: "1001"), name: "u1.ledger"))
        let evil =
            #"{"type":"paymentQueued","at":"2026-05-28T20:05:00Z","transaction":"x1","product":"book","user":"0evil"}"#
            + "\n" + #"{"type":"transactionPurchased","at":"2026-05-28T20:05:01Z","transaction":"x1","storeTransactionId":"1003","price":"4.99","currency":"USD"}"#
            + "\n" + #"{"type":"paymentQueued","at":"2026-05-28T20:05:00Z","transaction":"x2","product":"book","user":"0evil"}"#
            + "\n" + #"{"type":"transactionPurchased","at":"2026-05-28T20:05:01Z","transaction":"x2","storeTransactionId":"1001","price":"4.99","currency":"USD"}"#
            // A user id that looks like an erased one claims nothing more.
            + "\n" + #"{"type":"paymentQueued","at":"2026-05-28T20:05:00Z","transaction":"x3","product":"book","user":"[erased 1]"}"#
            + "\n" + #"{"type":"transactionPurchased","at":"2026-05-28T20:05:01Z","transaction":"x3","storeTransactionId":"1002","price":"4.99","currency":"USD"}"#
        _ = try await fleet.ship(try d.ledger(evil, name: "evil.ledger"))
        // Apple's notification of 1003 comes first: only 0evil's device names it, so it is credited there...
        try await fleet.importApple(try placed([try d.notification("ONE_TIME_CHARGE", uuid: "n-3", transaction: try d.signed("1003"))]), verifier: try verifier)
        // Claimed by devices of two users: the history is the one named for it.
        let history = d.history([try d.signed("1001"), try d.signed("1002"), try d.signed("1003")])
        await #expect {
            try await fleet.importApple(try placed([history]), verifier: try verifier)
        } throws: { error in
            "\(error)".hasSuffix("history pages in a fleet store are the customer's named for them: give its user (--user)")
        }
        try await fleet.importApple(try placed([history]), verifier: try verifier, user: "u1")
        let rows = try await fleet.divergences().map { "\($0.kind.rawValue) \($0.transaction ?? "-") \($0.appleTransaction ?? "-") \($0.user ?? "-")" }
        // ...until the history named u1's says whose it is.
        let expected = [
            "chargedNotRecorded - 1002 u1", "chargedNotRecorded - 1003 u1", "claimedByAnotherUser x1 1003 0evil", "claimedByAnotherUser x2 1001 0evil",
            "claimedByAnotherUser x3 1002 [erased 1]",
        ]
        #expect(rows == expected, "\(rows)")
        // A later statement of 1002 stays u1's, whichever device names it.
        try await fleet.importApple(
            try placed([try d.notification("ONE_TIME_CHARGE", uuid: "n-4", transaction: try d.signed("1002", signedDate: ReconciliationTests.at + 9))]),
            verifier: try verifier)
        #expect(try await fleet.divergences().map { "\($0.kind.rawValue) \($0.transaction ?? "-") \($0.appleTransaction ?? "-") \($0.user ?? "-")" } == expected)
        // Erasing the claimant erases none of u1's records.
        let before = try await counts(fleet)
        #expect(try await fleet.forget(user: "0evil").appleRecords == 0)
        #expect(try await counts(fleet) == before)
        await fleet.close()
    }

    /// Apple's notification of a charge no device recorded comes before the user's history: the
    /// history credits it to the user, so it is reported; erasing the user deletes it.
    @Test func aRecordOfNoUserYetIsCreditedLaterAndErasedWithTheUser() async throws {
        let d = docs
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        let refund = try d.notification("REFUND", uuid: "n-5", transaction: try d.signed("1005", revoked: true))
        try await fleet.importApple(try placed([refund]), verifier: try verifier)
        let charge = try d.notification("ONE_TIME_CHARGE", uuid: "n-6", transaction: try d.signed("1002"))
        #expect(try await fleet.importApple(try placed([charge]), verifier: try verifier).notifications == 1)
        _ = try await fleet.ship(try d.ledger(d.purchase("t1", store: "1001") + "\n" + d.purchase("t5", store: "1005")))
        // No user yet: compared with nothing but the refund's device.
        #expect(try await fleet.divergences().map(\.kind) == [.refundNotSeen])
        let summary = try await fleet.importApple(
            try placed([d.history([try d.signed("1001"), try d.signed("1002")])]), verifier: try verifier, user: "u1")
        #expect(summary.histories == 1 && summary.alreadyHeld == 1, "\(summary)")
        #expect(
            try await fleet.divergences().map { "\($0.kind.rawValue) \($0.appleTransaction ?? "-") \($0.user ?? "-")" } == [
                "refundNotSeen 1005 u1", "chargedNotRecorded 1002 u1",
            ])
        let erased = try await fleet.forget(user: "u1")
        #expect(erased.appleRecords == 6, "\(erased)")
        #expect(try await counts(fleet) == [0, 0, 0])
        await fleet.close()
    }

    /// What is signed without Apple's transaction id cannot be kept by it: refused, nothing written.
    @Test func aSignedTransactionWithoutItsIDIsRefused() async throws {
        let d = docs
        let (_, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        var payload = SigningChain.payload(transaction: "1", product: "book", price: 4990, currency: "USD", signedDate: ReconciliationTests.at)
        payload.removeValue(forKey: "transactionId")
        await #expect {
            try await fleet.importApple(try placed([d.info(try d.signed("1001")), d.info(try d.chain.sign(payload))]), verifier: try verifier)
        } throws: { error in
            "\(error)" == "doc1.json:1: signedTransactionInfo: the signed transaction has no transactionId"
        }
        #expect(try await counts(fleet) == [0, 0, 0])
        await fleet.close()
    }

    /// A user the store knows only from Apple's record is erased as any other: remembered, so a
    /// device of theirs shipped later comes in masked.
    @Test func forgettingAUserKnownOnlyFromApplesRecordIsRemembered() async throws {
        let d = docs
        let (server, url) = try FleetServer.database()
        let fleet = try await FleetStore.connect(url)
        try await fleet.importApple(try placed([d.info(try d.signed("1009"))]), verifier: try verifier, user: "u1")
        let erased = try await fleet.forget(user: "u1")
        #expect(erased.ledgers == 0 && erased.appleRecords == 1, "\(erased)")
        _ = try await fleet.ship(try d.ledger(d.purchase("t1", store: "1009")))
        await fleet.close()
        let database = String(url.split(separator: "/").last!)
        #expect(try server.psql("SELECT count(*) FROM transactions WHERE user_id = 'u1'", database: database).trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }
}
