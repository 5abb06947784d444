import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Projections, the library API and live observation.
@Suite struct LedgerTests {
    /// Every table of the projections, as rows in primary-key order.
    static func dump(_ path: String) throws -> [String: [Row]] {
        try DatabaseQueue(path: path).read { db in
            try Dictionary(uniqueKeysWithValues: Projector.tables.map { ($0, try Row.fetchAll(db, sql: "SELECT * FROM \($0) ORDER BY 1, 2")) })
        }
    }

    /// The projections are `live`'s, and the ledger verifies.
    static func expectIntact(_ ledger: Ledger, _ path: String, _ live: [String: [Row]], sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try dump(path) == live, sourceLocation: sourceLocation)
        #expect(try ledger.verify().isValid, sourceLocation: sourceLocation)
    }

    @Test func rebuildGivesTablesIdenticalToTheLiveOnes() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("p.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        for e in StorageTests.everyType { try ledger.append(e) }
        try ledger.append(contentsOf: [
            E.queued("t5", "p1"), E.purchased("t5", downloads: ["d5"], version: "1.2"), E.start("d5"), E.done("d5"),
            E.copied("d5", to: "v2"), E.finished("t5"),
        ])
        let live = try Self.dump(path)
        #expect(live["owned_content_history"]?.count == 2)
        try ledger.rebuildProjections()
        try Self.expectIntact(ledger, path, live)
    }

    /// A download copied out again, in later appends and twice in one: the history's view gives
    /// each copy-out its destination, the table keeps all but the latest one's (that is the
    /// download's), and the live rows equal those a rebuild and a bulk import write.
    @Test func aDownloadCopiedOutAgainKeepsEachCopysDestination() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("copies.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        let events = [
            E.product("p1", contents: [("c1", "1.0")]), E.queued("t1", "p1"), E.purchased("t1", downloads: ["d1", "d2"]),
            E.start("d1"), E.done("d1"), E.copied("d1", to: "A/"), E.start("d2"), E.done("d2"), E.copied("d2", to: "X/"),
            E.copied("d1", to: "B/"), E.copied("d1", to: "C/"), E.copied("d1", to: "D/"), E.copied("d2", to: "X/"),
        ]
        try ledger.append(contentsOf: Array(events[..<6]))
        try ledger.append(contentsOf: Array(events[6..<10]))
        try ledger.append(contentsOf: Array(events[10...]))
        func history(_ path: String) throws -> (view: [String], stored: [String?]) {
            try DatabaseQueue(path: path).read { db in
                (
                    try String.fetchAll(db, sql: "SELECT destination FROM owned_content_history_view ORDER BY seq"),
                    try Optional<String>.fetchAll(db, sql: "SELECT destination FROM owned_content_history ORDER BY seq")
                )
            }
        }
        let live = try history(path)
        #expect(live.view == ["A/", "X/", "B/", "C/", "D/", "X/"])
        #expect(live.stored == ["A/", "X/", "B/", "C/", nil, nil])
        #expect(try ledger.verify().isValid, "the live rows equal a rebuild's")
        let tables = try Self.dump(path)
        try ledger.rebuildProjections(rewritingEveryRow: true)
        #expect(try Self.dump(path) == tables)

        let imported = dir.path("imported.ledger")
        try Ledger(path: imported, configuration: testConfiguration()).append(contentsOf: events)
        #expect(try history(imported) == live)
    }

    /// A stored row keyed by a text canonically equivalent to a real row's key (the Kelvin sign
    /// for `K`, in a key and in a composite key), as only an edit of the file makes: SQLite
    /// tells the two keys apart, and so does a rebuild, which deletes the extra row.
    @Test func aRowKeyedByAnEquivalentTextIsDeletedByARebuild() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("k.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("pK"), E.queued("tK1", "pK"), E.purchased("tK1", downloads: ["dK1"])])
        let live = try Self.dump(path)
        try DatabaseQueue(path: path).write { db in
            try db.execute(
                sql: """
                    CREATE TEMP TABLE t AS SELECT * FROM transaction_rows WHERE transaction_id = 'tK1';
                    UPDATE t SET transaction_id = 't\u{212A}1';
                    INSERT INTO transaction_rows SELECT * FROM t;
                    CREATE TEMP TABLE c AS SELECT * FROM product_contents WHERE product = 'pK';
                    UPDATE c SET product = 'p\u{212A}';
                    INSERT INTO product_contents SELECT * FROM c;
                    """)
        }
        #expect(try !ledger.verify().isValid)
        let repaired = try ledger.rebuildProjections()
        #expect(repaired.rowsDeleted == 2 && repaired.rowsWritten == 0, "\(repaired)")
        #expect(try Self.dump(path) == live)
        #expect(try ledger.verify().isValid)
        let again = try ledger.rebuildProjections()
        #expect(again.rowsDeleted == 0 && again.rowsWritten == 0)
    }

    @Test func rebuildWritesOnlyTheRowsThatDifferFromTheLog() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("r.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        for e in StorageTests.everyType { try ledger.append(e) }
        var events: [Event] = []
        for i in 0..<200 {
            events += [
                E.queued("r\(i)", "p1"), E.purchased("r\(i)", downloads: ["rd\(i)"], version: "1.2"), E.start("rd\(i)"),
                E.done("rd\(i)"), E.copied("rd\(i)", to: "v\(i)"), E.finished("r\(i)"),
            ]
        }
        try ledger.append(contentsOf: events)
        let live = try Self.dump(path)
        let rows = live.values.map(\.count).reduce(0, +)

        let sound = try ledger.rebuildProjections()
        #expect(sound.rowsWritten == 0 && sound.rowsDeleted == 0 && sound.rowsUnchanged == rows)
        #expect(sound.events == (try ledger.lastSeq()))

        // Five rows changed or missing (one only from NULL to 0), one extra, in three tables.
        try DatabaseQueue(path: path).write { db in
            try db.execute(
                sql: """
                    INSERT OR IGNORE INTO projection_texts (text) VALUES ('failed');
                    UPDATE transaction_rows SET state = (SELECT code FROM projection_texts WHERE text = 'failed') WHERE transaction_id IN ('r1', 'r2');
                    UPDATE download_rows SET transaction_id = 'r9' WHERE download_id = 'rd3';
                    UPDATE download_rows SET error_code = 0 WHERE download_id = 'rd4';
                    DELETE FROM owned_content_history WHERE seq = (SELECT min(seq) FROM owned_content_history);
                    INSERT INTO owned_content_history (seq, download_id, destination, copied_at_ms) VALUES (999999, 'dx', 'nowhere', 0);
                    """)
        }
        #expect(try !ledger.verify().isValid)
        let repaired = try ledger.rebuildProjections()
        #expect(repaired.rowsWritten == 5 && repaired.rowsDeleted == 1 && repaired.rowsUnchanged == rows - 5)
        try Self.expectIntact(ledger, path, live)

        // An emptied table is written whole; rewritingEveryRow writes every row of every table.
        try DatabaseQueue(path: path).write { try $0.execute(sql: "DELETE FROM download_rows") }
        #expect(try ledger.rebuildProjections().rowsWritten == live["downloads"]!.count)
        #expect(try Self.dump(path) == live)
        #expect(try ledger.rebuildProjections(rewritingEveryRow: true).rowsWritten == rows)
        try Self.expectIntact(ledger, path, live)
    }

    @Test func lagging_or_stale_projections_are_caught_up_on_open() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("lag.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        for e in StorageTests.everyType { try ledger.append(e) }
        let live = try Self.dump(path)
        // As if a crash or an older version left the projections behind the log.
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DELETE FROM transaction_rows; UPDATE ledger_info SET value = 3 WHERE key = 'projection_seq'")
        }
        var readOnly = testConfiguration()
        readOnly.readOnly = true
        #expect(try Ledger(path: path, configuration: readOnly).verify().problems.first?.kind == .projections)
        _ = try Ledger(path: path, configuration: testConfiguration())
        #expect(try Self.dump(path) == live)
        try DatabaseQueue(path: path).write { try $0.execute(sql: "UPDATE ledger_info SET value = 'reducer 0' WHERE key = 'projection_stamp'") }
        _ = try Ledger(path: path, configuration: testConfiguration())
        #expect(try Ledger(path: path, configuration: readOnly).verify().isValid)
    }

    @Test func theLibraryAPIAnswersFromTheProjections() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("api.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [
            E.product("book", contents: [("ch1", "1.0")], related: ["book-ipad"]), E.product("book-ipad"),
            E.queued("t1", "book"), E.purchased("t1", downloads: ["d1"], content: "ch1"), E.start("d1"), E.done("d1"),
            E.registered("https://cdn/k?key=1", "k1"),
        ])
        #expect(try ledger.contentURL(for: "d1") == "file:///cache/d1/")
        #expect(try ledger.owns(product: "book"))
        #expect(try ledger.owns(product: "book-ipad"), "related products count")
        #expect(try !ledger.owns(product: "other"))
        #expect(try ledger.download(forURL: "https://cdn/k?key=1") == "k1")
        #expect { try ledger.download(forURL: "https://cdn/unknown") } throws: { ($0 as? LedgerError)?.code == .unregisteredURL }
        try ledger.append(contentsOf: [E.copied("d1"), E.finished("t1")])
        #expect(try ledger.contentURL(for: "d1") == nil, "no content URL after finish")
        #expect(try ledger.ownedContent().map(\.content) == ["ch1"])
        #expect(try !ledger.updateAvailable(product: "book", content: "ch1"))
        try ledger.append(E.published("book", "ch1", "1.1"))
        #expect(try ledger.updateAvailable(product: "book", content: "ch1"))
        #expect(try ledger.transactions(user: "u1").map(\.transaction) == ["t1"])
        #expect(try ledger.transaction("t1")?.downloads == ["d1"])
        #expect(try ledger.downloads(transaction: "t1").map(\.state) == [.finished])
        try ledger.append(E.revoked("t1"))
        #expect(try ledger.ownedContent().isEmpty, "a refund hides owned content")
        #expect(try !ledger.owns(product: "book-ipad"))
        // The projections agree with the reducer's state.
        let state = ledger.currentState
        #expect(
            try ledger.transactions()
                == state.transactions.values.sorted { $0.transaction < $1.transaction }.map { t in
                    var t = t
                    // Projections keep milliseconds.
                    t.queuedAt = t.queuedAt.map { Timestamp(millisecondsSinceEpoch: Projector.ms($0)) }
                    return t
                })
    }

    @Test func largeAppendsReportProgress() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("progress.ledger"), configuration: testConfiguration(blockSize: 1024, snapshotInterval: 0))
        let events = [E.product("p1")] + (0..<12_500).flatMap { [E.queued("t\($0)"), E.purchased("t\($0)")] }
        var calls: [Int] = []
        try ledger.append(contentsOf: events) { done, total in
            calls.append(done)
            #expect(total == 25_001)
        }
        #expect(calls == [10_000, 20_000])
    }

    @Test func stateAtATime() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("t.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("p1"), E.queued("t1", at: 10), E.purchased("t1", at: 20), E.revoked("t1", at: 30)])
        #expect(try ledger.state(at: E.at(15)).transactions["t1"]?.state == .purchasing)
        #expect(try ledger.state(at: E.at(25)).transactions["t1"]?.revoked == false)
        #expect(try ledger.state(at: E.at(35)).transactions["t1"]?.revoked == true)
    }

    @Test func liveObservationCatchesUpThenFollows() async throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("live.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("p1"), E.queued("t1")])
        let received = Task {
            var seqs: [Int64] = []
            for try await e in ledger.observe(from: 2, pollInterval: .milliseconds(50)) {
                seqs.append(e.seq)
                if seqs.count == 3 { break }
            }
            return seqs
        }
        try await Task.sleep(for: .milliseconds(100))
        try ledger.append(contentsOf: [E.purchased("t1"), E.finished("t1")])
        #expect(try await received.value == [2, 3, 4])
    }

    @Test func anomaliesAreStoredFlaggedAndChangeNothing() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("a.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("p1"), E.queued("t1"), E.purchased("t1")])
        let before = ledger.currentState
        let result = try ledger.append(E.failed("t1"))
        #expect(result.events.first?.anomaly == .illegalTransactionTransition)
        var after = ledger.currentState.transactions
        after["t1"]?.events -= 1  // the anomaly is stored in t1's stream; nothing else changes
        #expect(after == before.transactions)
        #expect(ledger.currentState.anomalies == 1)
        #expect(try ledger.events(from: 4).first?.anomaly == .illegalTransactionTransition)
        // An identical repeat of a command stores nothing and takes no seq.
        let repeatResult = try ledger.append(E.queued("t1"))
        #expect(repeatResult.events.isEmpty && repeatResult.ignored == 1)
        #expect(try ledger.lastSeq() == 4)
    }
}
