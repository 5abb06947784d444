import ArgumentParser
import Foundation
import PurchaseLedger

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Create a ledger of realistic simulated activity and tour what the tool shows.",
        discussion: """
            Two users buy books, coins, an atlas and a season pass: downloads pause, fail and are retried, \
            Ask to Buy defers a purchase, an app bug finishes a transaction while its downloads run (the ledger \
            cancels them itself), a purchase is refunded, a content update is published and restored. Then it \
            tries to finish before copying content out, which is refused; the season pass unlocks an \
            Apple-hosted asset pack, whose version 2 the game tries to open too early, which is refused; and it \
            prints stats, a timeline, a replay at an earlier point, a report and a clean verify.

            Example:
              purchase-ledger demo            # writes ./demo.ledger
              purchase-ledger demo /tmp/x.ledger --force
            """)

    static let defaultPath = "demo.ledger"

    @Argument(help: "Where to write the demo ledger.", completion: .file(extensions: ["ledger"]))
    var ledger: String = DemoCommand.defaultPath
    @Flag(help: "Replace the file if it exists (./demo.ledger is always replaced).") var force = false

    func run() async throws {
        let console = Console.current
        let fm = FileManager.default
        if fm.fileExists(atPath: ledger) {
            guard force || (ledger as NSString).lastPathComponent == DemoCommand.defaultPath else {
                throw ValidationError("\(ledger) exists; pass --force to replace it")
            }
            for suffix in ["", "-wal", "-shm"] { try? fm.removeItem(atPath: ledger + suffix) }
        }
        let store = try Ledger(path: ledger)
        func heading(_ text: String) {
            console.print("")
            console.print(console.bold("== \(text)"))
        }
        func session(_ title: String, _ lines: [String]) throws {
            let input = try JSONLinesInput(bytes: Array(lines.joined(separator: "\n").utf8))
            let result = try store.appendJSONLines(input)
            let automatic = result.events.filter(\.appendedByLedger)
            let anomalies = result.events.filter { $0.anomaly != nil }
            var note = "  \(title): \(result.events.count) events stored"
            if !automatic.isEmpty { note += ", " + console.yellow("\(automatic.count) downloads cancelled by the ledger itself") }
            if !anomalies.isEmpty { note += ", " + console.yellow("anomaly \(anomalies.map { $0.anomaly!.name }.joined(separator: ", "))") }
            console.print(note)
        }

        console.print(console.bold("purchase-ledger demo") + ": an audit log of in-app purchases and their hosted-content downloads, in \(ledger)")
        heading("1. Recording a week of a store")
        for (title, lines) in DemoScenario.sessions { try session(title, lines) }

        heading("2. The rules catch what real apps get wrong")
        /// An event the rules must refuse, with what it shows.
        func refused(_ line: String, _ what: String) throws {
            console.print("  \(what):")
            do {
                try store.append(try JSONLines.decode(line))
                console.print("  unexpected: it was accepted")
            } catch let error as LedgerError {
                console.print("  " + console.red("refused") + " \(error.rule?.name ?? error.code.description): \(error.message)")
            }
        }
        let before = try store.lastSeq()
        try refused(DemoScenario.prematureFinish, "The app tries to finish restored transaction t7 right after its download finished")
        console.print("  The ledger is unchanged (last seq \(try store.lastSeq()), as before: \(before)). The store would have deleted the file.")
        try session("the app copies the content out, then finishes", DemoScenario.properFinish)
        try session("the season pass unlocks an Apple-hosted asset pack: version 1 downloads, version 2 is published", DemoScenario.assetPack)
        try refused(DemoScenario.earlyPackOpen, "The game opens asset pack season-levels at version 2 while version 2 is still downloading")
        try session(
            "the app shows the App Store page of its companion app: the sheet fails to load (offline), the overlay later loads",
            DemoScenario.productViews)

        heading("3. stats")
        try await run(StatsCommand.self, [ledger])
        heading("4. timeline --transaction t5   (the early finish: both downloads cancelled, a late progress flagged)")
        try await run(TimelineCommand.self, [ledger, "--transaction", "t5"])
        heading("5. replay --at 49   (before the refund of t3: the atlas is still owned)")
        let early = try store.state(atSeq: 49)
        console.print(
            "  at seq 49, t3 is \(early.transactions["t3"]!.state.rawValue)\(early.transactions["t3"]!.revoked ? ", revoked" : ""); owned content: "
                + early.ownedContent.map { "\($0.content) \($0.contentVersion)" }.joined(separator: ", "))
        let now = store.currentState
        console.print(
            "  now, t3 is revoked: \(now.transactions["t3"]!.revoked); owned content: "
                + now.ownedContent.map {
                    "\($0.content) \($0.contentVersion)\(now.updateAvailable(for: ContentKey(product: $0.product, content: $0.content)) ? " (update available)" : "")"
                }.joined(separator: ", "))
        for pack in now.assetPacks() {
            console.print(
                "  asset pack \(pack.pack): version \(pack.versionOnDevice.map(String.init) ?? "none") on the device"
                    + (pack.updateAvailable ? ", version \(pack.publishedVersion!) published (update available)" : "")
                    + ", unlocked by \(pack.unlockedBy.joined(separator: ", ")): \(pack.usable ? "usable" : "not usable")")
        }
        heading("6. report --user u-alice")
        try await run(ReportCommand.self, [ledger, "--user", "u-alice"])
        heading("7. report --view product-views   (the App Store pages the app showed)")
        try await run(ReportCommand.self, [ledger, "--view", "product-views"])
        heading("8. verify")
        try await run(VerifyCommand.self, [ledger])
        console.print("")
        console.print("Try: purchase-ledger replay \(ledger) --first-anomaly   |   purchase-ledger events \(ledger) --transaction t5   |   purchase-ledger --help")
    }

    private func run<C: ParsableCommand>(_ command: C.Type, _ arguments: [String]) async throws {
        var parsed = try C.parse(arguments)
        if var async = parsed as? any AsyncParsableCommand {
            try await async.run()
        } else {
            try parsed.run()
        }
    }
}

