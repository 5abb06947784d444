import Foundation
import Testing
@testable import PurchaseLedger

/// Personal data (contract 5.3): an inventory declared field by field, and redaction that covers
/// it with keyed pseudonyms, stable within a ledger, different across ledgers.
@Suite struct PrivacyTests {
    /// One event of every type, every optional text field given, each value distinct.
    static let everyField: [Event] = {
        var n = 0
        func v(_ kind: String) -> String {
            n += 1
            return "\(kind)-value-\(n)"
        }
        let at = E.at(1)
        let spec = DownloadSpec(download: v("download"), content: v("content"), contentVersion: ContentVersion("1.0")!, contentLength: 1)
        let error = StoreError(domain: v("domain"), code: 2, message: v("message"))
        let terms = PurchaseTerms(
            price: "1.00", currency: "USD", storefront: "USA", offer: Offer(type: .promotional, id: v("offer")), unverified: v("unverified"),
            signedTransaction: "signed-value-terms")
        let bodies: [EventBody] = [
            .productRegistered(
                ProductRegistration(
                    product: v("product"), kind: .nonConsumable, price: "1.00", currency: "USD", downloadable: true,
                    contents: [ContentSpec(content: v("content"), contentVersion: ContentVersion("1.0")!, contentLength: 1)],
                    relatedProducts: [v("product")], title: v("title"))),
            .contentVersionPublished(product: v("product"), content: v("content"), contentVersion: ContentVersion("2.0")!),
            .paymentQueued(transaction: v("transaction"), product: v("product"), quantity: 1, user: v("user")),
            .transactionDeferred(transaction: v("transaction")),
            .transactionPurchased(
                transaction: v("transaction"), product: v("product"), user: v("user"), storeTransactionId: v("store"), downloads: [spec],
                terms: terms),
            .transactionFailed(transaction: v("transaction"), error: error),
            .transactionRestored(
                transaction: v("transaction"), originalTransaction: v("original"), product: v("product"), user: v("user"),
                storeTransactionId: v("store"), downloads: [spec], terms: terms),
            .transactionRevoked(transaction: v("transaction"), reason: v("reason"), signedTransaction: "signed-value-revoked"),
            .transactionFinished(transaction: v("transaction"), discardContent: false),
            .downloadStarted(download: v("download")),
            .downloadProgressed(download: v("download"), progress: 0.5, bytesWritten: 1, timeRemaining: 1),
            .downloadPaused(download: v("download")),
            .downloadResumed(download: v("download")),
            .downloadCancelled(download: v("download"), reason: .user),
            .downloadFinished(download: v("download"), contentURL: v("contentURL")),
            .downloadFailed(download: v("download"), error: StoreError(domain: v("domain"), code: 3, message: v("message"))),
            .contentCopiedOut(download: v("download"), destination: v("destination"), checksum: v("checksum"), bytesCopied: 1),
            .contentDeleted(product: v("product")),
            .restoreStarted(user: v("user")),
            .restoreCompleted,
            .restoreFailed(error: StoreError(domain: v("domain"), code: 4, message: v("message"))),
            .contentRegistered(url: v("url"), download: v("download"), contentLength: 1),
            .assetPackPublished(pack: v("pack"), version: 1, unlockedBy: [v("product")]),
            .assetPackBegan(pack: v("pack"), version: 1),
            .assetPackProgressed(pack: v("pack"), version: 1, progress: 0.5),
            .assetPackPaused(pack: v("pack"), version: 1),
            .assetPackFinished(pack: v("pack"), version: 1),
            .assetPackFailed(pack: v("pack"), version: 1, error: StoreError(domain: v("domain"), code: 5, message: v("message"))),
            .assetPackRemoved(pack: v("pack")),
            .assetPackOpened(pack: v("pack"), version: 1),
            .storePaymentPromoted(product: v("product"), accepted: true),
            .personalDataErased(refs: [1, 2]),
            .appleTransactionReceived(signedTransaction: "signed-value-apple", source: .history, user: v("user")),
            .appleNotificationReceived(signedPayload: "signed-value-notification", user: v("user")),
            .appleHistoryCompleted(revision: v("revision"), user: v("user")),
            .storeProductViewPresented(
                view: v("view"), item: "1234567890", style: .overlay, affiliateToken: v("affiliate"), campaignToken: v("campaign"),
                providerToken: v("provider")),
            .storeProductViewLoaded(view: v("view")),
            .storeProductViewFailed(view: v("view"), error: StoreError(domain: v("domain"), code: 6, message: v("message"))),
            .storeProductViewDismissed(view: v("view")),
        ]
        return bodies.map { Event(at: at, $0) }
    }()

    static func texts(_ event: Event) -> [(key: String, value: String)] {
        var all: [(String, String)] = []
        event.body.forEachText { key, _, value in all.append((key, value)) }
        return all
    }

