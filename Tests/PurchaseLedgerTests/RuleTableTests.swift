import CustomDump
import Foundation
import PurchaseLedgerTesting
import Testing
@testable import PurchaseLedger

/// One row per way of breaking a rule: the events before, the event that breaks it, the rule it
/// must name. The same table runs through the pure reducer and through a ledger file, and the one
/// policy is checked on every row: a command is refused and changes nothing, an observation is
/// stored, flagged with the rule. Every rule of the contract has at least one command row and,
/// where StoreKit can report it, one observation row.
struct RuleCase: Sendable, CustomTestStringConvertible {
    var rule: Rule
    var given: [Event]
    var breaking: Event
    var why: String

    var testDescription: String { "\(rule.name): \(breaking.type.name) \(why)" }

    /// Apple's statement of a 9.99 purchase of p1, signed by a chain made here.
    static let liarSigned: String = {
        let payload = SigningChain.payload(transaction: "2000000001", product: "p1", price: 9990, currency: "USD", signedDate: 1_709_280_002_000)
        return try! SigningChain().sign(payload)
    }()

    static let catalog = [
        E.product("p1", contents: [("c1", "1.0")], related: ["p1-ipad"]),
        E.product("p1-ipad", contents: [("c1", "1.0")]),
        E.product("coins", kind: .consumable),
    ]
    static let purchased = catalog + [E.queued("t1"), E.purchased("t1", downloads: ["d1", "d2"])]
    static let finished = purchased + [E.start("d1"), E.done("d1"), E.copied("d1"), E.finished("t1")]

