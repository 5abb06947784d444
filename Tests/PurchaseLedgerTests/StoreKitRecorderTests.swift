import Foundation
import Synchronization
import PurchaseLedgerTesting
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerStoreKit

/// The StoreKit recorder's mapping, fed with the value types the Apple layer fills from StoreKit:
/// every transaction and download state, restores, failures, Ask to Buy, refunds, redeliveries at
/// launch, the app's calls checked by the ledger before StoreKit sees them, and StoreKit 2.
@Suite struct StoreKitRecorderTests {
    let dir: TemporaryDirectory
    let ledger: Ledger
    let errors = Errors()

    final class Errors: Sendable {
        private let list = Mutex<[LedgerError]>([])
        func add(_ e: LedgerError) { list.withLock { $0.append(e) } }
        var all: [LedgerError] { list.withLock { $0 } }
    }

    init() throws {
        dir = try TemporaryDirectory()
        ledger = try Ledger(path: dir.path("app.ledger"), configuration: testConfiguration())
    }

    func recorder() throws -> StoreKitRecorder {
        let errors = self.errors
        let r = StoreKitRecorder(ledger: ledger, onError: { errors.add($0) })
        try r.register([
            ProductValue(
                productIdentifier: "com.example.book", kind: .nonConsumable, price: Decimal(string: "4.99")!, currencyCode: "USD",
                isDownloadable: true, contentVersion: "1.0", contentLengths: [1000]),
            ProductValue(productIdentifier: "com.example.coins", kind: .consumable, price: Decimal(string: "0.99")!, currencyCode: "USD"),
            ProductValue(productIdentifier: "com.example.season", kind: .autoRenewable, price: Decimal(string: "2.99")!, currencyCode: "EUR"),
        ])
        return r
    }

    static let cancelled = StoreError(domain: "SKErrorDomain", code: 2, message: "Cannot connect to iTunes Store")

    func tx(
        _ handle: Int, _ state: PaymentTransactionState, _ product: String = "com.example.book", store: String? = nil,
        original: String? = nil, user: String? = nil, quantity: Int = 1, downloads: [DownloadValue] = [], error: StoreError? = nil
    ) -> PaymentTransactionValue {
        PaymentTransactionValue(
            handle: handle, state: state, productIdentifier: product, quantity: quantity, applicationUsername: user,
            transactionIdentifier: store, originalTransactionIdentifier: original, error: error, downloads: downloads)
    }

    func download(_ handle: Int, _ state: DownloadState = .waiting, progress: Double = 0, url: URL? = nil, error: StoreError? = nil) -> DownloadValue {
        DownloadValue(
            transactionHandle: handle, contentIdentifier: "com.example.book", contentVersion: "1.0", contentLength: 1000,
            state: state, progress: progress, timeRemaining: 12, contentURL: url, error: error)
    }

    func types() throws -> [String] {
        var types: [String] = []
        try ledger.forEachEvent {
            types.append($0.event.type.name); return true
        }
        return types
    }

    @Test func productsAreRegisteredOnceWithTheirHostedContent() throws {
        let r = try recorder()
        let state = ledger.currentState
        #expect(state.products["com.example.book"]?.registration.contents.first?.content == "com.example.book")
        #expect(state.products["com.example.book"]?.registration.price == "4.99")
        #expect(state.products["com.example.season"]?.registration.currency == "EUR")
        let before = try ledger.lastSeq()
        try r.register([ProductValue(productIdentifier: "com.example.coins", kind: .consumable, price: Decimal(string: "0.99")!, currencyCode: "USD")])
        #expect(try ledger.lastSeq() == before, "an unchanged product is not registered again")
    }

