import CustomDump
import Testing
@testable import PurchaseLedger

/// One test per rule of the contract, accepting and refusing, with the rule's name asserted.
/// These use the pure reducer; `LedgerTests` checks the same through storage.
@Suite struct ReducerTests {
    /// A catalog: p1 with content c1 (related to p1-ipad), a consumable, and p1-ipad.
    func catalog() throws -> LedgerState {
        var s = LedgerState()
        try reduceAll(
            [
                E.product("p1", contents: [("c1", "1.0")], related: ["p1-ipad"]),
                E.product("p1-ipad", contents: [("c1", "1.0")]),
                E.product("coins", kind: .consumable),
            ], into: &s)
        return s
    }

    /// t1 purchased with downloads d1 (and d2 when asked).
    func purchased(downloads: [String] = ["d1"]) throws -> LedgerState {
        var s = try catalog()
        try reduceAll([E.queued("t1"), E.purchased("t1", downloads: downloads)], into: &s)
        return s
    }

    @Test func unknownProduct() throws {
        var s = try catalog()
        expectRefused(.unknownProduct, E.queued("t1", "nope"), in: s)
        expectRefused(.unknownProduct, E.deleted("nope"), in: s)
        #expect(try Reducer.reduce(&s, E.purchased("t9", product: "nope")) == .anomaly(.unknownProduct))
        #expect(try Reducer.reduce(&s, E.published("nope", "c1", "2.0")) == .anomaly(.unknownProduct))
        #expect(try Reducer.reduce(&s, E.queued("t1", "p1")) == .applied)
        #expect(s.transactions["t9"] == nil)
    }

    @Test func duplicateTransaction() throws {
        var s = try catalog()
        #expect(try Reducer.reduce(&s, E.queued("t1")) == .applied)
        #expect(try Reducer.reduce(&s, E.queued("t1")) == .ignored, "an identical repeat is a no-op")
        expectRefused(.duplicateTransaction, E.queued("t1", "coins"), in: s)
        expectRefused(.duplicateTransaction, E.queued("t1", quantity: 2), in: s)
        #expect(try Reducer.reduce(&s, E.purchased("t1", product: "coins")) == .anomaly(.duplicateTransaction))
        #expect(try Reducer.reduce(&s, E.purchased("t1")) == .applied)
        #expect(try Reducer.reduce(&s, E.restored("t1", original: "t0")) == .anomaly(.duplicateTransaction))
    }

    @Test func finishWhilePurchasingAndDeferred() throws {
        var s = try catalog()
        try reduceAll([E.queued("t1"), E.queued("t2", "coins"), E.deferred("t2")], into: &s)
        expectRefused(.finishWhilePurchasing, E.finished("t1"), in: s)
        expectRefused(.finishWhileDeferred, E.finished("t2"), in: s)
        try reduceAll([E.purchased("t1"), E.purchased("t2")], into: &s)
        #expect(try Reducer.reduce(&s, E.finished("t1")) == .applied)
        #expect(try Reducer.reduce(&s, E.finished("t2")) == .applied)
    }