/// The demo's events, session by session, as the app and the store would record them.
enum DemoScenario {
    static let catalog = [
        #"{"type":"productRegistered","at":"2024-03-01T08:00:00.000Z","product":"com.example.book1","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"contents":[{"content":"book1-chapter1","contentVersion":"1.0","contentLength":1048576},{"content":"book1-chapter2","contentVersion":"1.0","contentLength":2097152}],"relatedProducts":["com.example.book1.ipad"],"title":"Book One"}"#,
        #"{"type":"productRegistered","at":"2024-03-01T08:00:00.001Z","product":"com.example.book1.ipad","kind":"nonConsumable","price":"4.99","currency":"USD","downloadable":true,"contents":[{"content":"book1-chapter1","contentVersion":"1.0","contentLength":1048576}],"title":"Book One (iPad)"}"#,
        #"{"type":"productRegistered","at":"2024-03-01T08:00:00.002Z","product":"com.example.coins100","kind":"consumable","price":"0.99","currency":"USD","downloadable":false,"title":"100 Coins"}"#,
        #"{"type":"productRegistered","at":"2024-03-01T08:00:00.003Z","product":"com.example.atlas","kind":"nonConsumable","price":"9.99","currency":"EUR","downloadable":true,"contents":[{"content":"atlas-maps","contentVersion":"2.1","contentLength":52428800}],"title":"World Atlas"}"#,
        #"{"type":"productRegistered","at":"2024-03-01T08:00:00.004Z","product":"com.example.season","kind":"autoRenewable","price":"2.99","currency":"USD","downloadable":false,"title":"Season Pass"}"#,
    ]

