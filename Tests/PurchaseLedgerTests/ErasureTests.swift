import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// `forget` (contract 5.3): a user's personal values leave the file, its WAL, its snapshots and
/// projections; the chain still verifies, reports still total, the user's records read as erased.
@Suite struct ErasureTests {
    /// A user's purchases with realistic personal data in every personal field a user's
    /// transactions can hold.
    struct Person {
        let user: String
        let name: String
        let email: String
        let card: String
        let n: Int
        /// The app's own prefix for this person's transaction and download ids (never personal).
        let key: String

        /// Strings of this person that must not survive `forget`.
        var secrets: [String] {
            [user, name, email, "2000000\(n)001", "2000000\(n)003", "2000000\(n)004", "1000000\(n)777", "Card ending \(card)"]
        }

        func events(at second: Int) -> [Event] {
            var t = second
            func at() -> Timestamp {
                t += 1
                return E.at(t)
            }
            let d1 = "d-\(key)-1", d4 = "d-\(key)-4"
            let spec = { (d: String) in DownloadSpec(download: d, content: "c-book", contentVersion: ContentVersion("1.0")!, contentLength: 1000) }
            let bodies: [EventBody] = [
                .paymentQueued(transaction: "t-\(key)-1", product: "p-book", quantity: 1, user: user),
                .transactionPurchased(
                    transaction: "t-\(key)-1", user: user, storeTransactionId: "2000000\(n)001", downloads: [spec(d1)],
                    terms: PurchaseTerms(price: "4.99", currency: "USD", storefront: "USA")),
                .downloadStarted(download: d1),
                .downloadFinished(download: d1, contentURL: "file:///Users/\(name)/Library/Caches/StoreKit/\(d1)/Contents/book.epub"),
                .contentCopiedOut(download: d1, destination: "/Users/\(name)/Documents/Books/book.epub", checksum: "sha256:ab", bytesCopied: 1000),
                .transactionFinished(transaction: "t-\(key)-1", discardContent: false),
                .paymentQueued(transaction: "t-\(key)-2", product: "p-coins", quantity: 1, user: user),
                .transactionFailed(
                    transaction: "t-\(key)-2",
                    error: StoreError(domain: "SKErrorDomain", code: 2, message: "Card ending \(card) of \(email) declined")),
                .transactionRestored(
                    transaction: "t-\(key)-3", originalTransaction: "1000000\(n)777", product: "p-book", user: user,
                    storeTransactionId: "2000000\(n)003"),
                .transactionRevoked(transaction: "t-\(key)-3", reason: "refund requested by \(email)"),
                .paymentQueued(transaction: "t-\(key)-4", product: "p-album", quantity: 1, user: user),
                .transactionPurchased(transaction: "t-\(key)-4", user: user, storeTransactionId: "2000000\(n)004", downloads: [spec(d4)]),
                .downloadStarted(download: d4),
                .downloadFailed(download: d4, error: StoreError(domain: "NSURLErrorDomain", code: -1009, message: "offline on \(name)'s iPhone")),
                .restoreStarted(user: user),
                .restoreCompleted,
                // A failed restore's message names the account: the user's who started it.
                .restoreStarted(user: user),
                .restoreFailed(error: StoreError(domain: "SKErrorDomain", code: 0, message: "Apple ID \(email) not signed in")),
            ]
            return bodies.map { Event(at: at(), $0) }
        }
    }

    static let alice = Person(user: "u-alice-7731", name: "alice.smith", email: "alice.smith@example.com", card: "4242", n: 11, key: "a")
    static let bob = Person(user: "u-bob-1204", name: "bob.jones", email: "bob.jones@example.org", card: "5555", n: 22, key: "b")

    static let catalog: [Event] = [
        E.product("p-book", contents: [("c-book", "1.0")]), E.product("p-album", price: "9.99", contents: [("c-book", "1.0")]),
        E.product("p-coins", kind: .consumable),
    ]

