import Testing
@testable import PurchaseLedger

/// Real-world bugs from the research digest (section c), replayed through a ledger.
@Suite struct ScenarioTests {
    func ledger(_ dir: TemporaryDirectory) throws -> Ledger {
        let ledger = try Ledger(path: dir.path("s.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("p1", contents: [("c1", "1.0")]), E.product("coins", kind: .consumable)])
        return ledger
    }

    /// S1: an "atomic" purchase helper finishes right after starting the downloads (SwiftyStoreKit #566).
    @Test func finishingRightAfterStartingDownloads() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1"), E.purchased("t1", downloads: ["d1", "d2"]), E.start("d1"), E.start("d2")])
        let result = try l.append(E.finished("t1"))
        #expect(result.events.map(\.event.type) == [.downloadCancelled, .downloadCancelled, .transactionFinished])
        let automatic = result.events.prefix(2).allSatisfy { $0.appendedByLedger }
        #expect(automatic)
        let downloads = try l.downloads(transaction: "t1")
        #expect(downloads.allSatisfy { $0.state == .cancelled && $0.lost })
        #expect(try l.purchaseHistory().first?.contentLost == true)
    }

    /// S2: finishing while a download is active: the store cancels it and removes partial data.
    @Test func finishingWhileADownloadIsActive() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.progress("d1", 0.42)])
        try l.append(E.finished("t1"))
        let d = try #require(try l.downloads(transaction: "t1").first)
        #expect(d.state == .cancelled)
        #expect(d.progress == 0.42)
        // The store's late progress report is kept, flagged.
        #expect(try l.append(E.progress("d1", 0.43, at: 9)).events.first?.anomaly == .downloadAfterFinish)
    }

    /// S3: finish, then copy from contentURL: the files are already deleted.
    @Test func finishingBeforeCopyOutAndCopyingAfterFinish() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.done("d1")])
        expectViolation(.finishBeforeCopyOut) { try l.append(E.finished("t1")) }
        try l.append(E.finished("t1", discard: true))
        expectViolation(.contentURLAfterFinish) { try l.append(E.copied("d1")) }
        #expect(try l.contentURL(for: "d1") == nil)
    }

    /// S7: the app is killed mid-purchase; at relaunch a generic loop finishes every queued transaction.
    @Test func thePurchasingFinishCrash() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(E.queued("t1"))
        expectViolation(.finishWhilePurchasing) { try l.append(E.finished("t1")) }
        #expect(try l.lastSeq() == 3, "nothing was written")
        try l.append(contentsOf: [E.purchased("t1"), E.finished("t1")])
    }

    /// S9 / S18: an unfinished purchase redelivered at every launch, 25 times.
    @Test func redeliveryOfAnUnfinishedTransactionManyTimes() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1", "coins", quantity: 5), E.purchased("t1")])
        for launch in 0..<25 { try l.append(E.purchased("t1", at: 100 + launch)) }
        try l.append(E.finished("t1", at: 200))
        try l.append(E.purchased("t1", at: 201))  // and once more after the finish
        #expect(try l.transactions().count == 1)
        #expect(try l.purchaseHistory().count == 1, "never a duplicate purchase in a report")
        #expect(l.currentState.anomalies == 0, "redeliveries are not anomalies")
        #expect(try l.lastSeq() == 2 + 2 + 25 + 2)
    }

    /// S12: a second restore delivers the same restored transaction again.
    @Test func aDuplicateRestore() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.restoreStarted(), E.restored("t2", original: "t1", downloads: ["t2-d1"]), E.restoreCompleted()])
        try l.append(contentsOf: [E.restoreStarted(at: 5), E.restored("t2", original: "t1", downloads: ["t2-d1"], at: 6), E.restoreCompleted(at: 7)])
        #expect(try l.transactions().count == 1)
        #expect(try l.downloads().count == 1)
        // The same id delivered with other downloads contradicts the record.
        #expect(try l.append(E.restored("t2", original: "t1", downloads: ["t2-d9"], at: 8)).events.first?.anomaly == .duplicateTransaction)
    }

    /// S15: Ask to Buy defers the purchase; approval arrives at a later launch.
    @Test func aDeferredThenApprovedPurchase() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1"), E.deferred("t1")])
        #expect(try !l.owns(product: "p1"), "deferred never grants content")
        expectViolation(.finishWhileDeferred) { try l.append(E.finished("t1")) }
        try l.append(contentsOf: [E.purchased("t1", at: 86_400), E.finished("t1", at: 86_401)])
        #expect(try l.owns(product: "p1"))
        #expect(try l.transaction("t1")?.wasDeferred == true)
    }

    /// A refund: ownership and owned content go; the history keeps the purchase, revoked.
    @Test func aRefund() throws {
        let dir = try TemporaryDirectory()
        let l = try ledger(dir)
        try l.append(contentsOf: [E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")])
        #expect(try l.ownedContent().count == 1)
        try l.append(E.revoked("t1"))
        #expect(try !l.owns(product: "p1"))
        #expect(try l.ownedContent().isEmpty)
        let entry = try #require(try l.purchaseHistory().first)
        #expect(entry.outcome == "revoked")
        #expect(entry.transaction.revokedAt != nil)
        #expect(try l.append(E.revoked("t1", at: 99)).events.first?.anomaly == nil, "a redelivered refund changes nothing")
    }
}