    static let all: [RuleCase] = [
        RuleCase(rule: .unknownProduct, given: catalog, breaking: E.queued("t1", "nope"), why: "queued for an unregistered product"),
        RuleCase(rule: .unknownProduct, given: catalog, breaking: E.deleted("nope"), why: "deleting content of an unregistered product"),
        RuleCase(rule: .unknownProduct, given: catalog, breaking: E.purchased("t9", product: "nope"), why: "StoreKit reports an unregistered product"),
        RuleCase(rule: .duplicateTransaction, given: catalog + [E.queued("t1")], breaking: E.queued("t1", "coins"), why: "the same id for another product"),
        RuleCase(
            rule: .duplicateTransaction, given: catalog + [E.queued("t1")], breaking: E.purchased("t1", product: "coins"),
            why: "a purchase contradicting the queued one"),
        RuleCase(rule: .finishWhilePurchasing, given: catalog + [E.queued("t1")], breaking: E.finished("t1"), why: "before StoreKit said anything"),
        RuleCase(rule: .finishWhileDeferred, given: catalog + [E.queued("t1"), E.deferred("t1")], breaking: E.finished("t1"), why: "while Ask to Buy waits"),
        RuleCase(rule: .alreadyFinished, given: finished, breaking: E.finished("t1"), why: "a second finish"),
        RuleCase(
            rule: .finishBeforeCopyOut, given: purchased + [E.start("d1"), E.done("d1")], breaking: E.finished("t1"),
            why: "the content is still in the cache"),
        RuleCase(
            rule: .contentURLAfterFinish, given: purchased + [E.start("d1"), E.done("d1"), E.finished("t1", discard: true)],
            breaking: E.copied("d1"), why: "copying from a URL the finish invalidated"),
        RuleCase(
            rule: .contentURLAfterFinish, given: purchased + [E.start("d1"), E.start("d2"), E.done("d1"), E.finished("t1", discard: true)],
            breaking: E.done("d2"), why: "StoreKit finishes a download the finish cancelled"),
        RuleCase(rule: .downloadAfterFinish, given: finished, breaking: E.start("d2"), why: "starting a download of a finished transaction"),
        RuleCase(rule: .downloadAfterFinish, given: finished, breaking: E.progress("d2", 0.2), why: "progress of a finished transaction's download"),
        RuleCase(rule: .illegalDownloadTransition, given: purchased, breaking: E.pause("d1"), why: "pausing a download never started"),
        RuleCase(rule: .illegalDownloadTransition, given: purchased, breaking: E.progress("d1", 0.1), why: "progress before the start"),
        RuleCase(rule: .copyOutBeforeFinished, given: purchased + [E.start("d1"), E.progress("d1", 0.99)], breaking: E.copied("d1"), why: "at 99%"),
        RuleCase(
            rule: .contentKeyMismatch, given: [E.registered("https://k/1", "k1")], breaking: E.registered("https://k/1", "k2"),
            why: "one URL registered for two downloads"),
        RuleCase(rule: .restoreInProgress, given: catalog + [E.restoreStarted()], breaking: E.restoreStarted(), why: "a second restore at once"),
        RuleCase(rule: .noRestoreInProgress, given: catalog, breaking: E.restoreCompleted(), why: "StoreKit completes a restore never started"),
        RuleCase(
            rule: .illegalTransactionTransition, given: catalog + [E.queued("t1"), E.purchased("t1")], breaking: E.failed("t1"),
            why: "failed after purchased"),
        RuleCase(
            rule: .duplicateDownload, given: purchased + [E.queued("t2")], breaking: E.purchased("t2", downloads: ["d1"]),
            why: "a second transaction claims download d1"),
        RuleCase(
            rule: .unverifiedTransaction, given: catalog,
            breaking: Event(at: E.at(2), .transactionPurchased(transaction: "t9", product: "coins", terms: PurchaseTerms(unverified: "invalid signature"))),
            why: "StoreKit 2 could not verify its signature"),
        RuleCase(
            rule: .signedFieldsDiffer, given: catalog + [E.queued("t1")],
            breaking: Event(
                at: E.at(2),
                .transactionPurchased(
                    transaction: "t1", storeTransactionId: "2000000001",
                    terms: PurchaseTerms(price: "0.99", currency: "USD", signedTransaction: liarSigned))),
            why: "it books 0.99 where Apple's signed transaction says 9.99"),
        RuleCase(
            rule: .assetPackVersionDown, given: catalog + [E.packPublished("levels", 4), E.packBegan("levels", 4), E.packFinished("levels", 4)],
            breaking: E.packBegan("levels", 3), why: "an older version begins after version 4 finished"),
        RuleCase(
            rule: .assetPackNotReady, given: catalog + [E.packPublished("levels", 2), E.packBegan("levels", 2), E.packProgress("levels", 2, 0.5)],
            breaking: E.packOpened("levels", 2), why: "opened while still downloading"),
        RuleCase(
            rule: .assetPackNotReady,
            given: catalog + [
                E.packPublished("levels", 2, unlockedBy: ["p1"]), E.queued("t1"), E.purchased("t1"), E.packFinished("levels", 2), E.revoked("t1"),
            ],
            breaking: E.packOpened("levels", 2), why: "its unlocking purchase was refunded"),
        RuleCase(
            rule: .illegalDownloadTransition, given: catalog + [E.packPublished("levels", 2)], breaking: E.packPaused("levels", 2),
            why: "an asset pack paused before it began"),
        RuleCase(
            rule: .unknownProduct, given: catalog, breaking: E.packPublished("levels", 1, unlockedBy: ["nope"]),
            why: "an asset pack unlocked by an unregistered product"),
        RuleCase(rule: .productViewNotPresented, given: [], breaking: E.viewLoaded("v9"), why: "a store page loaded that was never presented"),
        RuleCase(rule: .productViewNotPresented, given: [], breaking: E.viewFailed("v9"), why: "a store page failed that was never presented"),
        RuleCase(rule: .productViewNotPresented, given: [], breaking: E.viewDismissed("v9"), why: "a store page dismissed that was never presented"),
        RuleCase(
            rule: .illegalProductViewTransition, given: [E.viewPresented("v1"), E.viewFailed("v1")], breaking: E.viewLoaded("v1"),
            why: "a store page loaded after it failed"),
        RuleCase(
            rule: .illegalProductViewTransition, given: [E.viewPresented("v1"), E.viewDismissed("v1")], breaking: E.viewLoaded("v1"),
            why: "a store page loaded after it was dismissed"),
        RuleCase(
            rule: .illegalProductViewTransition, given: [E.viewPresented("v1"), E.viewLoaded("v1")], breaking: E.viewFailed("v1"),
            why: "a store page failed after it loaded"),
        RuleCase(
            rule: .illegalProductViewTransition, given: [E.viewPresented("v1")], breaking: E.viewPresented("v1", item: "42"),
            why: "a view id presented again"),
        RuleCase(
            rule: .productViewOverlap, given: [E.viewPresented("v1")], breaking: E.viewPresented("v2", style: .overlay),
            why: "a second store page while one is on screen"),
    ]
}