    static let sessions: [(String, [String])] = [
        ("the catalog is registered", catalog),
        (
            "alice buys Book One; a download pauses and resumes",
            [
                #"{"type":"paymentQueued","at":"2024-03-01T09:00:00.000Z","transaction":"t1","product":"com.example.book1","user":"u-alice"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-01T09:00:05.000Z","transaction":"t1","storeTransactionId":"2000000001","storefront":"USA","downloads":[{"download":"t1-d1","content":"book1-chapter1","contentVersion":"1.0","contentLength":1048576},{"download":"t1-d2","content":"book1-chapter2","contentVersion":"1.0","contentLength":2097152}]}"#,
                #"{"type":"downloadStarted","at":"2024-03-01T09:00:05.500Z","download":"t1-d1"}"#,
                #"{"type":"downloadStarted","at":"2024-03-01T09:00:05.600Z","download":"t1-d2"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-01T09:00:07.000Z","download":"t1-d1","progress":0.5,"bytesWritten":524288,"timeRemaining":2.0}"#,
                #"{"type":"downloadProgressed","at":"2024-03-01T09:00:07.100Z","download":"t1-d2","progress":0.2,"bytesWritten":419430,"timeRemaining":8.0}"#,
                #"{"type":"downloadPaused","at":"2024-03-01T09:00:08.000Z","download":"t1-d2"}"#,
                #"{"type":"downloadFinished","at":"2024-03-01T09:00:09.000Z","download":"t1-d1","contentURL":"file:///var/mobile/Library/Caches/StoreKit/t1/book1-chapter1/Contents/"}"#,
                #"{"type":"contentCopiedOut","at":"2024-03-01T09:00:09.200Z","download":"t1-d1","destination":"Documents/book1/chapter1","bytesCopied":1048576}"#,
                #"{"type":"downloadResumed","at":"2024-03-01T09:01:00.000Z","download":"t1-d2"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-01T09:01:02.000Z","download":"t1-d2","progress":0.8,"bytesWritten":1677721,"timeRemaining":1.0}"#,
                #"{"type":"downloadFinished","at":"2024-03-01T09:01:04.000Z","download":"t1-d2","contentURL":"file:///var/mobile/Library/Caches/StoreKit/t1/book1-chapter2/Contents/"}"#,
                #"{"type":"contentCopiedOut","at":"2024-03-01T09:01:04.300Z","download":"t1-d2","destination":"Documents/book1/chapter2","bytesCopied":2097152}"#,
                #"{"type":"transactionFinished","at":"2024-03-01T09:01:04.500Z","transaction":"t1"}"#,
            ]
        ),
        (
            "alice buys 5 x 100 coins; the store redelivers it at the next launch",
            [
                #"{"type":"paymentQueued","at":"2024-03-01T10:00:00.000Z","transaction":"t2","product":"com.example.coins100","quantity":5,"user":"u-alice"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-01T10:00:03.000Z","transaction":"t2","storeTransactionId":"2000000002","storefront":"USA"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-01T10:05:00.000Z","transaction":"t2","storeTransactionId":"2000000002","storefront":"USA"}"#,
                #"{"type":"transactionFinished","at":"2024-03-01T10:05:00.200Z","transaction":"t2"}"#,
            ]
        ),
        (
            "alice buys the atlas; the download fails and is retried",
            [
                #"{"type":"paymentQueued","at":"2024-03-02T11:00:00.000Z","transaction":"t3","product":"com.example.atlas","user":"u-alice"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-02T11:00:04.000Z","transaction":"t3","storeTransactionId":"2000000003","price":"9.99","currency":"EUR","storefront":"FRA","downloads":[{"download":"t3-d1","content":"atlas-maps","contentVersion":"2.1","contentLength":52428800}]}"#,
                #"{"type":"downloadStarted","at":"2024-03-02T11:00:04.500Z","download":"t3-d1"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-02T11:00:10.000Z","download":"t3-d1","progress":0.3,"bytesWritten":15728640,"timeRemaining":14.0}"#,
                #"{"type":"downloadFailed","at":"2024-03-02T11:00:12.000Z","download":"t3-d1","error":{"domain":"NSURLErrorDomain","code":-1005,"message":"The network connection was lost."}}"#,
                #"{"type":"downloadStarted","at":"2024-03-02T11:02:00.000Z","download":"t3-d1"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-02T11:02:20.000Z","download":"t3-d1","progress":0.9,"bytesWritten":47185920,"timeRemaining":2.0}"#,
                #"{"type":"downloadFinished","at":"2024-03-02T11:02:23.000Z","download":"t3-d1","contentURL":"file:///var/mobile/Library/Caches/StoreKit/t3/atlas-maps/Contents/"}"#,
                #"{"type":"contentCopiedOut","at":"2024-03-02T11:02:24.000Z","download":"t3-d1","destination":"Documents/atlas","bytesCopied":52428800}"#,
                #"{"type":"transactionFinished","at":"2024-03-02T11:02:24.100Z","transaction":"t3"}"#,
            ]
        ),
        (
            "bob asks to buy the season pass; a parent approves it the next day",
            [
                #"{"type":"paymentQueued","at":"2024-03-02T18:00:00.000Z","transaction":"t4","product":"com.example.season","user":"u-bob"}"#,
                #"{"type":"transactionDeferred","at":"2024-03-02T18:00:02.000Z","transaction":"t4"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-03T08:30:00.000Z","transaction":"t4","storeTransactionId":"2000000004"}"#,
                #"{"type":"transactionFinished","at":"2024-03-03T08:30:00.500Z","transaction":"t4"}"#,
            ]
        ),
        (
            "bob buys Book One; a buggy purchase helper finishes it while both downloads run",
            [
                #"{"type":"paymentQueued","at":"2024-03-03T12:00:00.000Z","transaction":"t5","product":"com.example.book1","user":"u-bob"}"#,
                #"{"type":"transactionPurchased","at":"2024-03-03T12:00:04.000Z","transaction":"t5","storeTransactionId":"2000000005","downloads":[{"download":"t5-d1","content":"book1-chapter1","contentVersion":"1.0","contentLength":1048576},{"download":"t5-d2","content":"book1-chapter2","contentVersion":"1.0","contentLength":2097152}]}"#,
                #"{"type":"downloadStarted","at":"2024-03-03T12:00:04.100Z","download":"t5-d1"}"#,
                #"{"type":"downloadStarted","at":"2024-03-03T12:00:04.200Z","download":"t5-d2"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-03T12:00:05.000Z","download":"t5-d1","progress":0.1,"bytesWritten":104857,"timeRemaining":-1}"#,
                #"{"type":"transactionFinished","at":"2024-03-03T12:00:05.100Z","transaction":"t5"}"#,
                #"{"type":"downloadProgressed","at":"2024-03-03T12:00:05.900Z","download":"t5-d1","progress":0.15,"bytesWritten":157286}"#,
            ]
        ),
        (
            "bob cancels a coin purchase",
            [
                #"{"type":"paymentQueued","at":"2024-03-03T13:00:00.000Z","transaction":"t6","product":"com.example.coins100","user":"u-bob"}"#,
                #"{"type":"transactionFailed","at":"2024-03-03T13:00:04.000Z","transaction":"t6","error":{"domain":"SKErrorDomain","code":2,"message":"The payment was cancelled."}}"#,
                #"{"type":"transactionFinished","at":"2024-03-03T13:00:04.100Z","transaction":"t6"}"#,
            ]
        ),
        (
            "alice is refunded for the atlas; chapter 1 of Book One gets version 1.1",
            [
                #"{"type":"transactionRevoked","at":"2024-03-04T09:00:00.000Z","transaction":"t3","reason":"refund"}"#,
                #"{"type":"contentVersionPublished","at":"2024-03-05T00:00:00.000Z","product":"com.example.book1","content":"book1-chapter1","contentVersion":"1.1"}"#,
            ]
        ),
        (
            "alice reinstalls and restores: the new chapter 1 arrives",
            [
                #"{"type":"restoreStarted","at":"2024-03-06T20:00:00.000Z","user":"u-alice"}"#,
                #"{"type":"transactionRestored","at":"2024-03-06T20:00:03.000Z","transaction":"t7","originalTransaction":"t1","product":"com.example.book1","user":"u-alice","storeTransactionId":"2000000007","downloads":[{"download":"t7-d1","content":"book1-chapter1","contentVersion":"1.1","contentLength":1100000}]}"#,
                #"{"type":"restoreCompleted","at":"2024-03-06T20:00:03.500Z"}"#,
                #"{"type":"downloadStarted","at":"2024-03-06T20:00:04.000Z","download":"t7-d1"}"#,
                #"{"type":"downloadFinished","at":"2024-03-06T20:00:09.000Z","download":"t7-d1","contentURL":"file:///var/mobile/Library/Caches/StoreKit/t7/book1-chapter1/Contents/"}"#,
            ]
        ),
    ]