    @Test func aPurchaseWithHostedContentFromPaymentToFinish() throws {
        let r = try recorder()
        let id = try r.addPayment(productIdentifier: "com.example.book", applicationUsername: "u1")
        r.updatedTransactions([tx(1, .purchasing, user: "u1")])
        #expect(try types().filter { $0 == "paymentQueued" }.count == 1, "the purchasing callback binds to the recorded payment")
        let d = download(1)
        r.updatedTransactions([tx(1, .purchased, store: "1000001", user: "u1", downloads: [d])])
        #expect(ledger.currentState.transactions[id]?.user == "u1")
        let downloadID = StoreKitRecorder.downloadID(transaction: id, content: "com.example.book")
        #expect(ledger.currentState.transactions[id]?.state == .purchased)
        #expect(ledger.currentState.transactions[id]?.storeTransactionId == "1000001")
        #expect(ledger.currentState.transactions[id]?.downloads == [downloadID])

        try r.start([d])
        r.updatedDownloads([download(1, .waiting)])
        r.updatedDownloads([download(1, .active, progress: 0.25), download(1, .active, progress: 0.25)])
        #expect(try types().filter { $0 == "downloadProgressed" }.count == 1, "an unchanged progress is not recorded twice")
        try r.pause([d])
        r.updatedDownloads([download(1, .paused, progress: 0.25)])
        try r.resume([d])
        r.updatedDownloads([download(1, .active, progress: 0.9)])
        // Values StoreKit never sends (NaN, an infinity) are recorded as the nearest valid ones,
        // not refused with the whole callback.
        var odd = download(1, .active, progress: .nan)
        odd.timeRemaining = .infinity
        r.updatedDownloads([odd])
        #expect(ledger.currentState.downloads[downloadID]?.progress == 0, "NaN progress reads as 0")
        r.updatedDownloads([download(1, .active, progress: 0.9)])

        // Finished: the content sits in StoreKit's cache until the app copies it out.
        let cache = dir.url.appending(path: "Caches/StoreKit/\(downloadID)/Contents")
        try FileManager.default.createDirectory(at: cache, withIntermediateDirectories: true)
        try Data(repeating: 7, count: 1234).write(to: cache.appending(path: "chapter1.pdf"))
        try Data(repeating: 8, count: 66).write(to: cache.appending(path: "cover.png"))
        let finished = download(1, .finished, progress: 1, url: cache)
        r.updatedDownloads([finished])
        #expect(ledger.currentState.downloads[downloadID]?.state == .finished)

        // A finish now would delete uncopied content: refused, nothing recorded.
        let seq = try ledger.lastSeq()
        expectViolation(.finishBeforeCopyOut) { try r.finish(tx(1, .purchased, store: "1000001")) }
        #expect(try ledger.lastSeq() == seq)

        let destination = dir.url.appending(path: "Documents/book")
        #expect(try r.copyContent(of: finished, to: destination) == 1300)
        #expect(FileManager.default.fileExists(atPath: destination.appending(path: "chapter1.pdf").path))
        #expect(ledger.currentState.downloads[downloadID]?.copiedOut == true)
        #expect(ledger.currentState.downloads[downloadID]?.bytesCopied == 1300)
        try r.finish(tx(1, .purchased, store: "1000001"))
        #expect(ledger.currentState.transactions[id]?.finished == true)
        #expect(ledger.currentState.contentURL(for: downloadID) == nil)
        r.removedTransactions([tx(1, .purchased, store: "1000001")])
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(try ledger.verify().isValid)
    }

