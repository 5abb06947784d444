import Foundation
import GRDB
import Testing
@testable import PurchaseLedger
import PurchaseLedgerFleetTesting

/// The event log on real SQLite files with real LZ4.
@Suite struct StorageTests {
    /// A little of everything: every event type at least once.
    static let everyType: [Event] = [
        E.product("p1", contents: [("c1", "1.0")], related: ["p2"]),
        E.product("p2", kind: .autoRenewable),
        E.published("p1", "c1", "1.2"),
        E.queued("t1", quantity: 3, user: "ü-1 \"quoted\""),
        E.deferred("t1"),
        E.purchased("t1", downloads: ["d1", "d2"]),
        E.queued("t2", "p2"),
        E.failed("t2"),
        E.restoreStarted(),
        E.restored("t3", original: "t0", product: "p2"),
        E.restoreCompleted(),
        E.start("d1"), E.progress("d1", 0.25), E.pause("d1"), E.resume("d1"),
        Event(at: E.at(4), .downloadProgressed(download: "d1", progress: 1.0 / 3.0, bytesWritten: nil, timeRemaining: 12.345678)),
        E.done("d1"), E.copied("d1"), E.start("d2"), E.dlFailed("d2"), E.start("d2"), E.cancel("d2"),
        E.finished("t1"), E.finished("t2"), E.revoked("t3"), E.deleted("p1"),
        E.restoreStarted(at: 20), E.restoreFailed(at: 21),
        E.registered("https://kollus/x?key=1", "k1"),
        E.queued("t4", "p1"), E.purchased("t4", downloads: ["d4"]), E.start("d4"), E.progress("d4", 0.5), E.finished("t4"),
    ]