    /// Background Assets' status updates for a pack the season pass (t4, bob's) unlocks, and the
    /// app opening it once it finished.
    static let assetPack = [
        #"{"type":"assetPackPublished","at":"2024-03-07T07:00:00.000Z","pack":"season-levels","version":1,"unlockedBy":["com.example.season"]}"#,
        #"{"type":"assetPackBegan","at":"2024-03-07T07:00:01.000Z","pack":"season-levels","version":1}"#,
        #"{"type":"assetPackProgressed","at":"2024-03-07T07:00:05.000Z","pack":"season-levels","version":1,"progress":0.4}"#,
        #"{"type":"assetPackPaused","at":"2024-03-07T07:00:06.000Z","pack":"season-levels","version":1}"#,
        #"{"type":"assetPackBegan","at":"2024-03-07T07:10:00.000Z","pack":"season-levels","version":1}"#,
        #"{"type":"assetPackFinished","at":"2024-03-07T07:10:09.000Z","pack":"season-levels","version":1}"#,
        #"{"type":"assetPackOpened","at":"2024-03-07T07:10:10.000Z","pack":"season-levels","version":1}"#,
        #"{"type":"assetPackPublished","at":"2024-03-08T07:00:00.000Z","pack":"season-levels","version":2,"unlockedBy":["com.example.season"]}"#,
        #"{"type":"assetPackBegan","at":"2024-03-08T07:00:02.000Z","pack":"season-levels","version":2}"#,
    ]