    @Test func copyOutIsCheckedBeforeAnyFileIsTouched() throws {
        let r = try recorder()
        try r.addPayment(productIdentifier: "com.example.book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "7", downloads: [download(1)])])
        try r.start([download(1)])
        let destination = dir.url.appending(path: "Documents/early")
        expectViolation(.copyOutBeforeFinished) { try r.copyContent(of: download(1, .active, url: dir.url), to: destination) }
        #expect(!FileManager.default.fileExists(atPath: destination.path))
    }

    @Test func everyTransactionStateDeferredThenApprovedAndFailures() throws {
        let r = try recorder()
        let a = try r.addPayment(productIdentifier: "com.example.coins", quantity: 3, applicationUsername: "kid")
        r.updatedTransactions([tx(10, .purchasing, "com.example.coins", user: "kid", quantity: 3)])
        r.updatedTransactions([tx(10, .deferred, "com.example.coins", user: "kid", quantity: 3)])
        #expect(ledger.currentState.transactions[a]?.state == .deferred)
        r.updatedTransactions([tx(10, .purchased, "com.example.coins", store: "2001", user: "kid", quantity: 3)])
        #expect(ledger.currentState.transactions[a]?.state == .purchased)
        #expect(ledger.currentState.transactions[a]?.wasDeferred == true)
        #expect(ledger.currentState.transactions[a]?.quantity == 3)

        let b = try r.addPayment(productIdentifier: "com.example.coins")
        r.updatedTransactions([tx(11, .purchasing, "com.example.coins", user: nil), tx(11, .failed, "com.example.coins", user: nil, error: Self.cancelled)])
        let failed = try #require(ledger.currentState.transactions[b])
        #expect(failed.state == .failed)
        #expect(failed.error == Self.cancelled)
        try r.finish(tx(11, .failed, "com.example.coins", user: nil))
        #expect(ledger.currentState.transactions[b]?.finished == true)

        // StoreKit's own error values become the ledger's, domain and code.
        let nsError = NSError(domain: "SKErrorDomain", code: 2, userInfo: [NSLocalizedDescriptionKey: "cancelled"])
        #expect(StoreError(nsError) == StoreError(domain: "SKErrorDomain", code: 2, message: "cancelled"))
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test func aTransactionFirstSeenOutsideTheAppGetsTheStoreId() throws {
        let r = try recorder()
        // Bought outside the app's own payment (or redelivered after a reinstall).
        r.updatedTransactions([tx(20, .purchased, "com.example.coins", store: "555", user: nil)])
        #expect(ledger.currentState.transactions["sk1-555"]?.state == .purchased)
        // Failed and deferred transactions never seen start with their payment.
        r.updatedTransactions([tx(21, .failed, "com.example.coins", user: nil, error: Self.cancelled)])
        r.updatedTransactions([tx(22, .deferred, "com.example.book", user: "u9")])
        let states = ledger.currentState.transactions.values.map(\.state)
        #expect(states.filter { $0 == .failed }.count == 1 && states.filter { $0 == .deferred }.count == 1)
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test func restoresNameTheirOriginalAndTheRestoreIsBracketed() throws {
        let r = try recorder()
        let first = try r.addPayment(productIdentifier: "com.example.book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "100")])
        try r.finish(tx(1, .purchased, store: "100"))
        try r.restoreStarted(applicationUsername: "u1")
        expectViolation(.restoreInProgress) { try r.restoreStarted() }
        r.updatedTransactions([
            tx(30, .restored, store: "300", original: "100", downloads: [download(30)]),
            tx(31, .restored, "com.example.season", store: "301", original: "999"),
        ])
        r.restoreCompleted()
        let restored = try #require(ledger.currentState.transactions["sk1-300"])
        #expect(restored.state == .restored)
        #expect(restored.originalTransaction == first, "the original is found by its store id")
        #expect(restored.downloads == [StoreKitRecorder.downloadID(transaction: "sk1-300", content: "com.example.book")])
        #expect(ledger.currentState.transactions["sk1-301"]?.originalTransaction == "sk1-999", "an original the ledger never saw")
        #expect(!ledger.currentState.restoreInProgress)

        try r.restoreStarted()
        r.restoreFailed(StoreError(domain: "SKErrorDomain", code: 0, message: "network"))
        #expect(!ledger.currentState.restoreInProgress)
        #expect(try types().suffix(2) == ["restoreStarted", "restoreFailed"])
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test func redeliveryAtLaunchDuplicatesNothing() throws {
        let first = try recorder()
        let paid = try first.addPayment(productIdentifier: "com.example.book")
        first.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "4242", downloads: [download(1)])])
        let waiting = try first.addPayment(productIdentifier: "com.example.coins", applicationUsername: "u2")
        first.updatedTransactions([tx(2, .purchasing, "com.example.coins", user: "u2")])
        let before = ledger.currentState

        // The app relaunches: new objects, new handles; StoreKit redelivers what is unfinished.
        let relaunched = StoreKitRecorder(ledger: ledger)
        relaunched.updatedTransactions([
            tx(101, .purchased, store: "4242", downloads: [download(101)]),
            tx(102, .purchasing, "com.example.coins", user: "u2"),
        ])
        let after = ledger.currentState
        #expect(after.transactions.count == before.transactions.count)
        #expect(after.transactions[paid]?.state == .purchased)
        #expect(after.transactions[paid]?.storeTransactionId == "4242")
        #expect(after.transactions[paid]?.downloads == before.transactions[paid]?.downloads)
        #expect(after.anomalies == before.anomalies, "a redelivery is not an anomaly")
        #expect(try ledger.purchaseHistory().filter { $0.transaction.state == .purchased }.count == 1, "never a duplicate purchase")
        // The relaunched purchase completes under the id the payment had.
        relaunched.updatedTransactions([tx(102, .purchased, "com.example.coins", store: "4243", user: "u2")])
        #expect(ledger.currentState.transactions[waiting]?.state == .purchased)
        // And the download of the redelivered transaction is found by the new handle.
        try relaunched.start([download(101)])
        #expect(ledger.currentState.downloads[StoreKitRecorder.downloadID(transaction: paid, content: "com.example.book")]?.started == true)
    }

    @Test func anEarlyFinishCancelsDownloadsAndALateFinishIsAnAnomaly() throws {
        let r = try recorder()
        let id = try r.addPayment(productIdentifier: "com.example.book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "1", downloads: [download(1)])])
        try r.start([download(1)])
        r.updatedDownloads([download(1, .active, progress: 0.5)])
        try r.finish(tx(1, .purchased, store: "1"))
        let downloadID = StoreKitRecorder.downloadID(transaction: id, content: "com.example.book")
        #expect(ledger.currentState.downloads[downloadID]?.lost == true, "cancelled by the ledger itself")
        // StoreKit then reports the cancellation it made: already recorded.
        let seq = try ledger.lastSeq()
        r.updatedDownloads([download(1, .cancelled, progress: 0.5)])
        #expect(try ledger.lastSeq() == seq)
        // A download that finishes after the finish: kept, flagged, no URL.
        expectViolation(.downloadAfterFinish) { try r.start([download(1)]) }
        let other = try r.addPayment(productIdentifier: "com.example.book", applicationUsername: "u3")
        r.updatedTransactions([tx(2, .purchasing, user: "u3"), tx(2, .purchased, store: "2", user: "u3", downloads: [download(2)])])
        try r.start([download(2)])
        try r.finish(tx(2, .purchased, store: "2", user: "u3"))
        r.updatedDownloads([download(2, .finished, progress: 1, url: dir.url)])
        let late = try ledger.events(from: seq).last
        #expect(late?.event.type == .downloadFinished)
        #expect(late?.anomaly == .contentURLAfterFinish)
        #expect(ledger.currentState.contentURL(for: StoreKitRecorder.downloadID(transaction: other, content: "com.example.book")) == nil)
    }

    @Test func aFailedDownloadKeepsItsErrorAndIsRetried() throws {
        let r = try recorder()
        let id = try r.addPayment(productIdentifier: "com.example.book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "1", downloads: [download(1)])])
        let downloadID = StoreKitRecorder.downloadID(transaction: id, content: "com.example.book")
        try r.start([download(1)])
        r.updatedDownloads([download(1, .active, progress: 0.4)])
        let lost = StoreError(domain: "NSURLErrorDomain", code: -1005, message: "The network connection was lost.")
        r.updatedDownloads([download(1, .failed, progress: 0.4, error: lost), download(1, .failed, progress: 0.4, error: lost)])
        let failed = try #require(ledger.currentState.downloads[downloadID])
        #expect(failed.state == .failed && failed.error == lost && failed.progress == 0.4)
        #expect(try types().filter { $0 == "downloadFailed" }.count == 1, "a repeated failure report adds nothing")
        try r.start([download(1)])
        #expect(ledger.currentState.downloads[downloadID]?.state == .waiting)
        #expect(ledger.currentState.downloads[downloadID]?.progress == 0, "a retry starts again at 0")
        #expect(ledger.currentState.downloads[downloadID]?.attempts == 2)
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    @Test func aFinishMadeAroundTheRecorderIsRecordedWhenStoreKitRemovesIt() throws {
        let r = try recorder()
        let id = try r.addPayment(productIdentifier: "com.example.book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "1", downloads: [download(1)])])
        try r.start([download(1)])
        r.updatedDownloads([download(1, .finished, progress: 1, url: dir.url)])
        // The app called finishTransaction itself: StoreKit removes the transaction and its content.
        r.removedTransactions([tx(1, .purchased, store: "1")])
        #expect(errors.all.map(\.rule) == [.finishBeforeCopyOut], "the lapse is reported")
        #expect(ledger.currentState.transactions[id]?.finished == true)
        #expect(ledger.currentState.transactions[id]?.discardedContent == true, "recorded as discarded: StoreKit deleted it")
    }

    @Test func transactionsFromUpdatesAwaitTheAppsFinishAndUnverifiedOnesCanBeFinished() throws {
        let r = try recorder()
        let approved = StoreKit2TransactionValue(
            id: 9301, originalID: 9301, productID: "com.example.book", productKind: .nonConsumable,
            purchasedQuantity: 1, purchaseDate: Date(timeIntervalSince1970: 1_709_280_000), reason: .purchase)
        #expect(!r.awaitsFinish(storeKit2: 9301), "unknown to the ledger")
        // An Ask to Buy approval arrives through Transaction.updates: recorded, then the app's to deliver.
        r.record([approved], from: .updates)
        #expect(r.awaitsFinish(storeKit2: 9301))
        try r.finish(storeKit2: 9301)
        #expect(!r.awaitsFinish(storeKit2: 9301), "finished")

        var refunded = approved
        refunded.id = 9302
        refunded.originalID = 9302
        refunded.revocationDate = Date(timeIntervalSince1970: 1_709_366_400)
        r.record([refunded], from: .updates)
        #expect(!r.awaitsFinish(storeKit2: 9302), "revoked: nothing to deliver")

        // An unverified transaction: only finishing it is left, and the ledger allows that.
        r.unverified(storeKit2: 9303, product: "com.example.book", error: StoreError(domain: "StoreKit.VerificationError", code: 4, message: "invalid signature"))
        #expect(r.awaitsFinish(storeKit2: 9303))
        let seq = try ledger.lastSeq()
        try r.finishUnverified(storeKit2: 9303)
        #expect(try ledger.lastSeq() == seq, "nothing recorded: the ledger keeps it as an anomaly")
        #expect(throws: LedgerError.self) { try r.finishUnverified(storeKit2: 9301) }
        #expect(throws: LedgerError.self) { try r.finishUnverified(storeKit2: 9999) }
    }

    @Test func storeKit2PurchasesLaunchSweepsRefundsRenewalsAndRestores() throws {
        let r = try recorder()
        let token = UUID()
        let bought = Date(timeIntervalSince1970: 1_709_280_000)
        let coins = StoreKit2TransactionValue(
            id: 9001, originalID: 9001, productID: "com.example.coins", productKind: .consumable,
            purchasedQuantity: 4, purchaseDate: bought, appAccountToken: token, reason: .purchase)
        r.record([coins], from: .purchase)
        let recorded = try #require(ledger.currentState.transactions["sk2-9001"])
        #expect(recorded.state == .purchased && recorded.quantity == 4 && recorded.user == token.uuidString.lowercased())
        #expect(recorded.purchasedAt == Timestamp(bought))

        // At launch the same transaction comes back from unfinished and currentEntitlements.
        let seq = try ledger.lastSeq()
        r.record([coins], from: .unfinished)
        r.record([coins], from: .currentEntitlements)
        #expect(try ledger.lastSeq() == seq, "nothing duplicated")

        // A refund.
        var refunded = coins
        refunded.revocationDate = bought.addingTimeInterval(86_400)
        refunded.revocationReason = "developerIssue"
        r.record([refunded], from: .updates)
        #expect(ledger.currentState.transactions["sk2-9001"]?.revoked == true)
        #expect(ledger.currentState.transactions["sk2-9001"]?.revocationReason == "developerIssue")
        r.record([refunded], from: .updates)
        #expect(try ledger.events(inStream: "transaction:sk2-9001").filter { $0.event.type == .transactionRevoked }.count == 1)

        // A renewal is a purchase of its own; a restore names its original.
        let renewal = StoreKit2TransactionValue(
            id: 9100, originalID: 9050, productID: "com.example.season", productKind: .autoRenewable,
            purchaseDate: bought, reason: .renewal)
        // (Before iOS 17 StoreKit gives no reason: another originalID, not a subscription, is a restore.)
        let restore = StoreKit2TransactionValue(
            id: 9200, originalID: 8000, productID: "com.example.book", productKind: .nonConsumable, purchaseDate: bought)
        r.record([renewal, restore], from: .updates)
        #expect(ledger.currentState.transactions["sk2-9100"]?.state == .purchased)
        #expect(ledger.currentState.transactions["sk2-9200"]?.state == .restored)
        #expect(ledger.currentState.transactions["sk2-9200"]?.originalTransaction == "sk2-8000")
        #expect(try ledger.revenue().first { $0.product == "com.example.season" }?.units == 1, "a renewal is revenue")

        try r.finish(storeKit2: 9100)
        expectViolation(.alreadyFinished) { try r.finish(storeKit2: 9100) }
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(try ledger.verify().isValid)
    }

    /// StoreKit 2's money, classified as the contract's v2 fields: the unit price (StoreKit's
    /// price is the total for the quantity), currency, storefront, environment, ownership, offer;
    /// from iOS 17 a resubscription or upgrade (another originalID, reason `purchase`) is a purchase.
    @Test func storeKit2TransactionsCarryWhatWasPaidWhereAndByWhom() throws {
        let r = try recorder()
        let bought = Date(timeIntervalSince1970: 1_709_280_000)
        let coins = StoreKit2TransactionValue(
            id: 7001, originalID: 7001, productID: "com.example.coins", productKind: .consumable, purchasedQuantity: 3,
            purchaseDate: bought, reason: .purchase, price: Decimal(string: "2.97")!, currency: "EUR", storefront: "FRA")
        let upgrade = StoreKit2TransactionValue(
            id: 7002, originalID: 6000, productID: "com.example.season", productKind: .autoRenewable, purchaseDate: bought,
            reason: .purchase, price: Decimal(string: "0")!, currency: "EUR", storefront: "FRA", offer: Offer(type: .introductory))
        let sandbox = StoreKit2TransactionValue(
            id: 7003, originalID: 7003, productID: "com.example.coins", productKind: .consumable, purchaseDate: bought,
            price: Decimal(string: "0.99")!, currency: "USD", environment: .sandbox)
        let shared = StoreKit2TransactionValue(
            id: 7004, originalID: 7004, productID: "com.example.book", productKind: .nonConsumable, purchaseDate: bought,
            price: Decimal(string: "4.99")!, currency: "USD", ownership: .familyShared)
        r.record([coins, upgrade, sandbox, shared], from: .updates)
        #expect(errors.all.isEmpty, "\(errors.all)")
        let state = ledger.currentState
        let c = try #require(state.transactions["sk2-7001"])
        #expect(c.quantity == 3 && c.paid.price == "0.99" && c.paid.currency == "EUR" && c.paid.storefront == "FRA" && c.paid.priceSource == .event)
        let u = try #require(state.transactions["sk2-7002"])
        #expect(u.state == .purchased && u.originalTransaction == nil, "an upgrade is a purchase, not a restore")
        #expect(u.paid.price == "0" && u.paid.offer == Offer(type: .introductory))
        #expect(state.transactions["sk2-7003"]?.paid.environment == .sandbox)
        #expect(state.transactions["sk2-7004"]?.paid.ownership == .familyShared)
        let revenue = try ledger.revenue()
        #expect(Set(revenue.map { "\($0.product) \($0.price) \($0.currency) \($0.units)" }) == ["com.example.coins 0.99 EUR 3", "com.example.season 0 EUR 1"])
        #expect(try ledger.revenue(allEnvironments: true).count == 4)

        // An unverified result is kept, as an anomaly with its verification error, never a purchase.
        let invalid = StoreError(domain: "StoreKit.VerificationResult", code: 1, message: "invalid signature")
        r.unverified(storeKit2: 7005, product: "com.example.book", error: invalid)
        r.unverified(storeKit2: 7005, product: "com.example.book", error: invalid)
        #expect(ledger.currentState.transactions["sk2-7005"] == nil && errors.all.isEmpty)
        let kept = try ledger.events(inStream: "transaction:sk2-7005")
        #expect(kept.count == 1 && kept[0].anomaly == .unverifiedTransaction, "recorded once")
        #expect(JSONLines.encode(kept[0].event).contains(#""unverified":"StoreKit.VerificationResult 1: invalid signature""#))
        #expect(try ledger.revenue(allEnvironments: true).count == 4, "never revenue")
    }

    /// At launch `Transaction.all` finds refunds made while the app was closed: recorded once,
    /// running it again records nothing; transactions neither revoked nor known are left to
    /// `currentEntitlements` and `unfinished`.
    @Test func reconcilingWithAllTransactionsRecordsMissedRefundsOnce() throws {
        let r = try recorder()
        let bought = Date(timeIntervalSince1970: 1_709_280_000)
        let known = StoreKit2TransactionValue(id: 8001, originalID: 8001, productID: "com.example.coins", productKind: .consumable, purchaseDate: bought)
        r.record([known], from: .purchase)
        var refunded = known
        refunded.revocationDate = bought.addingTimeInterval(3600)
        var unknownRefunded = StoreKit2TransactionValue(id: 8002, originalID: 8002, productID: "com.example.book", productKind: .nonConsumable, purchaseDate: bought)
        unknownRefunded.revocationDate = bought.addingTimeInterval(7200)
        let unknown = StoreKit2TransactionValue(id: 8003, originalID: 8003, productID: "com.example.book", productKind: .nonConsumable, purchaseDate: bought)
        r.record([refunded, unknownRefunded, unknown], from: .reconcile)
        let state = ledger.currentState
        #expect(state.transactions["sk2-8001"]?.revoked == true && state.transactions["sk2-8002"]?.revoked == true)
        #expect(state.transactions["sk2-8003"] == nil)
        let seq = try ledger.lastSeq()
        r.record([refunded, unknownRefunded, unknown], from: .reconcile)
        #expect(try ledger.lastSeq() == seq, "idempotent")
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    /// StoreKit 2's `jwsRepresentation` goes with the purchase and with its revocation, exactly;
    /// one that states another price than StoreKit's own `price` is flagged, not trusted.
    @Test func storeKit2RecordsApplesSignedTransactionWithThePurchaseAndTheRevocation() throws {
        let r = try recorder()
        let chain = try SigningChain()
        let bought = Date(timeIntervalSince1970: 1_709_280_000)
        let signedAt = Int64(bought.timeIntervalSince1970 * 1000)
        let jws = try chain.sign(
            SigningChain.payload(transaction: "8101", product: "com.example.coins", price: 990, currency: "USD", signedDate: signedAt))
        let coins = StoreKit2TransactionValue(
            id: 8101, originalID: 8101, productID: "com.example.coins", productKind: .consumable, purchaseDate: bought,
            price: Decimal(string: "0.99")!, currency: "USD", storefront: "USA", signedTransaction: jws)
        r.record([coins], from: .purchase)
        var refunded = coins
        refunded.revocationDate = bought.addingTimeInterval(3600)
        refunded.signedTransaction = try chain.sign(
            SigningChain.payload(
                transaction: "8101", product: "com.example.coins", price: 990, currency: "USD", signedDate: signedAt + 3_600_000,
                revocationDate: signedAt + 3_500_000))
        r.record([refunded], from: .reconcile)
        // Apple signed 9.99; StoreKit's own price said 0.99: kept as reported, and flagged.
        let liar = StoreKit2TransactionValue(
            id: 8102, originalID: 8102, productID: "com.example.coins", productKind: .consumable, purchaseDate: bought,
            price: Decimal(string: "0.99")!, currency: "USD",
            signedTransaction: try chain.sign(
                SigningChain.payload(transaction: "8102", product: "com.example.coins", price: 9990, currency: "USD", signedDate: signedAt)))
        r.record([liar], from: .purchase)
        var found: [String: (String?, Rule?)] = [:]
        try ledger.forEachEvent { e in
            if let t = e.event.body.transactionID, e.event.type != .paymentQueued { found["\(e.event.type.name) \(t)"] = (e.event.body.signedTransaction, e.anomaly) }
            return true
        }
        #expect(found["transactionPurchased sk2-8101"]?.0 == jws && found["transactionPurchased sk2-8101"]?.1 == nil)
        #expect(found["transactionRevoked sk2-8101"]?.0 == refunded.signedTransaction && found["transactionRevoked sk2-8101"]?.1 == nil)
        #expect(found["transactionPurchased sk2-8102"]?.1 == .signedFieldsDiffer)
        #expect(ledger.currentState.transactions["sk2-8102"]?.paid.price == "0.99")
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    /// StoreKit 1: the App Store's `transactionDate` is the purchase's time, the queue's storefront
    /// its storefront; `didRevokeEntitlementsForProductIdentifiers` revokes what still grants the
    /// products, once.
    @Test func storeKit1TransactionDatesStorefrontsAndRevokedEntitlements() throws {
        let r = try recorder()
        let paid = Date(timeIntervalSince1970: 1_709_290_000)
        try r.addPayment(productIdentifier: "com.example.coins", transactionID: "t-coins")
        r.updatedTransactions([PaymentTransactionValue(handle: 1, state: .purchasing, productIdentifier: "com.example.coins")])
        r.updatedTransactions([
            PaymentTransactionValue(
                handle: 1, state: .purchased, productIdentifier: "com.example.coins", transactionIdentifier: "1000", transactionDate: paid,
                storefront: "GBR")
        ])
        let t = try #require(ledger.currentState.transactions["t-coins"])
        #expect(t.purchasedAt == Timestamp(paid) && t.paid.storefront == "GBR" && t.paid.price == "0.99")
        r.revokedEntitlements(productIdentifiers: ["com.example.coins"])
        #expect(ledger.currentState.transactions["t-coins"]?.revoked == true)
        #expect(ledger.currentState.transactions["t-coins"]?.revocationReason == "entitlementRevoked")
        let seq = try ledger.lastSeq()
        r.revokedEntitlements(productIdentifiers: ["com.example.coins", "com.example.book"])
        #expect(try ledger.lastSeq() == seq)
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    /// `paymentQueue(_:shouldAddStorePayment:for:)`: the promoted product and the app's answer
    /// are recorded, the answer handed back; an unregistered product is kept as an anomaly.
    @Test func promotedPurchasesAreRecordedWithTheAppsAnswer() throws {
        let r = try recorder()
        #expect(r.storePaymentPromoted(productIdentifier: "com.example.book", accepted: true))
        #expect(!r.storePaymentPromoted(productIdentifier: "com.example.season", accepted: false))
        #expect(!r.storePaymentPromoted(productIdentifier: "com.example.unknown", accepted: false))
        let events = try ledger.events().suffix(3)
        #expect(
            events.map(\.event.body) == [
                .storePaymentPromoted(product: "com.example.book", accepted: true), .storePaymentPromoted(product: "com.example.season", accepted: false),
                .storePaymentPromoted(product: "com.example.unknown", accepted: false),
            ])
        #expect(events.map(\.anomaly) == [nil, nil, .unknownProduct])
        #expect(errors.all.isEmpty, "\(errors.all)")
    }

    /// Background Assets' status updates, through the value type the Apple layer fills: the whole
    /// life cycle of a pack unlocked by a purchase, an update to a new version, a refund of the
    /// unlocking purchase, a removal, and the opens the ledger allows or refuses along the way.
    @Test func assetPacksFromStatusUpdatesToUsableOrNot() throws {
        let r = try recorder()
        try r.assetPackPublished(id: "levels", version: 1, unlockedBy: ["com.example.book"])
        let seq = try ledger.lastSeq()
        try r.assetPackPublished(id: "levels", version: 1, unlockedBy: ["com.example.book"])
        #expect(try ledger.lastSeq() == seq, "the same publication records nothing")
        #expect(throws: LedgerError.self) { try r.openAssetPack(id: "levels", version: 1) }

        try r.addPayment(productIdentifier: "com.example.book", transactionID: "t-book")
        r.updatedTransactions([tx(1, .purchasing), tx(1, .purchased, store: "2000")])
        for update: AssetPackStatusUpdateValue in [
            .began(pack: "levels", version: 1), .downloading(pack: "levels", version: 1, fractionCompleted: 0.25),
            .paused(pack: "levels", version: 1), .began(pack: "levels", version: 1),
            .downloading(pack: "levels", version: 1, fractionCompleted: .nan), .downloading(pack: "levels", version: 1, fractionCompleted: 0.75),
        ] {
            r.assetPackStatusUpdate(update)
        }
        var pack = try #require(ledger.currentState.assetPack("levels"))
        #expect(pack.versionOnDevice == nil && !pack.usable && pack.downloads.first?.state == .active && pack.downloads.first?.progress == 0.75)
        #expect(pack.downloads.first?.attempts == 1, "a resume is not a new attempt")
        let refused = #expect(throws: LedgerError.self) { try r.openAssetPack(id: "levels", version: 1) }
        #expect(refused?.rule == .assetPackNotReady && refused?.message.contains("version 1 is active") == true, "\(String(describing: refused))")

        r.assetPackStatusUpdate(.finished(pack: "levels", version: 1))
        try r.openAssetPack(id: "levels", version: 1)
        pack = try #require(ledger.currentState.assetPack("levels"))
        #expect(pack.versionOnDevice == 1 && pack.usable && !pack.updateAvailable && pack.unlockedBy == ["com.example.book"])

        // An update: version 2 published, downloaded while version 1 stays usable, then it replaces it.
        try r.assetPackPublished(id: "levels", version: 2)
        #expect(ledger.currentState.assetPack("levels")?.updateAvailable == true)
        r.assetPackStatusUpdate(.began(pack: "levels", version: 2))
        try r.openAssetPack(id: "levels", version: 1)
        #expect(throws: LedgerError.self) { try r.openAssetPack(id: "levels", version: 2) }
        r.assetPackStatusUpdate(.failed(pack: "levels", version: 2, error: StoreError(domain: "BAErrorDomain", code: 3, message: "network")))
        r.assetPackStatusUpdate(.began(pack: "levels", version: 2))
        r.assetPackStatusUpdate(.finished(pack: "levels", version: 2))
        pack = try #require(ledger.currentState.assetPack("levels"))
        #expect(pack.versionOnDevice == 2 && !pack.updateAvailable)
        #expect(pack.downloads.map(\.download) == ["assetpack:levels@1", "assetpack:levels@2"])
        #expect(pack.downloads[0].discarded && !pack.downloads[1].discarded && pack.downloads[1].attempts == 2)
        try r.openAssetPack(id: "levels", version: 2)

        // Versions never go down: a late report of version 1 is kept, flagged.
        r.assetPackStatusUpdate(.finished(pack: "levels", version: 1))
        #expect(try ledger.events().last?.anomaly == .assetPackVersionDown)
        #expect(ledger.currentState.assetPack("levels")?.versionOnDevice == 2)

        // A refund of the unlocking purchase is recorded against the pack's access.
        r.revokedEntitlements(productIdentifiers: ["com.example.book"])
        pack = try #require(ledger.currentState.assetPack("levels"))
        #expect(!pack.unlocked && !pack.usable && pack.revokedTransactions == ["t-book"])
        let revoked = #expect(throws: LedgerError.self) { try r.openAssetPack(id: "levels", version: 2) }
        #expect(revoked?.message.contains("t-book") == true, "\(String(describing: revoked))")

        // A free pack, then removed: no longer on the device, opening it refused.
        try r.assetPackPublished(id: "intro", version: 5)
        r.assetPackStatusUpdate(.finished(pack: "intro", version: 5))
        try r.openAssetPack(id: "intro", version: 3)
        r.assetPackRemoved(id: "intro")
        #expect(ledger.currentState.assetPack("intro")?.versionOnDevice == nil)
        #expect(throws: LedgerError.self) { try r.openAssetPack(id: "intro", version: 5) }
        #expect(ledger.currentState.assetPacks().map(\.pack) == ["intro", "levels"])
        #expect(errors.all.isEmpty, "\(errors.all)")
        #expect(try ledger.verify().isValid, "projections equal a rebuild; every event replays")
    }

    /// Each Apple-only file's every `#if` holds on exactly the declared platforms where its APIs
    /// exist (Apple's availability: SKDownload and the queue's download calls are unavailable on
    /// visionOS; `didRevokeEntitlementsForProductIdentifiers` on tvOS; `shouldAddStorePayment` on
    /// watchOS; Background Assets' asset packs on watchOS; StoreKit 2 exists everywhere the
    /// package goes). A nested `#if` holds where it and the conditions around it hold.
    @Test func everyAppleOnlyFileCompilesOnTheDeclaredPlatformsWhereItsAPIsExist() throws {
        let manifest = try String(contentsOf: packageRoot.appending(path: "Package.swift"), encoding: .utf8)
        let declared = Set(["macOS", "iOS", "tvOS", "watchOS", "visionOS"].filter { manifest.contains(".\($0)(.v") })
        #expect(declared == ["macOS", "iOS", "tvOS", "watchOS", "visionOS"])
        // Each file's `#if` lines in order, with where the API each guards exists.
        let expected: [String: [Set<String>]] = [
            // paymentQueue(_:didRevokeEntitlementsForProductIdentifiers:) needs no guard of its own:
            // tvOS has it too (from 14).
            "PaymentQueueRecorder.swift": [
                ["macOS", "iOS", "tvOS", "watchOS"],  // SKPaymentQueue with SKDownload
                ["macOS", "iOS", "tvOS"],  // paymentQueue(_:shouldAddStorePayment:for:)
            ],
            "StoreKit2Recorder.swift": [
                ["macOS", "iOS", "tvOS", "watchOS", "visionOS"],
                ["visionOS"],  // UIKit, for the UIScene a purchase confirms in
                ["visionOS"],  // Product.purchase(confirmIn:options:) (its #else: purchase(options:), every other)
                ["visionOS"],  // Transaction.reason and .storefront as they are (its #else: #available, storefrontCountryCode before)
            ],
            "AssetPackRecorder.swift": [["macOS", "iOS", "tvOS", "visionOS"]],  // AssetPackManager
            "ProductViewRecorder.swift": [
                ["macOS", "iOS", "visionOS"],  // the imports both blocks share
                ["macOS", "iOS"],  // SKStoreProductViewController and its delegate (not visionOS, tvOS, watchOS)
                ["iOS", "visionOS"],  // SKOverlay (iOS with Mac Catalyst, visionOS)
            ],
            "DeprecatedStoreKit.swift": [
                ["macOS", "iOS", "tvOS", "watchOS", "visionOS"],  // Transaction.offerType, .offerID
                ["macOS", "iOS", "tvOS", "watchOS"],  // SKDownload, storefrontCountryCode (the requirements)
                ["macOS", "iOS", "tvOS", "watchOS"],  // (the witnesses)
            ],
        ]
        for (file, platforms) in expected {
            let text = try String(contentsOf: packageRoot.appending(path: "Sources/PurchaseLedgerStoreKit/Apple/\(file)"), encoding: .utf8)
            // The conditions these files use, read as the platform table's test reads them.
            func holds(_ condition: Substring, on platform: String) -> Bool { StoreKitPlatformTests.holds(String(condition), on: platform) }
            var enclosing: [Substring] = []
            var seen: [Set<String>] = []
            for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces)[...] }) {
                if line.hasPrefix("#if ") {
                    enclosing.append(line.dropFirst(4))
                    seen.append(Set(declared.filter { platform in enclosing.allSatisfy { holds($0, on: platform) } }))
                } else if line.hasPrefix("#endif") {
                    enclosing.removeLast()
                }
            }
            #expect(seen == platforms, "\(file)")
        }
    }

    @Test func theAppleOnlyFilesAreThinGuardedAndParse() throws {
        let folder = packageRoot.appending(path: "Sources/PurchaseLedgerStoreKit/Apple")
        let files = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasSuffix(".swift") }.sorted()
        #expect(files == ["AssetPackRecorder.swift", "DeprecatedStoreKit.swift", "PaymentQueueRecorder.swift", "ProductViewRecorder.swift", "StoreKit2Recorder.swift"])
        for file in files {
            let path = folder.appending(path: file).path
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text.contains("#if canImport(StoreKit)") || text.contains("canImport(BackgroundAssets)"), "\(file) is guarded")
            #expect(text.split(separator: "\n").count < 200, "\(file) stays thin")
            let process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["swiftc", "-parse", path]
            let errors = Pipe()
            process.standardError = errors
            try process.run()
            process.waitUntilExit()
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            #expect(process.terminationStatus == 0, "swiftc -parse \(file): \(message)")
        }
        // Nothing Linux-only in the library.
        for target in ["PurchaseLedger", "PurchaseLedgerStoreKit"] {
            let root = packageRoot.appending(path: "Sources/\(target)").path
            for case let file as String in FileManager.default.enumerator(atPath: root) ?? NSEnumerator() where file.hasSuffix(".swift") {
                let text = try String(contentsOfFile: "\(root)/\(file)", encoding: .utf8)
                #expect(!text.contains("import Glibc") && !text.contains("/proc/"), "\(target)/\(file)")
            }
        }
    }
}