    @Test(arguments: [BlockCodec.raw, .lz4, .lz4Dictionary])
    func appendAndReadBack(codec: BlockCodec) throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("a.ledger"), configuration: testConfiguration(blockSize: 4, codec: codec))
        var stored: [RecordedEvent] = []
        for e in Self.everyType { stored += try ledger.append(e).events }
        #expect(stored.map(\.seq) == Array(1...Int64(stored.count)), "seq is gap-free from 1")
        let read = try ledger.events(from: 1, limit: 10_000)
        #expect(read == stored)
        #expect(try ledger.events(from: 7, limit: 3) == Array(stored[6..<9]))
        // Every range, whatever blocks it starts, ends or falls in (blocks are decoded ahead on
        // another thread): exactly the events asked for, in order; none for an empty range.
        let count = Int64(stored.count)
        for from in Int64(1)...(count + 2) {
            for through in (from - 2)...(count + 2) {
                var seen: [RecordedEvent] = []
                try ledger.forEachEvent(from: from, through: through) {
                    seen.append($0); return true
                }
                let expected = from > through ? [] : stored.filter { $0.seq >= from && $0.seq <= through }
                #expect(seen == expected, "events \(from)...\(through)")
            }
        }
        var firstFive: [Int64] = []
        try ledger.forEachEvent {
            firstFive.append($0.seq); return firstFive.count < 5
        }
        #expect(firstFive == [1, 2, 3, 4, 5], "a scan stops when asked")
        #expect(stored.contains { $0.appendedByLedger }, "the early finish of t4 appended a cancellation")
        // Versions within streams count from 1.
        #expect(read.filter { $0.stream == "transaction:t1" }.map(\.version) == [1, 2, 3, 4])
        #expect(try ledger.events(inStream: "download:d1").count == 7)
        let reopened = try Ledger(path: dir.path("a.ledger"), configuration: testConfiguration(blockSize: 4, codec: codec))
        #expect(try reopened.events(limit: 10_000) == stored)
        #expect(reopened.currentState == ledger.currentState)
        #expect(try reopened.verify().isValid)
    }

    @Test func jsonLinesRoundTripEveryType() throws {
        for e in Self.everyType {
            let line = JSONLines.encode(e)
            #expect(try JSONLines.decode(line) == e, "\(line)")
        }
    }

    @Test func aFailingAppendWritesNothing() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 4))
        try ledger.append(contentsOf: [E.product("p1"), E.queued("t1")])
        let before = try Data(contentsOf: URL(fileURLWithPath: path))
        let state = ledger.currentState
        let batch = [E.queued("t2"), E.purchased("t2"), E.queued("t3"), E.finished("t3"), E.queued("t4")]
        do {
            try ledger.append(contentsOf: batch)
            Issue.record("accepted")
        } catch let error as LedgerError {
            #expect(error.rule == .finishWhilePurchasing)
            #expect(error.batchIndex == 3)
        }
        #expect(try ledger.lastSeq() == 2)
        #expect(ledger.currentState == state)
        #expect(try ledger.transactions().map(\.transaction) == ["t1"])
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == before)
        // The next append starts from the right state.
        try ledger.append(contentsOf: [E.queued("t2"), E.purchased("t2")])
        #expect(try ledger.lastSeq() == 4)
        #expect(try ledger.verify().isValid)
    }

    /// Opens the file with plain SQLite, for tampering.
    func tamper(_ path: String, _ sql: String, _ arguments: StatementArguments = []) throws {
        let db = try DatabaseQueue(path: path)
        try db.write { try $0.execute(sql: sql, arguments: arguments) }
    }

    @Test func theChainCatchesEditedDeletedReorderedAndInsertedEvents() throws {
        let dir = try TemporaryDirectory()
        func fresh(_ name: String) throws -> String {
            let path = dir.path(name)
            let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 1000))
            for e in Self.everyType.prefix(12) { try ledger.append(e) }
            return path
        }
        func firstProblem(_ path: String) throws -> VerificationProblem? {
            var c = testConfiguration(blockSize: 1000)
            c.readOnly = true
            return try Ledger(path: path, configuration: c).verify().problems.first
        }
        // Edited: a payload byte of event 5.
        let edited = try fresh("edited.ledger")
        try tamper(edited, "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 't1', 't9') AS BLOB) WHERE seq = 5")
        #expect(try firstProblem(edited)?.seq == 5)
        #expect(try firstProblem(edited)?.kind == .chain)
        // Deleted: event 6.
        let deleted = try fresh("deleted.ledger")
        try tamper(deleted, "DELETE FROM events WHERE seq = 6")
        #expect(try firstProblem(deleted)?.seq == 6)
        #expect(try firstProblem(deleted)?.kind == .sequence)
        // Reordered: events 7 and 8 swap places.
        let reordered = try fresh("reordered.ledger")
        try tamper(reordered, "UPDATE events SET seq = -1 WHERE seq = 7; UPDATE events SET seq = 7 WHERE seq = 8; UPDATE events SET seq = 8 WHERE seq = -1")
        #expect(try firstProblem(reordered)?.seq == 7)
        // Inserted: a copy of event 3 pushed in as 4, later ones moved up.
        let inserted = try fresh("inserted.ledger")
        try tamper(
            inserted,
            "UPDATE events SET seq = seq + 100 WHERE seq >= 4; UPDATE events SET seq = seq - 99 WHERE seq >= 104; INSERT INTO events SELECT 4, stream, version, type, at_ns, recorded_ns, flags, codec, payload, link FROM events WHERE seq = 3"
        )
        #expect(try firstProblem(inserted)?.seq == 4)
        // Edited with every later link recomputed by plain SHA-256... is caught when the chain is keyed (KeyedChainTests).
    }

    @Test func corruptCompressedBytesGiveATypedErrorNamingTheSeq() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("c.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 0))
        for e in Self.everyType { try ledger.append(e) }
        // Scribble over the middle of the second block.
        try tamper(path, "UPDATE event_blocks SET data = substr(data, 1, 10) || randomblob(length(data) - 20) || substr(data, -10) WHERE first_seq = 9")
        var c = testConfiguration(blockSize: 8, snapshotInterval: 0)
        c.readOnly = true
        let reader = try Ledger(path: path, configuration: c)
        do {
            try reader.forEachEvent { _ in true }
            Issue.record("read corrupt data without an error")
        } catch let error as LedgerError {
            #expect(error.code == .corruptData)
            #expect(error.seq != nil && (9...16).contains(error.seq!), "\(error)")
        }
        let report = try reader.verify(all: true)
        #expect(!report.isValid)
        #expect(report.problems.contains { $0.kind == .corruptData && (9...16).contains($0.seq ?? 0) })
        // Truncated to nothing, and a zeroed dictionary: still errors, never crashes.
        try tamper(path, "UPDATE event_blocks SET data = x'' WHERE first_seq = 1; UPDATE dictionaries SET bytes = zeroblob(length(bytes))")
        #expect(throws: LedgerError.self) { try reader.forEachEvent { _ in true } }
    }

    /// A block row deleted, or a stray row added, with sqlite3: reading the events or the state
    /// past it stops with `corruptData` naming the first missing seq, never a log with a hole (a
    /// time-travel scan starts at the block holding its first seq; a stray row must not move that
    /// start past the real block).
    @Test func aHoleInTheLogIsAnErrorNeverASilentlyShorterLog() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("h.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 8, snapshotInterval: 16))
        for e in Self.everyType { try ledger.append(e) }
        for i in 0..<12 { try ledger.append(contentsOf: [E.queued("tx\(i)", "p2"), E.purchased("tx\(i)"), E.finished("tx\(i)")]) }
        let last = try ledger.lastSeq()
        #expect(last > 40)
        let expected = try (1...last).map { try ledger.state(atSeq: $0) }
        var c = testConfiguration(blockSize: 8, snapshotInterval: 16)
        c.readOnly = true

        // A stray row inside the block 17...24, with an empty range (first after last), then
        // with one that covers part of that block: time travel past it equals the log, or stops.
        let stray = dir.path("stray.ledger")
        let events = try ledger.events(from: 1, limit: 10_000)
        try ledger.checkpoint()
        try FileManager.default.copyItem(atPath: path, toPath: stray)
        for edit in [
            "INSERT INTO event_blocks (first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link) VALUES (19, 18, 0, NULL, 1, x'00', x'00')",
            "UPDATE event_blocks SET last_seq = 20 WHERE first_seq = 19",
        ] {
            try tamper(stray, edit)
            let reader = try Ledger(path: stray, configuration: c)
            // Read from inside the block, past the stray row's start: the block's own events.
            if edit.hasPrefix("INSERT") {
                #expect(try reader.events(from: 20, limit: 10_000).map(\.seq) == events.dropFirst(19).map(\.seq))
            }
            for seq in Int64(17)...30 {
                do {
                    #expect(try reader.state(atSeq: seq) == expected[Int(seq) - 1], "seq \(seq)")
                } catch let error as LedgerError {
                    #expect(error.code == .corruptData, "seq \(seq): \(error)")
                }
            }
        }

        // The block 17...24 deleted: the events, and every state past 16, stop there.
        try tamper(path, "DELETE FROM event_blocks WHERE first_seq = 17")
        let reader = try Ledger(path: path, configuration: c)
        do {
            try reader.forEachEvent { _ in true }
            Issue.record("read a log with a hole without an error")
        } catch let error as LedgerError {
            #expect(error.code == .corruptData && error.seq == 17 && error.description.contains("events 17...24 are missing"), "\(error)")
        }
        for seq in [Int64(20), 24, 30] {
            #expect(throws: LedgerError.self, "seq \(seq)") { try reader.state(atSeq: seq) }
        }
        // Before the hole, and past the next snapshot (taken, and bound to the chain, before the
        // row was deleted), the states are the log's.
        #expect(try reader.state(atSeq: 16) == expected[15])
        #expect(try reader.state(atSeq: last) == expected[Int(last) - 1])
        let report = try reader.verify(all: true)
        #expect(report.problems.contains { $0.seq == 17 })
    }

    /// Every compression in both link layouts (the older one, 4 link bytes inside each frame, is
    /// how ledgers before the trailing layout were written), in one ledger: read, verified, and
    /// a change inside any event of any block is pinned to that event.
    @Test func codecsAndLayoutsMixInOneLedger() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("mixed.ledger")
        var all: [RecordedEvent] = []
        let codecs: [BlockCodec] = [.raw, .lz4, .lz4Dictionary, .raw, .lz4, .lz4Dictionary]
        for (i, codec) in codecs.enumerated() {
            var c = testConfiguration(blockSize: 4, codec: codec)
            c.blockLayout = i < 3 ? .inlineLinks : .trailingLinks
            let ledger = try Ledger(path: path, configuration: c)
            let slice = Self.everyType[min(Self.everyType.count, i * 6)..<min(Self.everyType.count, i * 6 + 6)]
            for e in slice { all += try ledger.append(e).events }
        }
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 4))
        #expect(try ledger.events(limit: 1000) == all)
        let stored = try DatabaseQueue(path: path).read { try Int.fetchAll($0, sql: "SELECT DISTINCT codec FROM event_blocks ORDER BY codec") }
        #expect(stored == [0, 1, 2, 3, 4, 5])
        #expect(try ledger.verify(all: true).isValid)

        // A payload byte changed in each block in turn (raw blocks, whose bytes are the frames):
        // verify names the event it belongs to, whichever the layout.
        let blocks = try DatabaseQueue(path: path).read {
            try Row.fetchAll($0, sql: "SELECT first_seq, last_seq, codec FROM event_blocks WHERE codec IN (0, 3) ORDER BY first_seq")
        }
        #expect(blocks.count >= 2)
        // Each event's payload as stored (personal values as refs).
        var payloads: [Int64: [UInt8]] = [:]
        try DatabaseQueue(path: path).read { db in
            try EventStore.scan(db, integrity: true) { entry in
                payloads[entry.event.seq] = entry.payload
                return true
            }
        }
        for block in blocks {
            let first: Int64 = block[0], last: Int64 = block[1]
            let copy = dir.path("flipped-\(first).ledger")
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            // The last event of the block but one whose payload occurs once in the block's bytes.
            var data = try DatabaseQueue(path: copy).read {
                [UInt8](try Data.fetchOne($0, sql: "SELECT data FROM event_blocks WHERE first_seq = ?", arguments: [first])!)
            }
            func occurrences(_ seq: Int64) -> [Int] {
                let payload = payloads[seq] ?? []
                return (0...(data.count - payload.count)).filter { data[$0..<($0 + payload.count)].elementsEqual(payload) }.map { $0 + payload.count - 1 }
            }
            let target = try #require((first..<last).reversed().first { occurrences($0).count == 1 })
            data[occurrences(target)[0]] ^= 0x01
            try DatabaseQueue(path: copy).write {
                try $0.execute(sql: "UPDATE event_blocks SET data = ? WHERE first_seq = ?", arguments: [Data(data), first])
            }
            var readOnly = testConfiguration(blockSize: 4)
            readOnly.readOnly = true
            let report = try Ledger(path: copy, configuration: readOnly).verify(all: true)
            #expect(!report.isValid)
            #expect(report.problems.first?.seq == target, "codec \(block[2] as Int)")
        }
    }

    @Test func aLedgerFromTheFirstMigrationOpensWithTheCurrentCode() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("old.ledger")
        let old = try DatabaseQueue(path: path)
        try Migrations.migrator(upTo: 1).migrate(old)
        try old.write { try $0.execute(sql: "PRAGMA application_id = \(LedgerFile.applicationID)") }
        try old.close()
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        try ledger.append(contentsOf: [E.product("p1"), E.queued("t1")])
        #expect(try ledger.lastSeq() == 2)
        let applied = try DatabaseQueue(path: path).read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(applied == Migrations.names)
    }

    /// A ledger from before 0002 (snapshot pages in a WITHOUT ROWID table, transactions and
    /// downloads in rowid tables, every history row with its destination) is read as it is by a
    /// read-only open, which changes no byte and verifies, and migrated by the next writable open,
    /// its snapshots and what its tables and views say intact.
    @Test func migrationsOptionalForReadingLeaveReadOnlyOpensReading() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("before-0002.ledger")
        var c = testConfiguration(blockSize: 4, snapshotInterval: 5)
        c.writesPersonalValuesInline = true
        do {
            let ledger = try Ledger(path: path, configuration: c)
            for e in Self.everyType { try ledger.append(e) }
        }
        c.writesPersonalValuesInline = false
        // Back to the layout 0001 made (every table with a rowid but snapshot_pages), and to the
        // migrations list of a version before 0002.
        let layoutTables = ["snapshot_pages", "transactions", "downloads"]
        try DatabaseQueue(path: path).write { db in
            // 0008's table first, so that the rebuilds below reuse its pages.
            try db.execute(
                sql: "DROP TABLE signing_headers; DROP TABLE transaction_evidence; DROP TABLE product_views; DROP TABLE personal_value_blocks; DROP TABLE erased_commitments")
            try undoCompactProjections(db, keepHistoryView: false)
            try db.execute(sql: "PRAGMA legacy_alter_table = ON")
            // Without the columns 0005 and 0006 add, and with the projections an older reducer wrote.
            try db.execute(sql: "ALTER TABLE snapshots DROP COLUMN binding; UPDATE snapshots SET reducer_version = 1")
            try db.execute(sql: "UPDATE ledger_info SET value = 'reducer 1, projections 1' WHERE key = 'projection_stamp'")
            for column in ["price", "currency", "price_source", "storefront", "environment", "ownership", "offer_type", "offer_id"] {
                try db.execute(sql: "ALTER TABLE transactions DROP COLUMN \(column)")
            }
            for table in layoutTables {
                let indexes = try String.fetchAll(db, sql: "SELECT sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL AND tbl_name = ?", arguments: [table])
                var create = try String.fetchOne(db, sql: "SELECT sql FROM sqlite_master WHERE name = ?", arguments: [table])!
                create = create.hasSuffix(" WITHOUT ROWID") ? String(create.dropLast(" WITHOUT ROWID".count)) : create + " WITHOUT ROWID"
                create = create.replacingOccurrences(of: "CREATE TABLE \"\(table)\"", with: "CREATE TABLE old_\(table)")
                create = create.replacingOccurrences(of: "CREATE TABLE \(table) ", with: "CREATE TABLE old_\(table) ")
                try db.execute(sql: create)
                try db.execute(sql: "INSERT INTO old_\(table) SELECT * FROM \(table); DROP TABLE \(table); ALTER TABLE old_\(table) RENAME TO \(table)")
                for index in indexes { try db.execute(sql: index) }
            }
            // Every history row with its destination (0004 keeps none for a download's latest), in
            // the table as 0001 made it (verify compares the schema with the migrations').
            let history = Migrations.statement(of: "0001_initial", startingWith: "CREATE TABLE owned_content_history (")!
            try db.execute(
                sql: """
                    CREATE TEMP TABLE old_history AS SELECT h.seq, h.download_id, coalesce(h.destination, d.destination), h.copied_at_ms,
                        h.superseded_at_ms, h.deleted_at_ms FROM owned_content_history h JOIN downloads d USING (download_id);
                    DROP TABLE owned_content_history;
                    \(history);
                    INSERT INTO owned_content_history SELECT * FROM temp.old_history;
                    DROP TABLE temp.old_history;
                    """)
            try db.execute(sql: embeddedMigrations[0].sql.components(separatedBy: "\n").drop { !$0.hasPrefix("CREATE VIEW owned_content_history_view") }.joined(separator: "\n"))
            try undo0007(db)
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier <> '0001_initial'; PRAGMA user_version = 1")
        }
        func layout() throws -> (migrations: [String], pages: Int, withoutRowID: [Bool]) {
            try DatabaseQueue(path: path).read { db in
                (
                    try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations ORDER BY identifier"),
                    try Int.fetchOne(db, sql: "SELECT count(*) FROM snapshot_pages")!,
                    // Since 0012, transactions and downloads are views of the tables that store them.
                    try layoutTables.map {
                        try String.fetchOne(
                            db, sql: "SELECT sql FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                            arguments: [$0, ["transactions": "transaction_rows", "downloads": "download_rows"][$0] ?? $0])!.contains("WITHOUT ROWID")
                    }
                )
            }
        }
        let before = try layout()
        #expect(before.migrations == ["0001_initial"] && before.withoutRowID == [true, false, false] && before.pages > 0)
        #expect(Set(Migrations.names.dropFirst()) == Migrations.optionalForReading)
        let omitted = try DatabaseQueue(path: path).read {
            try Int.fetchOne($0, sql: "SELECT count(*) FROM owned_content_history WHERE destination IS NULL")!
        }
        #expect(omitted == 0)

        var readOnly = c
        readOnly.readOnly = true
        let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        let log = try Ledger(path: path, configuration: readOnly).events(limit: 1000)
        var folded = LedgerState()
        for e in log {
            LogReplay.step(&folded, e.event, seq: e.seq)
            #expect(try Ledger(path: path, configuration: readOnly).state(atSeq: e.seq) == folded, "seq \(e.seq)")
        }
        // The log, the chain and the snapshots verify; the projections an older version wrote are
        // named as such, and queries of them say so instead of answering from them.
        let report = try Ledger(path: path, configuration: readOnly).verify(all: true, everySnapshot: true)
        #expect(report.problems.map(\.kind) == [.projections] && report.problems[0].message.contains("another version"), "\(report.problems)")
        #expect(report.snapshotsChecked == 0, "an older reducer's snapshots are never used")
        #expect { try Ledger(path: path, configuration: readOnly).transactions() } throws: {
            ($0 as? LedgerError)?.code == .staleProjections && "\($0)".contains("purchase-ledger rebuild")
        }
        func rows() throws -> (transactions: [TransactionRecord], downloads: [DownloadRecord], history: [Row]) {
            let ledger = try Ledger(path: path, configuration: readOnly)
            var configuration = Configuration()
            configuration.readonly = true
            let history = try DatabaseQueue(path: path, configuration: configuration).read {
                try Row.fetchAll($0, sql: "SELECT * FROM owned_content_history_view ORDER BY seq")
            }
            return (try ledger.transactions(), try ledger.downloads(), history)
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes, "a read-only open writes nothing")

        let migrated = try Ledger(path: path, configuration: c)
        let after = try layout()
        #expect(after.migrations == Migrations.names && after.withoutRowID == [false, true, true] && after.pages == before.pages)
        let verified = try migrated.verify(all: true, everySnapshot: true)
        // The rebuild the upgrade ran took the older reducer's snapshots again.
        #expect(verified.isValid && verified.snapshotsChecked > report.snapshotsChecked)
        #expect(try migrated.state(atSeq: Int64(log.count)) == folded)
        let reprojected = try rows()
        #expect(reprojected.transactions == folded.transactions.values)
        #expect(reprojected.downloads.map(\.download) == folded.downloads.values.map(\.download))
        #expect(!reprojected.history.isEmpty)
        let (omittedAfter, free, pages) = try DatabaseQueue(path: path).read {
            (
                try Int.fetchOne($0, sql: "SELECT count(*) FROM owned_content_history WHERE destination IS NULL")!,
                try Int.fetchOne($0, sql: "PRAGMA freelist_count")!, try Int.fetchOne($0, sql: "PRAGMA page_count")!
            )
        }
        #expect(omittedAfter > 0)
        // Past a tenth of the file, freed pages are given back (LedgerFile's upgrading open).
        #expect(free * 10 <= pages, "the pages the migrations freed are given back: \(free) of \(pages) free")
    }

    @Test func newerLedgersAndForeignFilesAreRefused() throws {
        let dir = try TemporaryDirectory()
        let newer = dir.path("newer.ledger")
        _ = try Ledger(path: newer, configuration: testConfiguration())
        try tamper(newer, "INSERT INTO grdb_migrations (identifier) VALUES ('9999_from_the_future')")
        #expect { try Ledger(path: newer) } throws: { ($0 as? LedgerError)?.code == .schemaTooNew }

        let random = dir.path("random.ledger")
        try Data((0..<8192).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: random))
        #expect { try Ledger(path: random) } throws: { ($0 as? LedgerError)?.code == .notALedger }

        let other = dir.path("other.sqlite")
        try DatabaseQueue(path: other).write { try $0.execute(sql: "CREATE TABLE t (x)") }
        #expect { try Ledger(path: other) } throws: { ($0 as? LedgerError)?.code == .notALedger }
    }

    /// A creation killed after some migrations and before the file was marked as a ledger (found
    /// by the crash harness under load: earlier builds set the application id last) is finished by
    /// the next open, not refused as "not a ledger" forever.
    @Test func aCreationKilledHalfWayIsFinishedByTheNextOpen() throws {
        let dir = try TemporaryDirectory()
        for migrated in 1...Migrations.names.count {
            let path = dir.path("half-\(migrated).ledger")
            let queue = try DatabaseQueue(path: path)
            try queue.writeWithoutTransaction { try $0.execute(sql: "PRAGMA journal_mode = WAL") }
            try Migrations.migrator(upTo: migrated).migrate(queue)
            try queue.close()
            let ledger = try Ledger(path: path, configuration: testConfiguration())
            try ledger.append(E.product("p1"))
            #expect(try ledger.lastSeq() == 1)
            #expect(try ledger.identity() != nil)
            #expect(try ledger.verify().isValid)
        }
        // A foreign database that happens to have GRDB's migration table is still not a ledger.
        let foreign = dir.path("foreign.sqlite")
        let queue = try DatabaseQueue(path: foreign)
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { try $0.execute(sql: "CREATE TABLE t (x)") }
        try migrator.migrate(queue)
        try queue.close()
        #expect { try Ledger(path: foreign) } throws: { ($0 as? LedgerError)?.code == .notALedger }
    }

    @Test func filesAreReadableByTheirOwnerOnly() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("private.ledger")
        let ledger = try Ledger(path: path)
        try ledger.append(E.product("p1"))
        for file in [path, path + "-wal", path + "-shm"] where FileManager.default.fileExists(atPath: file) {
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? NSNumber
            #expect(mode?.intValue == 0o600, "\(file)")
        }
    }

    @Test func twoWritersOnOneFileLoseNothing() async throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("shared.ledger")
        try Ledger(path: path, configuration: testConfiguration()).append(E.product("p1"))
        // Two Ledger instances: two connection pools, as two processes would have.
        let a = try Ledger(path: path, configuration: testConfiguration())
        let b = try Ledger(path: path, configuration: testConfiguration())
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (ledger, prefix) in [(a, "a"), (b, "b")] {
                group.addTask {
                    for i in 0..<60 {
                        try ledger.append(contentsOf: [E.queued("\(prefix)\(i)"), E.purchased("\(prefix)\(i)")])
                    }
                }
            }
            try await group.waitForAll()
        }
        let check = try Ledger(path: path, configuration: testConfiguration())
        #expect(try check.lastSeq() == 241)
        #expect(try check.transactions().count == 120)
        #expect(try check.verify().isValid)
        #expect(check.currentState.transactions.count == 120)
    }

    @Test func anAppendAfterAnotherWriterOrAMaintenanceCommitStartsFromTheFile() throws {
        // An append that finds the file as its writer's last commit left it skips reading the
        // log's end; one after any other commit must not.
        let dir = try TemporaryDirectory()
        let path = dir.path("turns.ledger")
        let a = try Ledger(path: path, configuration: testConfiguration(blockSize: 8))
        let b = try Ledger(path: path, configuration: testConfiguration(blockSize: 8))
        try a.append(E.product("p1"))
        for i in 0..<3 { try a.append(contentsOf: [E.queued("a\(i)"), E.purchased("a\(i)")]) }
        // b seals a block out of the tail a left, and leaves a tail of its own.
        try b.append(contentsOf: (0..<5).flatMap { [E.queued("b\($0)"), E.purchased("b\($0)")] })
        #expect(try a.append(E.queued("a3")).lastSeq == 18)
        try a.append(E.purchased("a3"))
        try a.rebuildProjections()
        try b.append(E.queued("b5"))
        try a.checkpoint()
        for i in 4..<9 { try a.append(contentsOf: [E.queued("a\(i)"), E.purchased("a\(i)")]) }
        let check = try Ledger(path: path, configuration: testConfiguration())
        #expect(try check.lastSeq() == 30)
        #expect(try check.events(limit: 100).map(\.seq) == Array(1...30))
        #expect(try check.transactions().count == 15)
        #expect(try check.verify().isValid)
        #expect(a.currentState.transactions.count == 15)
    }

    @Test func manyTasksShareOneLedger() async throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("tasks.ledger"), configuration: testConfiguration(blockSize: 16, snapshotInterval: 50))
        try ledger.append(E.product("p1"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<8 {
                group.addTask {
                    for i in 0..<15 { try ledger.append(contentsOf: [E.queued("w\(writer)-\(i)"), E.purchased("w\(writer)-\(i)")]) }
                }
            }
            for _ in 0..<3 {
                group.addTask {
                    for _ in 0..<20 {
                        let seq = try ledger.lastSeq()
                        let state = try ledger.state(atSeq: seq)
                        // A reader sees whole appends: every queued transaction of the state is purchased.
                        #expect(state.transactions.values.allSatisfy { $0.state == .purchased })
                        _ = try ledger.transactions()
                    }
                }
            }
            try await group.waitForAll()
        }
        #expect(try ledger.lastSeq() == 241)
        #expect(try ledger.events(limit: 1000).map(\.seq) == Array(1...241))
        #expect(try ledger.verify().isValid)
    }

    @Test func keyedChains() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("keyed.ledger")
        var c = testConfiguration(blockSize: 1000)
        c.chainKey = Array("correct horse battery staple".utf8)
        let ledger = try Ledger(path: path, configuration: c)
        for e in Self.everyType.prefix(10) { try ledger.append(e) }
        #expect(try ledger.verify().isValid)
        #expect { try Ledger(path: path, configuration: testConfiguration()) } throws: { ($0 as? LedgerError)?.code == .keyRequired }
        var wrong = c
        wrong.chainKey = Array("guess".utf8)
        #expect { try Ledger(path: path, configuration: wrong) } throws: { ($0 as? LedgerError)?.code == .keyMismatch }

        // An attacker edits event 4 and recomputes every later link with plain SHA-256.
        let db = try DatabaseQueue(path: path)
        try db.write { db in
            try db.execute(sql: "UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 't1', 't7') AS BLOB) WHERE seq = 4")
            var previous = [UInt8](try Data.fetchOne(db, sql: "SELECT link FROM events WHERE seq = 3")!)
            let plain = HashChain(key: nil)
            for row in try Row.fetchAll(db, sql: "SELECT seq, version, type, at_ns, recorded_ns, flags, payload FROM events WHERE seq >= 4 ORDER BY seq") {
                let payload = [UInt8](row[6] as Data)
                let body = try payload.withUnsafeBytes { buffer -> EventBody in
                    var reader = BinaryReader(buffer)
                    return try PayloadCodec.decode(EventType(rawValue: UInt8(row[2] as Int64))!, &reader, personal: try PersonalValues.current(db))
                }
                let e = RecordedEvent(
                    seq: row[0], version: row[1], event: Event(at: Timestamp(nanosecondsSinceEpoch: row[3]), body),
                    recordedAt: Timestamp(nanosecondsSinceEpoch: row[4]), anomaly: nil, appendedByLedger: false)
                previous = plain.link(after: previous, frame: FrameCodec.canonical(e, payload: payload))
                try db.execute(sql: "UPDATE events SET link = ? WHERE seq = ?", arguments: [Data(previous), e.seq])
            }
        }
        var readOnly = c
        readOnly.readOnly = true
        let problem = try Ledger(path: path, configuration: readOnly).verify().problems.first
        #expect(problem?.kind == .chain)
        #expect(problem?.seq == 4)
    }

    @Test func snapshotsAreUsedWhenValidAndIgnoredOtherwise() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("snap.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(blockSize: 4, snapshotInterval: 5))
        for e in Self.everyType { try ledger.append(e) }
        let snapshots = try DatabaseQueue(path: path).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM snapshots") }
        #expect((snapshots ?? 0) >= 5)
        // The state at every seq equals a fold of the reducer over the log's prefix.
        let log = try ledger.events(limit: 1000)
        var folded = LedgerState()
        for e in log {
            LogReplay.step(&folded, e.event, seq: e.seq)
            #expect(try ledger.state(atSeq: e.seq) == folded, "seq \(e.seq)")
        }
        // A stale snapshot (another reducer version) and a damaged one are ignored.
        try tamper(path, "UPDATE snapshots SET reducer_version = reducer_version + 1 WHERE seq = (SELECT min(seq) FROM snapshots)")
        try tamper(path, "UPDATE snapshot_pages SET data = randomblob(length(data)) WHERE hash IN (SELECT hash FROM snapshot_pages ORDER BY hash LIMIT 3)")
        let reopened = try Ledger(path: path, configuration: testConfiguration(blockSize: 4, snapshotInterval: 5))
        #expect(reopened.currentState == folded)
        for e in log { #expect(try reopened.state(atSeq: e.seq).seq == e.seq) }
        #expect(try reopened.state(atSeq: Int64(log.count)) == folded)
    }

    /// `verify` compares the newest snapshot (or each one) with the log replayed to its seq: a
    /// snapshot that loads a different state, or does not load, is a problem at its seq.
    @Test func verifyComparesSnapshotsWithTheLog() throws {
        let dir = try TemporaryDirectory()
        let c = testConfiguration(blockSize: 4, snapshotInterval: 5)
        func fresh(_ name: String) throws -> (path: String, seqs: [Int64]) {
            let path = dir.path(name)
            let ledger = try Ledger(path: path, configuration: c)
            for e in Self.everyType { try ledger.append(e) }
            return (path, try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") })
        }
        func verify(_ path: String, every: Bool = false) throws -> VerificationReport {
            try Ledger(path: path, configuration: c).verify(all: true, everySnapshot: every)
        }
        let sound = try fresh("sound.ledger")
        #expect(sound.seqs.count >= 5)
        #expect(try verify(sound.path).isValid && verify(sound.path).snapshotsChecked == 1)
        #expect(try verify(sound.path, every: true).snapshotsChecked == sound.seqs.count)

        // The newest snapshot holds an earlier state: found by default.
        let newest = try fresh("newest.ledger")
        let (last, previous) = (newest.seqs[newest.seqs.count - 1], newest.seqs[newest.seqs.count - 2])
        try tamper(newest.path, "UPDATE snapshots SET manifest = (SELECT manifest FROM snapshots WHERE seq = ?) WHERE seq = ?", [previous, last])
        #expect(try verify(newest.path).problems.map(\.kind) == [.snapshot])
        #expect(try verify(newest.path).problems.first?.seq == last)

        // An older one: every snapshot is bound to the chain at its seq, so plain verify finds it,
        // and time travel does not use it (the state at its seq is the log's).
        let older = try fresh("older.ledger")
        let honest = try Ledger(path: older.path, configuration: c).state(atSeq: older.seqs[1])
        try tamper(older.path, "UPDATE snapshots SET manifest = (SELECT manifest FROM snapshots WHERE seq = ?) WHERE seq = ?", [older.seqs[0], older.seqs[1]])
        #expect(try verify(older.path).problems.map(\.seq) == [older.seqs[1]])
        #expect(try verify(older.path).problems.first?.message.contains("not bound to this ledger's chain") == true)
        #expect(try verify(older.path, every: true).problems.map(\.seq) == [older.seqs[1]])
        #expect(try Ledger(path: older.path, configuration: c).state(atSeq: older.seqs[1]) == honest)
        // Binding and manifest both copied from the other seq: still not this seq's chain.
        try tamper(older.path, "UPDATE snapshots SET binding = (SELECT binding FROM snapshots WHERE seq = ?) WHERE seq = ?", [older.seqs[0], older.seqs[1]])
        #expect(try verify(older.path).problems.map(\.seq) == [older.seqs[1]])
        #expect(try Ledger(path: older.path, configuration: c).state(atSeq: older.seqs[1]) == honest)

        // A damaged page: the snapshot does not load.
        let damaged = try fresh("damaged.ledger")
        try tamper(damaged.path, "UPDATE snapshot_pages SET data = randomblob(length(data))")
        let problems = try verify(damaged.path, every: true).problems
        #expect(problems.count == damaged.seqs.count && problems.allSatisfy { $0.kind == .snapshot && $0.message.contains("does not load") })
    }

    @Test func snapshotsShareTheirPagesAndStayBounded() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("thin.ledger")
        var c = testConfiguration(blockSize: 4, snapshotInterval: 3)
        c.maxSnapshots = 3
        let ledger = try Ledger(path: path, configuration: c)
        try ledger.append(E.product("p1"))
        for i in 0..<40 { try ledger.append(contentsOf: [E.queued("t\(i)"), E.purchased("t\(i)")]) }
        let (snapshots, pages, referenced) = try DatabaseQueue(path: path).read { db in
            (
                try Int.fetchOne(db, sql: "SELECT count(*) FROM snapshots")!, try Int.fetchOne(db, sql: "SELECT count(*) FROM snapshot_pages")!,
                try Data.fetchAll(db, sql: "SELECT manifest FROM snapshots").map(\.count).reduce(0, +)
            )
        }
        #expect(snapshots == 3)
        #expect(pages > 0 && referenced > 0)
        let seqs = try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        #expect(seqs.last == 81, "the latest is always kept")
        for seq in [Int64(1), 30, 60, 81] {
            var folded = LedgerState()
            for e in try ledger.events(limit: Int(seq)) { LogReplay.step(&folded, e.event, seq: e.seq) }
            #expect(try ledger.state(atSeq: seq) == folded)
        }
    }

    /// Past `maxSnapshotShare` of the file, snapshots are thinned (evenly, the newest kept, and
    /// kept alone if it is over the share by itself); time travel still gives the fold of the log.
    @Test func snapshotsStayWithinTheirShareOfTheFile() throws {
        let dir = try TemporaryDirectory()
        func usage(_ path: String) throws -> (snapshotBytes: Int, fileBytes: Int, seqs: [Int64]) {
            try DatabaseQueue(path: path).read { db in
                let pages = try Int.fetchOne(db, sql: "SELECT coalesce(sum(length(data)), 0) FROM snapshot_pages")!
                let manifests = try Int.fetchOne(db, sql: "SELECT coalesce(sum(length(manifest)), 0) FROM snapshots")!
                let inUse = try Int.fetchOne(db, sql: "PRAGMA page_count")! - Int.fetchOne(db, sql: "PRAGMA freelist_count")!
                let pageSize = try Int.fetchOne(db, sql: "PRAGMA page_size")!
                return (pages + manifests, inUse * pageSize, try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq"))
            }
        }
        func fill(_ name: String, share: Double, check: (String, Int64) throws -> Void = { _, _ in }) throws -> (Ledger, String) {
            let path = dir.path(name)
            var c = testConfiguration(blockSize: 4, snapshotInterval: 10)
            c.maxSnapshotShare = share
            let ledger = try Ledger(path: path, configuration: c)
            try ledger.append(E.product("p1"))
            for i in 0..<150 {
                let last = try ledger.append(contentsOf: [E.queued("t\(i)", user: "u\(i % 7)"), E.purchased("t\(i)")]).lastSeq
                try check(path, last)
            }
            return (ledger, path)
        }
        let (_, unbounded) = try fill("unbounded.ledger", share: 1)
        let all = try usage(unbounded)
        #expect(all.seqs.count == 30)
        // A tenth of the unbounded ledger's share: most snapshots have to go.
        let share = Double(all.snapshotBytes) / Double(all.fileBytes) / 10
        let (ledger, path) = try fill("bounded.ledger", share: share) { path, last in
            let now = try usage(path)
            #expect((now.seqs.last ?? 0) == last / 10 * 10, "the newest snapshot is kept (seq \(last))")
            #expect(Double(now.snapshotBytes) <= share * Double(now.fileBytes) || now.seqs.count == 1, "seq \(last): \(now)")
        }
        let bounded = try usage(path)
        #expect(bounded.seqs.count < all.seqs.count && bounded.seqs.count >= 1)
        var folded = LedgerState()
        for e in try ledger.events(limit: 1000) {
            LogReplay.step(&folded, e.event, seq: e.seq)
            #expect(try ledger.state(atSeq: e.seq) == folded, "seq \(e.seq)")
        }
        let report = try ledger.verify(all: true, everySnapshot: true)
        #expect(report.isValid && report.snapshotsChecked == bounded.seqs.count)
    }
}

@Suite struct SpoolTests {
    /// What an append decides is kept in memory up to a limit, then in an unlinked temporary
    /// file; either way it reads back exactly.
    @Test func bytesComeBackFromMemoryAndFromTheFile() throws {
        let spool = Spool(memoryLimit: 100)
        var generator = SystemRandomNumberGenerator()
        let pieces = (0..<50).map { i in (0..<(i * 37 % 300)).map { _ in UInt8.random(in: 0...255, using: &generator) } }
        let slices = try pieces.map { try spool.append($0) }
        for (piece, slice) in zip(pieces, slices).reversed() {
            #expect(try spool.read(slice) == piece)
        }
    }
}

@Suite struct JSONNumberTests {
    /// The parser reads short integers without strtod; every number must still come out as the
    /// text's own `Double` and `Int64` say.
    @Test func numbersMatchTheirText() throws {
        var texts = [
            "0", "-0", "7", "-7", "10", "4.99", "-0.5", "1e3", "1E-2", "123456789012345678", "-123456789012345678",
            "1234567890123456789", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "12345678901234567890123",
            "9007199254740993", "0.1", "2.5e+10",
        ]
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 { texts.append(String(Int64.random(in: -999_999_999_999_999_999...999_999_999_999_999_999, using: &generator))) }
        for text in texts {
            let parsed = try JSONParser.parse(Array("{\"n\":\(text)}".utf8))
            guard case .object(let members) = parsed, case .number(let double, let integer) = members[0].value else {
                Issue.record("\(text) did not parse as a number")
                continue
            }
            let expected = Double(text)!
            #expect(double == expected && double.sign == expected.sign, "\(text): \(double) against \(expected)")
            #expect(integer == (text.contains { ".eE".contains($0) } ? nil : Int64(text)), "\(text)")
        }
    }
}

@Suite struct ReadAheadTests {
    struct Boom: Error, Equatable { var at: Int }

    /// Every item comes out once, in order, across batch boundaries, then nil.
    @Test func itemsComeOutInOrder() throws {
        var next = 0
        let ahead = ReadAhead(batchSize: 7, depth: 2) { () -> Int? in
            guard next < 1000 else { return nil }
            defer { next += 1 }
            return next
        }
        defer { ahead.stop() }
        var seen: [Int] = []
        while let item = try ahead.next() { seen.append(item) }
        #expect(seen == Array(0..<1000))
        #expect(try ahead.next() == nil)
    }

    /// The producer's error comes out after every item produced before it, never earlier.
    @Test func anErrorComesAfterTheItemsBeforeIt() throws {
        var next = 0
        let ahead = ReadAhead(batchSize: 8, depth: 3) { () throws -> Int? in
            if next == 101 { throw Boom(at: next) }
            defer { next += 1 }
            return next
        }
        defer { ahead.stop() }
        var seen: [Int] = []
        #expect(throws: Boom(at: 101)) {
            while let item = try ahead.next() { seen.append(item) }
        }
        #expect(seen == Array(0...100))
    }

    /// A consumer that stops early (a refused event half-way through an import) ends the producer,
    /// even one waiting on a full buffer, and gets the input back: stop() returns only after the
    /// producer's thread is done with it.
    @Test func stoppingEarlyEndsTheProducer() throws {
        let produced = Locked(0)
        let ahead = ReadAhead(batchSize: 4, depth: 2) { () -> Int? in
            produced.withLock { $0 += 1 }
            return 1
        }
        #expect(try ahead.next() == 1)
        ahead.stop()
        let after = produced.withLock { $0 }
        // Bounded: the batches that fit in the buffer, the one being filled, and the one held.
        #expect(after <= 4 * (2 + 2) + 1)
        Thread.sleep(forTimeInterval: 0.05)
        #expect(produced.withLock { $0 } == after)
        ahead.stop()
    }
}

/// The projection tables are declared once (`Projector.Table`: name and columns, in the order the
/// row functions give values): the SQLite migrations and the fleet's PostgreSQL migrations must
/// make exactly those columns, so a column added in one place and not the others fails here.
@Suite struct WrappedErrorTests {
    /// A failure from SQLite keeps SQLite's own error (and its result code) as the underlying
    /// error, not only its text.
    @Test func sqliteErrorsKeepTheirCode() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("garbage.ledger")
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: path))
        let error = try #require(#expect(throws: LedgerError.self) { try Ledger(path: path) })
        #expect(error.code == .notALedger, "\(error)")
        #expect((error.underlying as? DatabaseError)?.resultCode == .SQLITE_NOTADB, "\(String(describing: error.underlying))")
    }
}