    /// Every text field an event can hold is declared personal or not, once; a new field fails
    /// here until it is.
    @Test func everyTextFieldIsDeclaredPersonalOrNot() {
        #expect(Set(Self.everyField.map(\.type)) == Set(EventType.allCases), "one event of every type")
        let keys = Set(Self.everyField.flatMap { Self.texts($0).map(\.key) })
        #expect(PersonalData.personal.isDisjoint(with: PersonalData.nonPersonal))
        #expect(
            keys.subtracting(PersonalData.personal.union(PersonalData.nonPersonal)).isEmpty,
            "undeclared: \(keys.subtracting(PersonalData.personal.union(PersonalData.nonPersonal)))")
        #expect(PersonalData.personal.union(PersonalData.nonPersonal).subtracting(keys).isEmpty, "declared but never held")
    }

    /// Redaction replaces every personal value and keeps every other; no personal value is left
    /// anywhere in the event's JSON.
    @Test func redactionCoversTheInventory() {
        let redactor = Redactor(secret: Redactor.randomSecret())
        for event in Self.everyField {
            let redacted = redactor.redact(event)
            let json = JSONLines.encode(redacted)
            // A signature cannot be pseudonymised (it would confirm a guessed store id): it goes.
            if let signed = event.body.signedTransaction {
                #expect(redacted.body.signedTransaction == nil && !json.contains(signed), "\(event.type)")
            }
            for (before, after) in zip(Self.texts(event), Self.texts(redacted)) where before.key != "signedTransaction" {
                #expect(before.key == after.key)
                if PersonalData.personal.contains(before.key) {
                    #expect(before.value != after.value && !json.contains(before.value), "\(event.type) \(before.key)")
                } else {
                    #expect(before.value == after.value, "\(event.type) \(before.key)")
                }
            }
        }
    }

    /// Pseudonyms are stable within a ledger and differ across ledgers; the old unkeyed scheme
    /// (`user-74c7f8c8c990` from SHA-256 of a fixed prefix, found back by counting up) is gone.
    @Test func pseudonymsAreKeyedPerLedger() throws {
        let dir = try TemporaryDirectory()
        let events = [E.product("p1"), E.queued("t1", user: "u-04217"), E.purchased("t1")]
        for name in ["a.ledger", "b.ledger"] { try Ledger(path: dir.path(name)).append(contentsOf: events) }
        let a1 = try cli(["export", dir.path("a.ledger"), "--redact"]).stdout
        let a2 = try cli(["export", dir.path("a.ledger"), "--redact"]).stdout
        let b = try cli(["export", dir.path("b.ledger"), "--redact"]).stdout
        #expect(a1 == a2 && a1 != b)
        #expect(!a1.contains("u-04217") && !a1.contains("s-t1"))
        let unkeyed = "user-" + Hex.encode(Array(HashChain.sha256(Array("purchase-ledger redaction v1/user/u-04217".utf8)).prefix(6)))
        #expect(!a1.contains(unkeyed) && !b.contains(unkeyed))
    }

    /// A redacted export still imports and replays to the same outcomes: the rules see the same
    /// equalities (a redelivered failure with another message stays an anomaly; a registered URL
    /// is still found by its pseudonym).
    @Test func aRedactedExportReplaysToTheSameOutcomes() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("user.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        let card = StoreError(domain: "SKErrorDomain", code: 2, message: "Card ending 4242 of ann@example.com declined")
        try ledger.append(contentsOf: [
            E.product("p1", contents: [("c1", "1.0")]), E.queued("t1", user: "ann@example.com"),
            Event(at: E.at(2), .transactionFailed(transaction: "t1", error: card)),
            Event(at: E.at(3), .transactionFailed(transaction: "t1", error: StoreError(domain: "SKErrorDomain", code: 2, message: "other"))),
            E.queued("t2", user: "ann@example.com"), E.purchased("t2", downloads: ["t2-d1"]), E.start("t2-d1"),
            Event(at: E.at(5), .downloadFinished(download: "t2-d1", contentURL: "file:///Users/ann/Library/Caches/StoreKit/t2/")),
            E.copied("t2-d1", to: "/Users/ann/Documents/book"), E.finished("t2"),
            Event(at: E.at(9), .transactionRevoked(transaction: "t2", reason: "Refund asked by ann@example.com")),
            Event(at: E.at(10), .contentRegistered(url: "https://cdn.example.com/u/ann?token=s3cret", download: "k1", contentLength: 10)),
        ])
        let export = try cli(["export", path, "--redact"])
        #expect(export.status == 0)
        // ("Card ending 4242", not "4242" alone: a pseudonym's 16 random hex digits hold "4242" about once in 500 runs.)
        for secret in ["ann", "Card ending 4242", "s3cret", "Users", "Refund"] { #expect(!export.stdout.contains(secret), "\(secret)") }
        try export.stdout.write(toFile: dir.path("redacted.jsonl"), atomically: true, encoding: .utf8)
        #expect(try cli(["import", dir.path("copy.ledger"), dir.path("redacted.jsonl")]).status == 0)
        let original = ledger.currentState
        let copy = try Ledger(path: dir.path("copy.ledger"))
        let replayed = copy.currentState
        #expect(replayed.anomalies == original.anomalies && original.anomalies == 1)
        #expect(replayed.transactions.mapValues(\.state) == original.transactions.mapValues(\.state))
        #expect(replayed.downloads.mapValues(\.state) == original.downloads.mapValues(\.state))
        let redactor = try ledger.redactor()
        #expect(try copy.download(forURL: redactor.pseudonym(url: "https://cdn.example.com/u/ann?token=s3cret")) == "k1")
        #expect(try copy.verify().isValid)
    }
}
