import Foundation
import GRDB
import PurchaseLedgerTesting
import Testing

@testable import PurchaseLedger

/// Apple's record kept in a ledger and compared with the device's (#51): each divergence kind
/// from a device ledger and Apple documents signed at test time by a chain with the marker OIDs.
@Suite struct ReconciliationTests {
    static let at: Int64 = 1_780_000_000_000  // 2026-05-28T20:26:40Z, Apple's signedDate
    static let catalog = """
        {"type":"productRegistered","at":"2026-05-28T20:00:00Z","product":"book","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":false}
        {"type":"productRegistered","at":"2026-05-28T20:00:00Z","product":"gems","kind":"consumable","price":"0.99","currency":"USD","downloadable":false}
        """

    let chain: SigningChain
    let dir: TemporaryDirectory

    init() throws {
        chain = try SigningChain()
        dir = try TemporaryDirectory()
    }

    /// A ledger of the catalog and `lines` (JSON Lines of device events).
    func ledger(_ lines: String, name: String = "user.ledger") throws -> Ledger {
        let input = dir.path(name + ".jsonl")
        try (Self.catalog + "\n" + lines).write(toFile: input, atomically: true, encoding: .utf8)
        let ledger = try Ledger(path: dir.path(name), configuration: testConfiguration(blockSize: 4, snapshotInterval: 4))
        try ledger.importJSONLines(from: try JSONLinesReader(path: input))
        return ledger
    }

    /// u1 bought the book (Apple's 1001) for `price`, as `extra` says.
    func purchase(_ t: String = "t1", store: String = "1001", product: String = "book", price: String = "4.99", extra: String = "") -> String {
        """
        {"type":"paymentQueued","at":"2026-05-28T20:05:00Z","transaction":"\(t)","product":"\(product)","user":"u1"}
        {"type":"transactionPurchased","at":"2026-05-28T20:05:01Z","transaction":"\(t)","storeTransactionId":"\(store)","price":"\(price)","currency":"USD"\(extra)}
        """
    }

    func signed(
        _ id: String, product: String = "book", price: Int64 = 4990, type: String = "Non-Consumable", ownership: String = "PURCHASED",
        environment: String = "Production", revoked: Bool = false, signedDate: Int64 = at
    ) throws -> String {
        var p = SigningChain.payload(
            transaction: id, product: product, price: price, currency: "USD", environment: environment, ownership: ownership, signedDate: signedDate,
            revocationDate: revoked ? signedDate - 500 : nil)
        p["type"] = type
        p["purchaseDate"] = Self.at - 1_000_000  // 2026-05-28T20:10:00Z
        return try chain.sign(p)
    }

    func notification(_ type: String, uuid: String, transaction jws: String) throws -> String {
        let payload: [String: any Sendable] = [
            "notificationType": type, "notificationUUID": uuid, "version": "2.0", "signedDate": Self.at,
            "data": ["bundleId": "com.example.app", "environment": "Production", "signedTransactionInfo": jws] as [String: any Sendable],
        ]
        return #"{"signedPayload":""# + (try chain.sign(payload)) + #""}"#
    }

    func history(_ jws: [String], revision: String = "rev-1", hasMore: Bool = false) -> String {
        #"{"revision":""# + revision + #"","hasMore":\#(hasMore),"bundleId":"com.example.app","environment":"Production","signedTransactions":["#
            + jws.map { "\"\($0)\"" }.joined(separator: ",") + "]}"
    }