    @Test func alreadyFinishedComesFirst() throws {
        var s = try purchased()
        try reduceAll([E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")], into: &s)
        expectRefused(.alreadyFinished, E.finished("t1"), in: s)
        // Finishing a failed or revoked transaction is accepted.
        try reduceAll([E.queued("t2", "coins"), E.failed("t2")], into: &s)
        #expect(try Reducer.reduce(&s, E.finished("t2")) == .applied)
    }

    @Test func finishBeforeCopyOutNamesTheDownloads() throws {
        var s = try purchased(downloads: ["d1", "d2"])
        try reduceAll([E.start("d1"), E.start("d2"), E.done("d1"), E.done("d2"), E.copied("d2")], into: &s)
        do {
            _ = try Reducer.reduce(&s, E.finished("t1"))
            Issue.record("finish accepted")
        } catch {
            #expect(error.rule == .finishBeforeCopyOut)
            #expect(error.downloads == ["d1"])
            #expect(error.event == E.finished("t1"))
            #expect(error.message.contains("d1"))
        }
        #expect(s.transactions["t1"]?.finished == false, "a refused command changes nothing")
        // discardContent: accepted, and the content is recorded as discarded.
        #expect(try Reducer.reduce(&s, E.finished("t1", discard: true)) == .applied)
        #expect(s.downloads["d1"]?.discarded == true)
        #expect(s.downloads["d1"]?.copiedOut == false)
        #expect(s.downloads["d2"]?.discarded == false)
        #expect(s.transactions["t1"]?.discardedContent == true)
    }

    @Test func earlyFinishCancelsStartedDownloadsOnly() throws {
        var s = try purchased(downloads: ["d1", "d2", "d3"])
        try reduceAll([E.start("d1"), E.start("d2"), E.progress("d2", 0.5), E.start("d3"), E.pause("d3")], into: &s)
        // Add a never-started download: d4 of another delivery is not involved; d1..d3 are started.
        let planned = Reducer.plan(s, E.finished("t1"))
        #expect(planned.map(\.type) == [.downloadCancelled, .downloadCancelled, .downloadCancelled, .transactionFinished])
        #expect(planned.dropLast().allSatisfy { if case .downloadCancelled(_, .transactionFinished) = $0.body { true } else { false } })
        #expect(planned.allSatisfy { $0.at == E.finished("t1").at }, "cancellations carry the finish's time")
        try reduceAll([E.finished("t1")], into: &s)
        for d in ["d1", "d2", "d3"] {
            #expect(s.downloads[d]?.state == .cancelled)
            #expect(s.downloads[d]?.lost == true)
        }
        #expect(s.downloads["d2"]?.progress == 0.5, "cancelling keeps the last progress")

        var t = try purchased(downloads: ["d1", "d2"])
        try reduceAll([E.start("d1"), E.done("d1"), E.copied("d1")], into: &t)
        #expect(Reducer.plan(t, E.finished("t1")).count == 1, "a never-started download is not cancelled")
        try reduceAll([E.finished("t1")], into: &t)
        #expect(t.downloads["d2"]?.state == .waiting)
        #expect(t.downloads["d2"]?.started == false)
    }

    @Test func contentURLAfterFinish() throws {
        var s = try purchased(downloads: ["d1", "d2"])
        try reduceAll([E.start("d1"), E.start("d2"), E.done("d1")], into: &s)
        #expect(s.contentURL(for: "d1") == "file:///cache/d1/")
        try reduceAll([E.finished("t1", discard: true)], into: &s)
        #expect(s.contentURL(for: "d1") == nil, "no URL after finish")
        #expect(s.downloads["d1"]?.contentURL == nil)
        expectRefused(.contentURLAfterFinish, E.copied("d1"), in: s)
        #expect(try Reducer.reduce(&s, E.done("d2")) == .anomaly(.contentURLAfterFinish), "a late finish is an anomaly")
        #expect(s.downloads["d2"]?.state == .cancelled, "and changes nothing")
    }

    @Test func downloadAfterFinish() throws {
        var s = try purchased(downloads: ["d1", "d2"])
        try reduceAll([E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")], into: &s)
        expectRefused(.downloadAfterFinish, E.start("d2"), in: s)
        expectRefused(.downloadAfterFinish, E.pause("d2"), in: s)
        expectRefused(.downloadAfterFinish, E.resume("d2"), in: s)
        expectRefused(.downloadAfterFinish, E.cancel("d2"), in: s)
        #expect(try Reducer.reduce(&s, E.progress("d2", 0.2)) == .anomaly(.downloadAfterFinish))
        #expect(try Reducer.reduce(&s, E.dlFailed("d2")) == .anomaly(.downloadAfterFinish))
        #expect(s.anomalies == 2)
    }

    @Test func illegalDownloadTransitions() throws {
        var s = try purchased(downloads: ["d1"])
        expectRefused(.illegalDownloadTransition, E.pause("d1"), in: s)
        expectRefused(.illegalDownloadTransition, E.cancel("d1"), in: s)
        expectRefused(.illegalDownloadTransition, E.resume("d1"), in: s)
        #expect(try Reducer.reduce(&s, E.progress("d1", 0.1)) == .anomaly(.illegalDownloadTransition), "progress before start")
        #expect(try Reducer.reduce(&s, E.start("d1")) == .applied)
        #expect(s.downloads["d1"]?.state == .waiting)
        expectRefused(.illegalDownloadTransition, E.start("d1"), in: s)
        #expect(try Reducer.reduce(&s, E.progress("d1", 0.3)) == .applied)
        #expect(s.downloads["d1"]?.state == .active)
        expectRefused(.illegalDownloadTransition, E.resume("d1"), in: s)
        #expect(try Reducer.reduce(&s, E.pause("d1")) == .applied)
        #expect(try Reducer.reduce(&s, E.progress("d1", 0.4)) == .anomaly(.illegalDownloadTransition), "stale progress while paused")
        #expect(try Reducer.reduce(&s, E.resume("d1")) == .applied)
        #expect(s.downloads["d1"]?.state == .waiting, "resume queues it again")
        #expect(try Reducer.reduce(&s, E.done("d1")) == .applied)
        #expect(s.downloads["d1"]?.progress == 1)
        #expect(try Reducer.reduce(&s, E.done("d1")) == .anomaly(.illegalDownloadTransition), "a second finish is not a redelivery")
        expectRefused(.illegalDownloadTransition, E.start("d1"), in: s)
    }

    @Test func retryAfterFailureStartsAtZero() throws {
        var s = try purchased(downloads: ["d1"])
        try reduceAll([E.start("d1"), E.progress("d1", 0.6), E.dlFailed("d1")], into: &s)
        #expect(s.downloads["d1"]?.state == .failed)
        #expect(s.downloads["d1"]?.progress == 0.6, "failing keeps the last progress")
        #expect(try Reducer.reduce(&s, E.start("d1")) == .applied)
        #expect(s.downloads["d1"]?.progress == 0)
        #expect(s.downloads["d1"]?.attempts == 2)
    }

    @Test func startNeedsAPurchasedNotRevokedTransaction() throws {
        var s = try catalog()
        try reduceAll([E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.revoked("t1")], into: &s)
        expectRefused(.illegalDownloadTransition, E.start("d1"), in: s)
    }

    @Test func copyOutBeforeFinished() throws {
        var s = try purchased()
        try reduceAll([E.start("d1"), E.progress("d1", 0.99)], into: &s)
        expectRefused(.copyOutBeforeFinished, E.copied("d1"), in: s)
        try reduceAll([E.done("d1")], into: &s)
        #expect(try Reducer.reduce(&s, E.copied("d1")) == .applied)
    }

    @Test func contentKeyMismatchAndStandaloneDownloads() throws {
        var s = LedgerState()
        #expect(try Reducer.reduce(&s, E.registered("https://k/1", "k1")) == .applied)
        #expect(try Reducer.reduce(&s, E.registered("https://k/1", "k1")) == .ignored)
        expectRefused(.contentKeyMismatch, E.registered("https://k/1", "k2"), in: s)
        #expect(s.registeredURLs["https://k/1"] == "k1")
        // Finish and copy-out rules do not need a transaction; copy-out still needs a finished download.
        expectRefused(.copyOutBeforeFinished, E.copied("k1"), in: s)
        try reduceAll([E.start("k1"), E.done("k1"), E.copied("k1")], into: &s)
        #expect(s.downloads["k1"]?.copiedOut == true)
        #expect(s.copiedContent.isEmpty, "standalone content creates no owned content")
    }

    @Test func restoreInProgressAndNoRestoreInProgress() throws {
        var s = try catalog()
        #expect(try Reducer.reduce(&s, E.restoreCompleted()) == .anomaly(.noRestoreInProgress))
        #expect(try Reducer.reduce(&s, E.restoreStarted()) == .applied)
        expectRefused(.restoreInProgress, E.restoreStarted(), in: s)
        #expect(try Reducer.reduce(&s, E.restoreFailed()) == .applied)
        #expect(try Reducer.reduce(&s, E.restoreFailed()) == .anomaly(.noRestoreInProgress))
        #expect(try Reducer.reduce(&s, E.restoreStarted()) == .applied)
    }

    @Test func illegalTransactionTransitions() throws {
        var s = try catalog()
        try reduceAll([E.queued("t1"), E.purchased("t1"), E.queued("t2"), E.failed("t2")], into: &s)
        #expect(try Reducer.reduce(&s, E.failed("t1")) == .anomaly(.illegalTransactionTransition), "failed after purchased")
        #expect(try Reducer.reduce(&s, E.deferred("t1")) == .anomaly(.illegalTransactionTransition), "stale deferred")
        #expect(try Reducer.reduce(&s, E.revoked("t2")) == .anomaly(.illegalTransactionTransition), "revoking a failed one")
        #expect(try Reducer.reduce(&s, E.purchased("t2")) == .anomaly(.illegalTransactionTransition))
        #expect(s.transactions["t1"]?.state == .purchased)
        #expect(s.transactions["t2"]?.state == .failed)
    }

    @Test func duplicateDownload() throws {
        var s = try purchased(downloads: ["d1"])
        try reduceAll([E.queued("t2")], into: &s)
        #expect(try Reducer.reduce(&s, E.purchased("t2", downloads: ["d1"])) == .anomaly(.duplicateDownload))
        #expect(s.transactions["t2"]?.state == .purchasing)
        #expect(try Reducer.reduce(&s, E.purchased("t2", downloads: ["d2", "d2"])) == .anomaly(.duplicateDownload))
        #expect(try Reducer.reduce(&s, E.purchased("t2", downloads: ["d2"])) == .applied)
    }

    @Test func malformedReferencesAreRejected() throws {
        var s = try catalog()
        for e in [E.finished("nope"), E.deferred("nope"), E.purchased("nope"), E.start("nope"), E.progress("nope", 0.1), E.copied("nope")] {
            #expect(throws: LedgerError.self) { _ = try Reducer.reduce(&s, e) }
            do { _ = try Reducer.reduce(&s, e) } catch { #expect(error.code == .malformedInput) }
        }
    }

    @Test func redeliveredObservationsChangeNothing() throws {
        var s = try purchased(downloads: ["d1"])
        let before = s
        for _ in 0..<20 {
            #expect(try Reducer.reduce(&s, E.purchased("t1", downloads: ["d1"])) == .unchanged)
        }
        expectNoDifference(s, before)
        #expect(try Reducer.reduce(&s, E.purchased("t1", downloads: ["d9"])) == .anomaly(.duplicateTransaction), "different downloads contradict the record")
    }

    @Test func ownershipRelatedProductsRefundAndRestore() throws {
        var s = try catalog()
        #expect(!s.owns(product: "p1"))
        try reduceAll([E.queued("t1", "p1-ipad"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")], into: &s)
        #expect(s.owns(product: "p1-ipad"))
        #expect(s.owns(product: "p1"), "related products work both ways (declared on p1)")
        #expect(!s.owns(product: "coins"))
        #expect(s.ownedContent.map(\.content) == ["c1"])
        try reduceAll([E.revoked("t1")], into: &s)
        #expect(!s.owns(product: "p1-ipad"))
        #expect(s.ownedContent.isEmpty, "a refund hides owned content")
        try reduceAll([E.restored("t2", original: "t1", product: "p1-ipad")], into: &s)
        #expect(s.ownedContent.map(\.transaction) == ["t1"], "a restore shows it again")
    }

    @Test func versionsUpdatesAndLatestCopyOutWins() throws {
        #expect(ContentVersion("1.10")!.isNewer(than: ContentVersion("1.9")!))
        #expect(ContentVersion("1")!.compare(ContentVersion("1.0")!) == 0)
        #expect(ContentVersion("2.0.13")!.compare(ContentVersion("2.0.9")!) > 0)
        let ordered = [
            ("0.9", "1"), ("1", "1.0.1"), ("1.2", "1.10"), ("9", "10"), ("1.2.3", "1.3"),
            ("123456789012345678901234567889", "123456789012345678901234567890"), ("0.0.1", "0.1"),
        ]
        for (older, newer) in ordered {
            #expect(ContentVersion(older)!.compare(ContentVersion(newer)!) < 0, "\(older) < \(newer)")
            #expect(ContentVersion(newer)!.compare(ContentVersion(older)!) > 0, "\(newer) > \(older)")
        }
        for (a, b) in [("01.2", "1.2"), ("1.2.0.0", "1.2"), ("0", "0.0"), ("007", "7.000")] {
            #expect(ContentVersion(a)!.compare(ContentVersion(b)!) == 0, "\(a) == \(b)")
            #expect(ContentVersion(b)!.compare(ContentVersion(a)!) == 0, "\(b) == \(a)")
        }
        for bad in ["", "1.", ".1", "1..2", "v1", "1.a", "-1"] { #expect(ContentVersion(bad) == nil, "\(bad)") }

        var s = try purchased(downloads: ["d1"])
        try reduceAll([E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")], into: &s)
        let key = ContentKey(product: "p1", content: "c1")
        #expect(!s.updateAvailable(for: key))
        try reduceAll([E.published("p1", "c1", "1.10")], into: &s)
        #expect(s.updateAvailable(for: key))
        #expect(try Reducer.reduce(&s, E.published("p1", "c1", "1.9")) == .unchanged, "published versions only grow")
        try reduceAll([E.restored("t2", original: "t1", downloads: ["d2"], version: "1.10"), E.start("d2"), E.done("d2"), E.copied("d2", to: "new")], into: &s)
        #expect(!s.updateAvailable(for: key))
        #expect(s.copiedContent[key]?.destination == "new")
        try reduceAll([E.deleted("p1")], into: &s)
        #expect(s.ownedContent.isEmpty)
        #expect(try Reducer.reduce(&s, E.deleted("p1")) == .applied, "deleting when nothing is owned is accepted")
    }
}