    /// The App Store's page of another app (Apple ID 1234567890), once as a sheet that could not
    /// load, once as an overlay that did.
    static let productViews = [
        #"{"type":"storeProductViewPresented","at":"2024-03-08T18:00:00.000Z","view":"sheet-1","item":"1234567890","style":"sheet","campaignToken":"spring-sale"}"#,
        #"{"type":"storeProductViewFailed","at":"2024-03-08T18:00:04.200Z","view":"sheet-1","error":{"domain":"SKErrorDomain","code":0,"message":"Cannot connect to App Store"}}"#,
        #"{"type":"storeProductViewDismissed","at":"2024-03-08T18:00:07.000Z","view":"sheet-1"}"#,
        #"{"type":"storeProductViewPresented","at":"2024-03-09T09:30:00.000Z","view":"overlay-1","item":"1234567890","style":"overlay","campaignToken":"spring-sale"}"#,
        #"{"type":"storeProductViewLoaded","at":"2024-03-09T09:30:00.850Z","view":"overlay-1"}"#,
        #"{"type":"storeProductViewDismissed","at":"2024-03-09T09:30:12.000Z","view":"overlay-1"}"#,
    ]

    static let earlyPackOpen = #"{"type":"assetPackOpened","at":"2024-03-08T07:00:03.000Z","pack":"season-levels","version":2}"#

    static let prematureFinish = #"{"type":"transactionFinished","at":"2024-03-06T20:00:09.100Z","transaction":"t7"}"#

    static let properFinish = [
        #"{"type":"contentCopiedOut","at":"2024-03-06T20:00:09.500Z","download":"t7-d1","destination":"Documents/book1/chapter1","bytesCopied":1100000}"#,
        #"{"type":"transactionFinished","at":"2024-03-06T20:00:09.700Z","transaction":"t7"}"#,
    ]
}