@Suite struct RuleTableTests {
    @Test func everyRuleHasARow() {
        let covered = Set(RuleCase.all.map(\.rule))
        #expect(Set(Rule.all).subtracting(covered).isEmpty, "rules without a row: \(Set(Rule.all).subtracting(covered).map(\.name).sorted())")
    }

    /// docs/format.md lists every rule's stored code, as the code has them.
    @Test func theDocsListEveryRuleCode() throws {
        let text = try String(contentsOf: packageRoot.appending(path: "docs/format.md"), encoding: .utf8)
        let start = try #require(text.range(of: "<!-- rule codes -->")), end = try #require(text.range(of: "<!-- end rule codes -->"))
        let listed = text[start.upperBound..<end.lowerBound].replacingOccurrences(of: "\n", with: " ")
            .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: ".")) }
        #expect(listed == Rule.all.map { "\($0.code) \($0.name)" })
    }

    @Test func bothPoliciesAreExercised() {
        #expect(RuleCase.all.contains { $0.breaking.type.isCommand })
        #expect(RuleCase.all.contains { !$0.breaking.type.isCommand })
    }

    @Test(arguments: RuleCase.all)
    func inTheReducer(_ c: RuleCase) throws {
        var state = LedgerState()
        _ = try reduceAll(c.given, into: &state)
        if c.breaking.type.isCommand {
            expectRefused(c.rule, c.breaking, in: state)
        } else {
            var after = state
            // Disagreeing with its own signed transaction is applied as reported, and flagged.
            #expect(try Reducer.reduce(&after, c.breaking) == (c.rule == .signedFieldsDiffer || c.rule == .productViewOverlap ? .flagged(c.rule) : .anomaly(c.rule)))
            #expect(after.anomalies == state.anomalies + 1)
        }
    }

    @Test(arguments: RuleCase.all)
    func inALedgerFile(_ c: RuleCase) throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("rules.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        let before = try ledger.append(contentsOf: c.given).lastSeq
        if c.breaking.type.isCommand {
            let stateBefore = ledger.currentState
            let files = try [path, path + "-wal"].map { try Data(contentsOf: URL(fileURLWithPath: $0)) }
            do {
                _ = try ledger.append(c.breaking)
                Issue.record("\(c.breaking.type.name) accepted")
            } catch let error as LedgerError {
                #expect(error.code == .ruleViolation)
                #expect(error.rule == c.rule)
            }
            #expect(try ledger.lastSeq() == before)
            expectNoDifference(ledger.currentState, stateBefore)
            #expect(try [path, path + "-wal"].map { try Data(contentsOf: URL(fileURLWithPath: $0)) } == files, "a refused append writes nothing")
        } else {
            let stored = try ledger.append(c.breaking)
            #expect(stored.events.last?.anomaly == c.rule)
            #expect(stored.events.last?.event == c.breaking)
            #expect(try ledger.lastSeq() == stored.lastSeq)
            let reopened = try Ledger(path: path, configuration: testConfiguration())
            #expect(try reopened.events().last?.anomaly == c.rule, "the flag is stored, not recomputed")
        }
    }
}