    func info(_ jws: String) -> String { #"{"signedTransactionInfo":""# + jws + #""}"# }

    @discardableResult
    func importApple(_ ledger: Ledger, _ documents: String...) async throws -> AppleImportSummary {
        var placed: [PlacedAppleDocument] = []
        for (i, text) in documents.enumerated() {
            placed += try AppleDocument.parse(Array(text.utf8), file: "doc\(i).json")
        }
        return try await ledger.importApple(placed, verifier: AppleSignatureVerifier(roots: try chain.roots))
    }

    func rows(_ ledger: Ledger) async throws -> [Divergence] { try await ledger.divergences(verifier: AppleSignatureVerifier(roots: try chain.roots)) }

    func kinds(_ ledger: Ledger) async throws -> [String] {
        try await rows(ledger).map { "\($0.kind.rawValue) \($0.transaction ?? "-") \($0.appleTransaction ?? "-")" }
    }

    @Test func aRefundTheDeviceNeverSawIsRefundNotSeen() async throws {
        let ledger = try ledger(purchase())
        try await importApple(ledger, info(try signed("1001", revoked: true)))
        #expect(try await kinds(ledger) == ["refundNotSeen t1 1001"])
        let row = try #require(try await rows(ledger).first)
        #expect(row.device == "purchased, not revoked" && row.apple.hasPrefix("refunded 2026-05-28T20:26:39.500Z") && row.user == "u1" && row.deviceSeq == 4)
        // Once the device records the revocation, they agree.
        try ledger.append(Event(at: try Timestamp.parse("2026-05-29T00:00:00Z"), .transactionRevoked(transaction: "t1", reason: "refund")))
        #expect(try await kinds(ledger).isEmpty)
    }

    @Test func aFamilyRevocationTheDeviceNeverSawIsFamilyRevokeNotSeen() async throws {
        let ledger = try ledger(purchase(extra: #","ownership":"familyShared""#))
        let summary = try await importApple(
            ledger, try notification("REVOKE", uuid: "n-1", transaction: try signed("1001", ownership: "FAMILY_SHARED", revoked: true)))
        #expect(summary.notifications == 1 && summary.transactions == 0)
        #expect(try await kinds(ledger) == ["familyRevokeNotSeen t1 1001"])
        #expect(try await rows(ledger).first?.notification == "n-1")
    }

    @Test func anAppleChargeTheDeviceNeverRecordedIsChargedNotRecorded() async throws {
        let ledger = try ledger(purchase())
        try await importApple(ledger, history([try signed("1001"), try signed("1002", product: "gems", price: 990, type: "Consumable")]))
        #expect(try await kinds(ledger) == ["chargedNotRecorded - 1002"])
    }

    @Test func aDevicePurchaseAbsentFromACompleteHistoryIsRecordedNotCharged() async throws {
        let ledger = try ledger(purchase() + "\n" + purchase("t2", store: "1002"))
        // An incomplete history (more pages to come) proves nothing missing.
        try await importApple(ledger, history([try signed("1001")], revision: "rev-1", hasMore: true))
        #expect(try await kinds(ledger).isEmpty)
        try await importApple(ledger, history([try signed("1001")], revision: "rev-2"))
        #expect(try await kinds(ledger) == ["recordedNotCharged t2 1002"])
        let row = try #require(try await rows(ledger).first)
        #expect(row.history == "rev-2" && row.apple == "absent from the complete history rev-2" && row.user == "u1")
    }

    @Test func aPriceOtherThanApplesIsPriceDiffers() async throws {
        let ledger = try ledger(purchase(price: "0.99"))
        try await importApple(ledger, info(try signed("1001")))
        let rows = try await rows(ledger)
        #expect(rows.map(\.kind) == [.priceDiffers] && rows.first?.device == "0.99 USD" && rows.first?.apple == "4.99 USD")
    }

    @Test func anOwnershipOtherThanApplesIsOwnershipDiffers() async throws {
        let ledger = try ledger(purchase())
        try await importApple(ledger, info(try signed("1001", ownership: "FAMILY_SHARED")))
        #expect(try await kinds(ledger) == ["ownershipDiffers t1 1001"])
    }

    @Test func anEnvironmentOtherThanApplesIsEnvironmentDiffers() async throws {
        let ledger = try ledger(purchase(extra: #","environment":"sandbox""#))
        try await importApple(ledger, info(try signed("1001")))
        #expect(try await kinds(ledger) == ["environmentDiffers t1 1001"])
    }

    @Test func aFinishedConsumableAppleStillListsIsUnfinishedAtApple() async throws {
        let ledger = try ledger(
            purchase(product: "gems", price: "0.99") + "\n" + #"{"type":"transactionFinished","at":"2026-05-28T20:06:00Z","transaction":"t1"}"#)
        try await importApple(ledger, history([try signed("1001", product: "gems", price: 990, type: "Consumable")], hasMore: true))
        #expect(try await kinds(ledger) == ["unfinishedAtApple t1 1001"])
    }

    @Test func theSameNotificationOrStatementTwiceIsStoredOnce() async throws {
        let ledger = try ledger(purchase())
        let body = try notification("REFUND", uuid: "n-7", transaction: try signed("1001", revoked: true))
        let statement = info(try signed("1001"))
        let first = try await importApple(ledger, body, statement)
        #expect(first.notifications == 1 && first.transactions == 1)
        let last = try ledger.lastSeq()
        // The same notification again, and the same statement.
        let again = try await importApple(ledger, body, statement)
        #expect(again.notifications == 0 && again.transactions == 0 && again.alreadyHeld == 2 && again.firstSeq == nil)
        #expect(try ledger.lastSeq() == last)
        #expect(try await kinds(ledger) == ["refundNotSeen t1 1001"])
        // The records are events of the chain: they verify, export and import exactly.
        #expect(try ledger.verify(all: true).isValid)
        let exported = try cli(["export", dir.path("user.ledger")])
        try exported.stdout.write(toFile: dir.path("copy.jsonl"), atomically: true, encoding: .utf8)
        #expect(try cli(["import", dir.path("copy.ledger"), dir.path("copy.jsonl")]).status == 0)
        #expect(try cli(["export", dir.path("copy.ledger")]).stdout == exported.stdout)
        #expect(try await rows(Ledger(path: dir.path("copy.ledger"))).map(\.kind) == [.refundNotSeen])
    }

    @Test func whatIsNotApplesIsRefusedNamingTheFileAndLineAndNothingIsWritten() async throws {
        let ledger = try ledger(purchase())
        let last = try ledger.lastSeq()
        let good = try signed("1001")
        // A payload byte changed: the signature no longer verifies.
        var parts = good.split(separator: ".").map(String.init)
        var payload = Base64URL.decode(Substring(parts[1]))!
        let price = Array(#""price":4990"#.utf8)
        let at = payload.firstRange(of: price)!.lowerBound
        payload[at + 8] = UInt8(ascii: "1")
        parts[1] = Base64URL.encode(payload)
        let tampered = parts.joined(separator: ".")
        await #expect {
            try await importApple(ledger, info(good) + "\n" + info(tampered))
        } throws: { error in
            "\(error)" == "doc0.json:2: signedTransactionInfo: not verified as Apple's: the signature does not verify with the leaf certificate's key"
        }
        // A notification whose own signature is another chain's.
        let stranger = try SigningChain()
        let foreign = #"{"signedPayload":""# + (try stranger.sign(["notificationType": "REFUND", "notificationUUID": "n-9", "signedDate": Self.at])) + #""}"#
        await #expect {
            try await importApple(ledger, foreign)
        } throws: { error in
            "\(error)".hasPrefix("doc0.json:1: signedPayload: not verified as Apple's: ")
        }
        // Xcode's signature is not Apple's.
        await #expect {
            try await importApple(ledger, info(try signed("1001", environment: "Xcode")))
        } throws: { error in
            "\(error)" == "doc0.json:1: signedTransactionInfo: environment Xcode: signed by Xcode, not by Apple"
        }
        #expect(throws: AppleImportError.self) { try AppleDocument.parse(Array(#"{"hasMore":false}"#.utf8), file: "x.json") }
        #expect(try ledger.lastSeq() == last)
    }

    @Test func theCommandsImportAndReportTheDivergences() throws {
        _ = try ledger(purchase() + "\n" + purchase("t2", store: "1002", price: "0.99"))
        let path = dir.path("user.ledger")
        try chain.rootPEM.write(toFile: dir.path("root.pem"), atomically: true, encoding: .utf8)
        try history([try signed("1001", revoked: true), try signed("1002"), try signed("1003")]).write(
            toFile: dir.path("page.json"), atomically: true, encoding: .utf8)
        let refused = try cli(["apple-import", path, dir.path("page.json")])
        #expect(refused.status != 0 && refused.stderr.contains("page.json:1: signedTransactions[0]: not verified as Apple's"), "\(refused.stderr)")
        let imported = try cli(["apple-import", path, dir.path("page.json"), "--apple-root", dir.path("root.pem")])
        #expect(imported.status == 0 && imported.stdout.contains("stored 3 Apple transactions, 0 notifications, 1 complete history"), "\(imported.stdout)")
        let again = try cli(["apple-import", path, dir.path("page.json"), "--apple-root", dir.path("root.pem"), "--json"])
        #expect(again.stdout.contains(#""transactions":0"#) && again.stdout.contains(#""alreadyHeld":4,"firstSeq":null,"lastSeq":10"#), "\(again.stdout)")
        let table = try cli(["report", path, "--view", "divergence", "--apple-root", dir.path("root.pem")])
        #expect(table.status == 0, "\(table.stderr)")
        // docs/reconciling.md prints this very table.
        let docs = try String(contentsOf: packageRoot.appending(path: "docs/reconciling.md"), encoding: .utf8)
        let example = try #require(docs.components(separatedBy: "A small example").last?.components(separatedBy: "```\n").dropFirst().first)
        #expect(table.stdout == String(example.prefix { $0 != "`" }), "\(table.stdout)")
        let csv = try cli(["report", path, "--view", "divergence", "--apple-root", dir.path("root.pem"), "--format", "csv"])
        #expect(csv.stdout.split(separator: "\n").count == 4, "\(csv.stdout)")
        let json = try cli(["report", path, "--view", "divergence", "--apple-root", dir.path("root.pem"), "--format", "json"])
        let rows = try #require((try JSONSerialization.jsonObject(with: Data(json.stdout.utf8)) as? [String: Any])?["rows"] as? [[String: Any]])
        #expect(rows.map { $0["kind"] as? String } == ["refundNotSeen", "chargedNotRecorded", "priceDiffers"], "\(rows)")
        let html = try cli(["report", path, "--view", "divergence", "--apple-root", dir.path("root.pem"), "--format", "html"])
        #expect(html.status == 0 && html.stdout.contains("refundNotSeen"))
        #expect(try cli(["verify", path]).status == 0)
    }

    /// A record of Apple's written without apple-import (an append of a JWS another chain signed)
    /// compares nothing and is reported; a refund Apple reversed is a new statement, and the latest one counts.
    @Test func onlyApplesVerifiedLatestStatementCounts() async throws {
        let ledger = try ledger(purchase())
        let stranger = try SigningChain()
        var p = SigningChain.payload(transaction: "7777", product: "book", price: 4990, currency: "USD", signedDate: Self.at)
        p["purchaseDate"] = Self.at - 1_000_000
        let forged = try stranger.sign(p)
        let line = #"{"type":"appleTransactionReceived","at":"2026-05-29T00:00:00Z","signedTransaction":""# + forged + #"","source":"transactionInfo"}"#
        #expect(try cli(["append", dir.path("user.ledger")], stdin: line).status == 0)
        // Compared with nothing, and said: no chargedNotRecorded for 7777.
        let forgedRows = try await rows(ledger)
        #expect(forgedRows.map(\.kind) == [.appleRecordUnverified] && forgedRows.first?.appleSeq == 5, "\(forgedRows)")
        #expect(forgedRows.first?.apple.hasPrefix("its signature does not verify: ") == true, "\(forgedRows)")
        try await importApple(ledger, info(try signed("1001")))
        try await importApple(ledger, info(try signed("1001", revoked: true, signedDate: Self.at + 1000)))
        #expect(try await kinds(ledger) == ["refundNotSeen t1 1001", "appleRecordUnverified - 7777"])
        // Apple reverses the refund: the purchase's facts again, signed later.
        let reversed = try await importApple(ledger, info(try signed("1001", signedDate: Self.at + 2000)))
        #expect(reversed.transactions == 1)
        #expect(try await kinds(ledger) == ["appleRecordUnverified - 7777"])
    }

    /// A ledger bound to its app takes a notification only when it names that app.
    @Test func aBoundLedgerRefusesANotificationThatNamesNoApp() async throws {
        _ = try ledger(purchase())
        var configuration = testConfiguration()
        configuration.appleBundleID = "com.example.app"
        let bound = try Ledger(path: dir.path("user.ledger"), configuration: configuration)
        let last = try bound.lastSeq()
        let payload: [String: any Sendable] = ["notificationType": "REFUND", "notificationUUID": "n-3", "signedDate": Self.at, "data": [:] as [String: any Sendable]]
        let anonymous = #"{"signedPayload":""# + (try chain.sign(payload)) + #""}"#
        await #expect {
            try await importApple(bound, anonymous)
        } throws: { error in
            "\(error)" == "doc0.json:1: signedPayload: a notification for the app (none named), not com.example.app"
        }
        #expect(try bound.lastSeq() == last)
        let named = try notification("REFUND", uuid: "n-4", transaction: try signed("1001", revoked: true))
        #expect(try await importApple(bound, named).notifications == 1)
    }

    /// The support workflow: timeline shows Apple's records beside the device's events, replay
    /// stops at the first disagreement, extract keeps the records of what it keeps.
    @Test func theSupportCommandsShowApplesRecord() async throws {
        let ledger = try ledger(purchase() + "\n" + purchase("t2", store: "1002"))
        try await importApple(ledger, info(try signed("1001")))
        try await importApple(ledger, try notification("REFUND", uuid: "n-1", transaction: try signed("1001", revoked: true, signedDate: Self.at + 1000)))
        try await importApple(ledger, info(try signed("1002")))
        let path = dir.path("user.ledger"), root = dir.path("root.pem")
        try chain.rootPEM.write(toFile: root, atomically: true, encoding: .utf8)

        let timeline = try cli(["timeline", path, "--transaction", "t1", "--apple-root", root])
        let lines = timeline.stdout.split(separator: "\n").map(String.init)
        #expect(
            lines.contains { $0.hasPrefix("     7 ") && $0.contains("Apple: 1001: purchased for 4.99 USD 2026-05-28T20:10:00.000Z, by its transaction info") }, "\(timeline.stdout)"
        )
        #expect(
            lines.contains { $0.hasPrefix("     8 ") && $0.contains("Apple: 1001: refunded 2026-05-28T20:26:40.500Z, by the REFUND notification n-1") },
            "\(timeline.stdout)")
        #expect(!timeline.stdout.contains("1002"), "\(timeline.stdout)")

        let first = try #require(try await ledger.firstDivergence(verifier: AppleSignatureVerifier(roots: try chain.roots)))
        #expect(first.seq == 8 && first.divergences.map(\.kind) == [.refundNotSeen])
        let replay = try cli(["replay", path, "--first-anomaly", "--divergence", "--apple-root", root])
        #expect(
            replay.status == 0 && replay.stdout.hasPrefix("seq 8: the first disagreement with Apple's record (report --view divergence):\n  refundNotSeen t1 (Apple's 1001)"),
            "\(replay.stdout)")
        #expect(try cli(["replay", path, "--first-anomaly"]).stdout == "no anomaly in this ledger\n")
        let alone = try cli(["replay", path, "--divergence"])
        #expect(alone.status == 2 && alone.stderr.contains("--divergence goes with --first-anomaly"), "\(alone.stderr)")

        // A repro of t1 keeps Apple's two records of it, and reports what the original does.
        let repro = try ledger.extract(.transactions(["t1"]), to: dir.path("t1.ledger"))
        #expect(repro.appleRecords == 2 && repro.originalSeqs == [1, 3, 4, 7, 8], "\(repro)")
        #expect(try await kinds(Ledger(path: dir.path("t1.ledger"))) == ["refundNotSeen t1 1001"])
        #expect(try ledger.extract(.transactions(["t2"]), to: dir.path("t2.ledger")).appleRecords == 1)
        // Redacted, Apple's signed bodies cannot come along.
        #expect(try ledger.extract(.user("u1"), to: dir.path("u1.ledger"), redact: true).appleRecords == 0)

        // A record of Apple's appended by hand shows in the timeline, marked as not Apple's.
        var forged = try signed("1001", revoked: true, signedDate: Self.at + 5000).split(separator: ".").map(String.init)
        forged[2] = try signed("1002").split(separator: ".").map(String.init)[2]  // another transaction's signature
        let line = #"{"type":"appleTransactionReceived","at":"2026-05-29T00:00:00Z","signedTransaction":""# + forged.joined(separator: ".") + #"","source":"transactionInfo"}"#
        #expect(try cli(["append", path], stdin: line).status == 0)
        let marked = try cli(["timeline", path, "--transaction", "t1", "--apple-root", root]).stdout.split(separator: "\n")
        #expect(marked.contains { $0.hasPrefix("    10 ") && $0.contains("Apple's signature: invalid: ") }, "\(marked)")
        #expect(marked.contains { $0.hasPrefix("     8 ") && $0.contains("signed by Apple") }, "\(marked)")

        // The device records the refund a day late: no divergence now, but the log showed one.
        try ledger.append(Event(at: try Timestamp.parse("2026-05-29T20:00:00Z"), .transactionRevoked(transaction: "t1", reason: "refund")))
        #expect(try await kinds(ledger) == ["appleRecordUnverified - 1001"])
        #expect(try await ledger.firstDivergence(verifier: AppleSignatureVerifier(roots: try chain.roots))?.seq == 8)
    }

    /// After `forget`, the user's complete history names an erased user, as the device's
    /// transactions do: it stands for no one, and claims no purchase missing.
    @Test func anErasedUsersHistoryClaimsNothing() async throws {
        let ledger = try ledger(purchase() + "\n" + purchase("t2", store: "1002"))
        try await importApple(ledger, history([try signed("1001", revoked: true), try signed("1003")]))
        #expect(try await kinds(ledger) == ["refundNotSeen t1 1001", "chargedNotRecorded - 1003", "recordedNotCharged t2 1002"])
        try ledger.forget(user: "u1")
        #expect(try await kinds(ledger).isEmpty)
    }
}