    /// A ledger of alice's and bob's purchases, interleaved with enough events that it holds
    /// sealed blocks, a dictionary and snapshots.
    static func ledger(_ path: String) throws -> Ledger {
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 8))
        try ledger.append(contentsOf: catalog)
        try ledger.append(contentsOf: alice.events(at: 10))
        try ledger.append(contentsOf: bob.events(at: 100))
        return ledger
    }

    /// The file and its WAL (after a checkpoint leaves it empty), as bytes.
    static func bytes(_ path: String) throws -> [UInt8] {
        var all = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        if let wal = try? Data(contentsOf: URL(fileURLWithPath: path + "-wal")) { all += wal }
        return all
    }

    /// The file and its WAL, with the personal values sealed in its blocks decompressed: every
    /// value the file holds is in there as written.
    static func held(_ path: String) throws -> [UInt8] {
        try bytes(path) + sealed(path).records + snapshotPages(path)
    }

    /// Every snapshot page of the file, decompressed (the records snapshots hold).
    static func snapshotPages(_ path: String) throws -> [UInt8] {
        try DatabaseQueue(path: path).read { db in
            try Row.fetchAll(db, sql: "SELECT raw_size, data FROM snapshot_pages").flatMap { row in
                try LZ4.decompressStored([UInt8](row[1] as Data), originalSize: row[0], "a snapshot page")
            }
        }
    }

    /// The personal values sealed in blocks (migration 0010): their decompressed records, and
    /// each block's stored (compressed) bytes. A value there is not in the file as written.
    static func sealed(_ path: String) throws -> (records: [UInt8], stored: [[UInt8]]) {
        try DatabaseQueue(path: path).read { db in
            let blocks = try PersonalValueBlocks.blocks(db)
            return (try blocks.flatMap { try PersonalValueBlocks.decompress($0) }, blocks.map(\.data))
        }
    }

    /// Whether `haystack` holds some 32-byte piece of `old` that `kept` does not (bytes of a
    /// rewritten block left behind).
    static func holdsPieces(of old: [UInt8], in haystack: [UInt8], besides kept: [[UInt8]]) -> Bool {
        stride(from: 0, to: max(0, old.count - 32), by: 16).contains { i in
            let piece = old[i..<(i + 32)]
            return Self.contains(haystack, piece) && !kept.contains { Self.contains($0, piece) }
        }
    }

    static func contains(_ haystack: [UInt8], _ needle: ArraySlice<UInt8>) -> Bool {
        guard needle.count <= haystack.count, let first = needle.first else { return false }
        var i = 0
        while i <= haystack.count - needle.count {
            if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) { return true }
            i += 1
        }
        return false
    }

    static func contains(_ haystack: [UInt8], _ needle: String) -> Bool {
        contains(haystack, Array(needle.utf8)[...])
    }

    /// The log holds no personal value at all: every one is a ref into `personal_values`.
    @Test func theLogHoldsNoPersonalValue() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        _ = try Self.ledger(path)
        var payloads: [UInt8] = []
        var dictionaries: [UInt8] = []
        try DatabaseQueue(path: path).read { db in
            try EventStore.scan(db, integrity: true) { entry in
                payloads += entry.payload
                return true
            }
            for bytes in try Data.fetchAll(db, sql: "SELECT bytes FROM dictionaries") { dictionaries += bytes }
        }
        let secrets = Self.alice.secrets + Self.bob.secrets
        #expect(secrets.filter { Self.contains(payloads, $0) }.isEmpty, "in a payload: \(secrets.filter { Self.contains(payloads, $0) })")
        #expect(secrets.filter { Self.contains(dictionaries, $0) }.isEmpty)
        // Every event type's personal fields, too (one event of every type, every field given).
        let other = try Ledger(
            path: dir.path("every.ledger"),
            configuration: {
                var c = testConfiguration(); c.checksInput = false; return c
            }())
        var stored: [EventBody] = []
        for event in PrivacyTests.everyField where event.type != .personalDataErased {
            // Observations the rules find odd are stored as anomalies; commands they refuse are skipped.
            if let result = try? other.append(event) { stored += result.events.map(\.event.body) }
        }
        var personal: [String] = []
        for body in stored { PersonalData.forEachValue(in: body) { value, _ in personal.append(value) } }
        #expect(personal.count >= 8, "\(personal)")
        var everyPayload: [UInt8] = []
        try DatabaseQueue(path: dir.path("every.ledger")).read { db in
            try EventStore.scan(db, integrity: true) { entry in
                everyPayload += entry.payload
                return true
            }
        }
        #expect(personal.filter { Self.contains(everyPayload, $0) }.isEmpty)
    }

    @Test func forgetErasesEveryByteOfTheUserAndNothingElse() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let ledger = try Self.ledger(path)
        let revenueBefore = try ledger.revenue()
        let historyBefore = try ledger.purchaseHistory()
        let lastBefore = try ledger.state(atSeq: .max).seq
        try ledger.checkpoint()
        let held = try Self.bytes(path)
        let sealedBefore = try Self.sealed(path)
        #expect(sealedBefore.stored.count >= 4, "the values are sealed in blocks")
        #expect(
            Self.alice.secrets.allSatisfy { Self.contains(held, $0) || Self.contains(sealedBefore.records, $0) },
            "every value is in the file before")
        let snapshotsBefore = try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        #expect(snapshotsBefore.count >= 3)
        #expect(Self.alice.secrets.contains { Self.contains(try! Self.snapshotPages(path), $0) }, "the snapshots hold alice's values before")
        // The blocks that held one of alice's values: rewritten by forget, their old bytes gone.
        let alicesBlocks = try DatabaseQueue(path: path).read { db in
            try PersonalValueBlocks.blocks(db).filter { block in
                let records = try PersonalValueBlocks.decompress(block)
                return Self.alice.secrets.contains { Self.contains(records, $0) }
            }
        }
        #expect(!alicesBlocks.isEmpty)

        let summary = try ledger.forget(user: Self.alice.user)
        #expect(summary.values >= 8)
        #expect(summary.seq == lastBefore + 1)
        #expect(summary.walTruncated)

        // No byte of alice is left in the file or its WAL; bob's values are all there.
        let raw = try Self.bytes(path)
        let sealedAfter = try Self.sealed(path)
        let pagesAfter = try Self.snapshotPages(path)
        let survived = Self.alice.secrets.filter { Self.contains(raw, $0) || Self.contains(sealedAfter.records, $0) || Self.contains(pagesAfter, $0) }
        #expect(survived.isEmpty, "survived forget: \(survived)")
        let leftBehind = alicesBlocks.filter { Self.holdsPieces(of: $0.data, in: raw, besides: sealedAfter.stored) }
        #expect(leftBehind.isEmpty, "bytes of the blocks that held alice's values are still in the file: \(leftBehind.map(\.what))")
        let lost = Self.bob.secrets.filter { !Self.contains(raw, $0) && !Self.contains(sealedAfter.records, $0) }
        #expect(lost.isEmpty, "another user's values lost: \(lost)")
        // The snapshots were taken again at their seqs (time travel as fast as before), and one
        // at the erasure.
        let snapshotsAfter = try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        #expect(snapshotsAfter == snapshotsBefore + [summary.seq], "\(snapshotsBefore) -> \(snapshotsAfter)")
        #expect(summary.snapshotsDropped == snapshotsBefore.count)

        // The chain verifies, the reports still total, alice's records read as erased.
        let report = try ledger.verify(all: true, everySnapshot: true)
        #expect(report.isValid, "\(report.problems)")
        #expect(try ledger.revenue() == revenueBefore)
        let history = try ledger.purchaseHistory()
        #expect(history.count == historyBefore.count)
        let state = try ledger.state(atSeq: .max)
        let t1 = try #require(state.transactions["t-a-1"])
        #expect(t1.user?.hasPrefix("[erased ") == true && t1.storeTransactionId?.hasPrefix("[erased ") == true)
        #expect(t1.product == "p-book" && t1.state == .purchased && t1.finished)
        #expect(state.transactions["t-b-1"]?.user == Self.bob.user)
        let d1 = try #require(state.downloads["d-a-1"])
        #expect(d1.destination?.hasPrefix("[erased ") == true && d1.copiedOut)

        // The export: alice nowhere, the erasure recorded without naming her.
        var lines: [String] = []
        try ledger.forEachEvent { e in
            lines.append(e.jsonLine)
            return true
        }
        let export = lines.joined(separator: "\n")
        let exported = Self.alice.secrets.filter { export.contains($0) }
        #expect(exported.isEmpty, "exported after forget: \(exported)")
        let erasure = try #require(lines.last)
        #expect(erasure.contains(#""type":"personalDataErased""#) && erasure.contains(#""appendedByLedger":true"#), "\(erasure)")

        // A fresh open (state from the new snapshot) reads the same.
        let reopened = try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 8))
        #expect(try reopened.state(atSeq: .max) == state)
        #expect(try reopened.state(atSeq: 10).transactions["t-a-1"]?.user?.hasPrefix("[erased ") == true)
    }

    /// After an erasure, every snapshot is taken again at its seq, and events after one name the
    /// erased user id: a state loaded cold (nothing cached) from any of them reads it as erased,
    /// as a replay from the first event does.
    @Test func timeTravelAfterAnErasureReadsTheErasedUserFromEverySnapshot() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let ledger = try Self.ledger(path)
        try ledger.forget(user: Self.alice.user)
        let last = try ledger.state(atSeq: .max).seq
        let snapshots = try DatabaseQueue(path: path).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM snapshots") ?? 0 }
        #expect(snapshots >= 3)
        var readOnly = testConfiguration(blockSize: 8, snapshotInterval: 8)
        readOnly.readOnly = true
        for seq in 1...last {
            try DatabaseQueue(path: path).read { PersonalValues.invalidate($0) }
            let cold = try Ledger(path: path, configuration: readOnly)
            let state = try cold.state(atSeq: seq)
            #expect(state == (try cold.replayFromLog(through: seq)), "at \(seq)")
        }
    }

    /// Another process holding the write lock past the busy timeout just after an erasure
    /// committed does not turn it into a failure: `forget` returns, the WAL not truncated
    /// (`walTruncated` false), and a later `forget` finishes it.
    @Test func aLockHeldAfterTheErasureCommitsLeavesItCommittedForLater() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        try Self.ledger(path).checkpoint()
        // Another connection takes the write lock right after the commit and holds it 1 s.
        let blocker = try DatabaseQueue(path: path)
        let locked = DispatchSemaphore(value: 0), released = DispatchSemaphore(value: 0)
        var c = testConfiguration(blockSize: 8, snapshotInterval: 8)
        c.busyTimeout = .milliseconds(200)
        c.afterErasureCommit = {
            Thread.detachNewThread {
                try? blocker.writeWithoutTransaction { db in
                    try db.execute(sql: "BEGIN IMMEDIATE")
                    locked.signal()
                    Thread.sleep(forTimeInterval: 1)
                    try db.execute(sql: "ROLLBACK")
                }
                released.signal()
            }
            locked.wait()
        }
        let erased = try Ledger(path: path, configuration: c).forget(user: Self.alice.user)
        #expect(erased.values > 0 && !erased.walTruncated)
        released.wait()
        let later = try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 8))
        #expect(try later.verify(all: true).isValid)
        #expect(Self.alice.secrets.filter { Self.contains(try! Self.held(path), $0) }.isEmpty)
    }

    /// Values of no user (a Kollus download registered by URL) have an erasure of their own: by
    /// download. A user's download is refused there (`forget --user` erases it).
    @Test func forgetByDownloadErasesTheValuesOfNoUser() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("k.ledger")
        let ledger = try Self.ledger(path)
        let url = "https://cdn.example.com/k/ann.smith?token=s3cret-token"
        try ledger.append(contentsOf: [
            Event(at: E.at(500), .contentRegistered(url: url, download: "k1", contentLength: 10)),
            Event(at: E.at(501), .downloadStarted(download: "k1")),
            Event(at: E.at(502), .downloadFailed(download: "k1", error: StoreError(domain: "NSURLErrorDomain", code: -1001, message: "timed out on ann.smith's iPad"))),
        ])
        try ledger.checkpoint()
        #expect(Self.contains(try Self.held(path), "s3cret-token"))
        let erased = try cli(["forget", path, "--download", "k1"])
        #expect(erased.status == 0 && erased.stdout.contains("personal values of the download"), "\(erased.stdout) \(erased.stderr)")
        let raw = try Self.held(path)
        #expect(!Self.contains(raw, "s3cret-token") && !Self.contains(raw, "ann.smith's iPad"), "the download's values are gone")
        #expect(Self.alice.secrets.allSatisfy { Self.contains(raw, $0) }, "a user's values stay")
        #expect(try cli(["verify", path]).status == 0)
        let again = try cli(["forget", path, "--download", "k1"])
        #expect(again.status == 2 && again.stderr.contains("already erased"), "\(again.stderr)")
        let users = try cli(["forget", path, "--download", "d-a-1"])
        #expect(users.status == 2 && users.stderr.contains("forget --user"), "\(users.stderr)")
        #expect(try cli(["forget", path, "--download", "nope"]).status == 2)
        #expect(try cli(["forget", path]).status == 2, "--user or --download")
    }

    /// `forget` killed after its commit, before the write-ahead log was copied over the main
    /// file: verify reports the unfinished erasure, and a second `forget` (or any writable open)
    /// finishes it, after which no byte of the user is in the file or its WAL.
    @Test func aForgetKilledAfterItsCommitIsFinishedLater() throws {
        let dir = try TemporaryDirectory()
        for finisher in [["forget", "--user", Self.alice.user], ["rebuild"]] {
            let path = dir.path("\(finisher[0]).ledger")
            _ = try Self.ledger(path)
            let killed = try cli(["forget", path, "--user", Self.alice.user], environment: ["PURCHASE_LEDGER_FAULT": "exit-after-erasure-commit"])
            #expect(killed.status == 137, "\(killed.stderr)")
            let verify = try cli(["verify", path])
            #expect(verify.status == 1 && verify.stdout.contains("interrupted after its commit"), "\(verify.stdout)")
            let finished = try cli([finisher[0], path] + finisher.dropFirst())
            #expect(finished.status == 0, "\(finisher[0]): \(finished.stdout) \(finished.stderr)")
            if finisher[0] == "forget" { #expect(finished.stdout.contains("is now finished"), "\(finished.stdout)") }
            let raw = try Self.held(path)
            #expect(Self.alice.secrets.filter { Self.contains(raw, $0) }.isEmpty, "\(finisher[0]): the user is still in the file")
            #expect(try cli(["verify", path]).status == 0)
            #expect(try cli(["forget", path, "--user", Self.alice.user]).status == 2, "nothing pending: an unknown user again")
        }
    }

    /// Another open instance (another process, say) that held the user in memory does not write
    /// the user back after the erasure: its next append loads the state again.
    @Test func anotherInstanceDoesNotBringTheUserBack() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let app = try Self.ledger(path)
        _ = try app.state(atSeq: .max)
        try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 8)).forget(user: Self.alice.user)
        try app.append(Event(at: E.at(900), .transactionFinished(transaction: "t-a-4", discardContent: false)))
        #expect(try app.state(atSeq: .max).transactions["t-a-4"]?.user?.hasPrefix("[erased ") == true)
        try app.checkpoint()
        let raw = try Self.held(path)
        let survived = Self.alice.secrets.filter { Self.contains(raw, $0) }
        #expect(survived.isEmpty, "written back: \(survived)")
        #expect(try app.verify(all: true).isValid)
    }

    @Test func aUserWhoComesBackIsANewSubject() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let ledger = try Self.ledger(path)
        try ledger.forget(user: Self.alice.user)
        #expect { try ledger.forget(user: Self.alice.user) } throws: { ($0 as? LedgerError)?.code == .unknownUser }
        #expect { try ledger.forget(user: "u-nobody") } throws: { ($0 as? LedgerError)?.code == .unknownUser }

        try ledger.append(Event(at: E.at(500), .paymentQueued(transaction: "t-back", product: "p-coins", quantity: 1, user: Self.alice.user)))
        let state = try ledger.state(atSeq: .max)
        #expect(state.transactions["t-back"]?.user == Self.alice.user)
        #expect(state.transactions["t-a-1"]?.user?.hasPrefix("[erased ") == true)
        let again = try ledger.forget(user: Self.alice.user)
        #expect(again.values == 1)
        #expect(try ledger.state(atSeq: .max).transactions["t-back"]?.user?.hasPrefix("[erased ") == true)
        #expect(try ledger.verify(all: true).isValid)
    }

    /// A user id that reads as an erased user's (`[erased 3]`) is refused from the library,
    /// naming the field, and nothing is written: reports, support and the fleet's reconciliation
    /// would take a live user for an erased one. The same events appended by an export's import
    /// (JSON Lines) keep the markers an erasure left.
    @Test func aUserIdThatReadsAsAnErasedOneIsRefused() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Self.ledger(dir.path("l.ledger"))
        let before = try ledger.events(limit: 10_000).count
        for user in ["[erased 3]", "[erased 9f86d081884c]"] {
            let queued = Event(at: E.at(500), .paymentQueued(transaction: "t-x", product: "p-coins", quantity: 1, user: user))
            let error = try #require(#expect(throws: LedgerError.self) { try ledger.append(queued) })
            #expect(error.code == .malformedInput && error.message.contains("field `user`") && error.message.contains("only forget"), "\(error)")
            #expect(throws: LedgerError.self) { try ledger.append(Event(at: E.at(501), .restoreStarted(user: user))) }
        }
        #expect(try ledger.events(limit: 10_000).count == before)
        try ledger.append(Event(at: E.at(502), .restoreStarted(user: "[erased")))

        try ledger.forget(user: Self.alice.user)
        // The user's events, exported as `export` writes them, go into a new ledger as they are.
        let exported = try ledger.events(limit: 10_000).filter { !$0.appendedByLedger && $0.event.type != .personalDataErased }
            .map { JSONLines.encode($0.event) + "\n" }.joined()
        #expect(exported.contains("\"user\":\"[erased "))
        let input = dir.path("export.jsonl")
        try exported.write(toFile: input, atomically: true, encoding: .utf8)
        try Ledger(path: dir.path("copy.ledger"), configuration: testConfiguration()).importJSONLines(from: try JSONLinesReader(path: input))
        let copy = try Ledger(path: dir.path("copy.ledger"), configuration: testConfiguration())
        #expect(try copy.state(atSeq: .max).transactions["t-a-1"]?.user?.hasPrefix("[erased ") == true)
        // So do a JSON Lines document appended or checked whole, and an extract of the erased
        // user's transaction (its events appended to a new ledger as they are).
        let document = try JSONLinesInput(bytes: Array(exported.utf8))
        let other = try Ledger(path: dir.path("other.ledger"), configuration: testConfiguration())
        try other.checkJSONLines(document)
        try other.appendJSONLines(document)
        #expect(try other.state(atSeq: .max).transactions["t-a-1"]?.user?.hasPrefix("[erased ") == true)
        let extract = try ledger.extract(.transactions(["t-a-1"]), to: dir.path("extract.ledger"), configuration: testConfiguration())
        #expect(extract.keptEvents > 0)
        // Whatever follows the prefix, as the fleet reads it.
        #expect(throws: LedgerError.self) { try ledger.append(Event(at: E.at(503), .restoreStarted(user: "[erased 3"))) }
    }

    /// The rows of `personal_values` are covered by the chain through their commitments: an
    /// edited, added or deleted row is reported. (Bob's id is introduced by an event sealed with
    /// its commitment elided, so the edit breaks the chain at that event: docs/format.md.)
    @Test func editingPersonalValuesIsCaught() throws {
        let dir = try TemporaryDirectory()
        let source = dir.path("l.ledger")
        _ = try Self.ledger(source)
        func tampered(_ name: String, _ sql: String, kind: VerificationProblem.Kind = .personalValues) throws -> [VerificationProblem] {
            let copy = dir.path(name)
            try FileManager.default.copyItem(atPath: source, toPath: copy)
            try DatabaseQueue(path: copy).write { try $0.execute(sql: sql) }
            var readOnly = testConfiguration()
            readOnly.readOnly = true
            return try Ledger(path: copy, configuration: readOnly).verify(all: true).problems.filter { $0.kind == kind }
        }
        let bob = try DatabaseQueue(path: source).read { db in try PersonalValues.userRef(Self.bob.user, db) }
        let bobRef = "(SELECT ref FROM personal_values WHERE value = CAST('\(Self.bob.user)' AS BLOB))"
        let edited = try tampered("edited.ledger", "UPDATE personal_values SET value = CAST('u-mallory' AS BLOB) WHERE ref = \(bobRef)", kind: .chain)
        #expect(
            edited.count == 1 && edited[0].message.contains("a personal value it introduces (ref \(bob!)") && edited[0].message.contains("edited"),
            "\(edited)")
        let deleted = try tampered("deleted.ledger", "DELETE FROM personal_values WHERE ref = \(bobRef)")
        // Bob's user id (and with it the salt of every value of his): each is reported.
        #expect(deleted.contains { $0.message.contains("no erasure recorded") }, "\(deleted)")
        let added = try tampered("added.ledger", "INSERT INTO personal_values (owner, salt, value) VALUES (0, x'00', CAST('x' AS BLOB))")
        #expect(added.count == 1 && added[0].message.contains("never introduced"), "\(added)")
    }

    /// A ledger whose early events were written before personal values were kept apart holds
    /// them inside the chain: forget refuses it, names why, and writes nothing.
    @Test func aLedgerFromBeforeIsRefusedAndUnchanged() throws {
        let dir = try TemporaryDirectory()
        // Written by a version before migration 0007: personal values inline, in the chain.
        let path2 = dir.path("old2.ledger")
        var inline = testConfiguration()
        inline.writesPersonalValuesInline = true
        let writer = try Ledger(path: path2, configuration: inline)
        try writer.append(contentsOf: Self.catalog)
        try writer.append(contentsOf: Self.alice.events(at: 10))
        try DatabaseQueue(path: path2).write { try undo0007($0) }
        // This version opens it (migration 0007 runs), and new events use refs.
        let ledger2 = try Ledger(path: path2, configuration: testConfiguration())
        try ledger2.append(contentsOf: Self.bob.events(at: 100))
        #expect(try ledger2.forget(user: Self.bob.user).values > 0, "bob's values came after the migration")
        let before = try ledger2.state(atSeq: .max).seq
        #expect { try ledger2.forget(user: Self.alice.user) } throws: {
            let e = $0 as? LedgerError
            return e?.code == .notErasable && e?.message.contains("event 4,") == true
        }
        #expect(try ledger2.state(atSeq: .max).seq == before)
        #expect(try ledger2.verify().isValid)
    }
}
