import Testing
@testable import PurchaseLedger

/// The example of replaying a user's ledger into an app's own observer code.
///
/// An app's observer finishes every purchased transaction as soon as the store reports it (the
/// "atomic purchase helper" of SwiftyStoreKit #566). Replaying the user's recorded ledger into it
/// reproduces the report "I bought the chapter but it is not there": the finish came while the
/// download was running, and the store cancelled it.
@Suite struct ObserverReplayTests {
    final class AppObserver: PaymentQueueReplayObserver {
        var log: [String] = []
        var lostContent: [String] = []

        func updatedTransactions(_ transactions: [TransactionRecord], step: ReplayStep) {
            for t in transactions { log.append("\(step.event.seq) transaction \(t.transaction) \(t.state.rawValue)") }
        }

        func updatedDownloads(_ downloads: [DownloadRecord], step: ReplayStep) {
            for d in downloads {
                log.append("\(step.event.seq) download \(d.download) \(d.state.rawValue)\(step.event.appendedByLedger ? " (by the ledger)" : "")")
                if d.lost { lostContent.append(d.download) }
            }
        }

        func removedTransactions(_ transactions: [TransactionRecord], step: ReplayStep) {
            for t in transactions { log.append("\(step.event.seq) removed \(t.transaction)") }
        }

        func restoreCompletedTransactionsFinished(step: ReplayStep) { log.append("\(step.event.seq) restore finished") }
    }

    @Test func replayingAUsersLedgerIntoTheAppsObserver() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("user.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [
            E.product("p1", contents: [("c1", "1.0")]),
            E.queued("t1"), E.purchased("t1", downloads: ["t1-d1"]), E.start("t1-d1"), E.progress("t1-d1", 0.3), E.finished("t1"),
            E.restoreStarted(at: 20), E.restoreCompleted(at: 21),
        ])
        let observer = AppObserver()
        try ledger.replay(into: observer)
        #expect(
            observer.log == [
                "2 transaction t1 purchasing", "3 transaction t1 purchased", "4 download t1-d1 waiting", "5 download t1-d1 active",
                "6 download t1-d1 cancelled (by the ledger)", "7 removed t1", "9 restore finished",
            ])
        #expect(observer.lostContent == ["t1-d1"])

        // Stopping at any seq: the state the observer had seen by then.
        let early = AppObserver()
        try ledger.replay(into: early, through: 4)
        #expect(early.log.last == "4 download t1-d1 waiting")
    }

    @Test func theGettingStartedExampleRuns() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("purchases.ledger"))
        func at(_ text: String) throws -> Timestamp { try Timestamp.parse(text) }
        try ledger.append(contentsOf: [
            Event(
                at: try at("2024-03-01T08:00:00Z"),
                .productRegistered(
                    ProductRegistration(
                        product: "com.example.book1", kind: .nonConsumable, price: "4.99", currency: "USD", downloadable: true,
                        contents: [ContentSpec(content: "book1-chapter1", contentVersion: ContentVersion("1.0")!, contentLength: 1_048_576)]))),
            Event(at: try at("2024-03-01T09:00:00Z"), .paymentQueued(transaction: "t1", product: "com.example.book1", quantity: 1, user: "u1")),
            Event(
                at: try at("2024-03-01T09:00:05Z"),
                .transactionPurchased(
                    transaction: "t1", product: nil, user: nil, storeTransactionId: "1000000001",
                    downloads: [DownloadSpec(download: "t1-d1", content: "book1-chapter1", contentVersion: ContentVersion("1.0")!, contentLength: 1_048_576)])),
            Event(at: try at("2024-03-01T09:00:06Z"), .downloadStarted(download: "t1-d1")),
            Event(at: try at("2024-03-01T09:00:09Z"), .downloadFinished(download: "t1-d1", contentURL: "file:///.../Contents/")),
        ])
        expectViolation(.finishBeforeCopyOut) {
            try ledger.append(Event(at: try at("2024-03-01T09:00:10Z"), .transactionFinished(transaction: "t1", discardContent: false)))
        }
        #expect(try ledger.contentURL(for: "t1-d1") == "file:///.../Contents/")
        try ledger.append(contentsOf: [
            Event(at: try at("2024-03-01T09:00:11Z"), .contentCopiedOut(download: "t1-d1", destination: "Documents/book1", checksum: nil, bytesCopied: nil)),
            Event(at: try at("2024-03-01T09:00:12Z"), .transactionFinished(transaction: "t1", discardContent: false)),
        ])
        #expect(try ledger.owns(product: "com.example.book1"))
        #expect(try ledger.ownedContent().map(\.destination) == ["Documents/book1"])
        #expect(try ledger.contentURL(for: "t1-d1") == nil)
        #expect(try ledger.state(atSeq: 3).transactions["t1"]?.state == .purchased)
        var seen: [String] = []
        try ledger.forEachEvent(ofTransaction: "t1") { e in
            seen.append(e.event.type.name)
            return true
        }
        #expect(seen == ["paymentQueued", "transactionPurchased", "downloadStarted", "downloadFinished", "contentCopiedOut", "transactionFinished"])
    }
}
