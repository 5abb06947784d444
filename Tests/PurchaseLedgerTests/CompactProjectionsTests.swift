import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Migration 0012: `transactions` and `downloads` are views of `transaction_rows` and
/// `download_rows`, which hold repeated texts as codes into `projection_texts` and later times
/// as differences from the row's first (docs/storage.md, "The tables").
@Suite struct CompactProjectionsTests {
    /// Every event type, then a few hundred purchases with downloads, some failed or revoked.
    static func populated(_ path: String) throws -> Ledger {
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        for e in StorageTests.everyType { try ledger.append(e) }
        var events: [Event] = []
        for i in 0..<120 {
            events += [E.queued("c\(i)", "p1"), E.purchased("c\(i)", downloads: ["cd\(i)"], version: "1.\(i % 3)"), E.start("cd\(i)")]
            if i % 4 == 0 { events.append(E.dlFailed("cd\(i)")) } else { events += [E.done("cd\(i)"), E.copied("cd\(i)", to: "v\(i)")] }
            events.append(E.finished("c\(i)"))
            if i % 5 == 1 { events.append(E.revoked("c\(i)")) }
            if i % 10 == 2 { events += [E.queued("f\(i)", "p1"), E.failed("f\(i)")] }
        }
        try ledger.append(contentsOf: events)
        return ledger
    }

    static func rows(_ path: String, _ table: String) throws -> [Row] {
        try DatabaseQueue(path: path).read { try Row.fetchAll($0, sql: "SELECT * FROM \(table) ORDER BY 1") }
    }

    static func values(_ row: Row) -> [ColumnValue] {
        row.databaseValues.map { value in
            switch value.storage {
            case .null: .null
            case .int64(let n): .int64(n)
            case .double(let d): .double(d)
            case .string(let text): .string(text)
            case .blob(let data): .blob(data)
            }
        }
    }

    @Test func theViewsGiveTheRowsAReplayMakesFromCompactTables() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("c.ledger")
        let ledger = try Self.populated(path)
        #expect(try ledger.verify().isValid)
        let (state, history) = try ledger.read { db in try Ledger.replayForProjections(db) }
        // What the views give, value by value, is what the row functions make from the state.
        for (table, made) in Projector.rows(state: state, history: history) where table.compact != nil {
            let sql = "SELECT \(table.columns.joined(separator: ", ")) FROM \(table.name) ORDER BY 1"
            let viewed = try DatabaseQueue(path: path).read { db in try Row.fetchAll(db, sql: sql) }.map(Self.values)
            #expect(viewed == table.inKeyOrder(made), "\(table.name)")
            #expect(viewed.count > 100)
        }
        // Stored: codes and differences, never the texts.
        let stored = try DatabaseQueue(path: path).read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT typeof(r.product) AS product, typeof(r.state) AS state, r.purchased_at_ms AS purchased,
                           t.purchased_at_ms - t.queued_at_ms AS difference, (SELECT count(*) FROM projection_texts WHERE text = 'p1') AS texts
                    FROM transaction_rows r JOIN transactions t USING (transaction_id) WHERE transaction_id = 'c7'
                    """)!
        }
        #expect(stored["product"] as String == "integer" && stored["state"] as String == "integer")
        #expect(stored["purchased"] as Int64 == stored["difference"] as Int64 && stored["texts"] as Int == 1)
        let download = try DatabaseQueue(path: path).read { db in
            try Row.fetchOne(db, sql: "SELECT typeof(state) AS state, typeof(content_version) AS version FROM download_rows WHERE download_id = 'cd7'")!
        }
        #expect(download["state"] as String == "integer" && download["version"] as String == "integer")
        // A time made from a difference compares with a number written as text as a column does.
        let compared = try DatabaseQueue(path: path).read { db in
            try Row.fetchOne(
                db,
                sql: """
                    SELECT (SELECT count(*) FROM transactions WHERE purchased_at_ms > '0') AS text,
                           (SELECT count(*) FROM transactions WHERE purchased_at_ms > 0) AS number,
                           (SELECT count(*) FROM downloads WHERE finished_at_ms >= '1') AS downloads
                    """)!
        }
        #expect(compared["text"] as Int == compared["number"] as Int && compared["number"] as Int > 100 && compared["downloads"] as Int > 50)
    }

    /// A ledger from before 0012 reads the same on a read-only open, and its first writable open
    /// moves the rows: the views then give exactly the rows the tables held.
    @Test func aLedgerBeforeTheMigrationReadsAndMigratesToTheSameRows() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("old.ledger")
        let live: [String: [Row]]
        do {
            _ = try Self.populated(path)
            live = try LedgerTests.dump(path)
        }
        try DatabaseQueue(path: path).write { try undoCompactProjections($0) }
        #expect(try LedgerTests.dump(path) == live)
        var readOnly = testConfiguration()
        readOnly.readOnly = true
        let before = try Ledger(path: path, configuration: readOnly)
        #expect(try before.verify().isValid)
        let transactions = try before.transactions()
        #expect(transactions.count > 100)

        let migrated = try Ledger(path: path, configuration: testConfiguration())
        #expect(try LedgerTests.dump(path) == live)
        #expect(try migrated.transactions() == transactions)
        #expect(try migrated.verify().isValid)
        let applied = try DatabaseQueue(path: path).read { try String.fetchAll($0, sql: "SELECT identifier FROM grdb_migrations") }
        #expect(applied == Migrations.names)
        // And it goes on: appends and erasures write the compact tables.
        try migrated.append(contentsOf: [E.queued("after", "p1"), E.purchased("after", downloads: ["after-d"])])
        #expect(try migrated.transaction("after")?.state == .purchased)
        #expect(try migrated.verify().isValid)
    }

    /// Edits with sqlite3 of what the views read (a text, a code, a difference), of a view
    /// itself, or a trigger added: `verify` names each; `rebuild` repairs the rows.
    @Test func editsOfTheCompactTablesTheirTextsAndViewsAreCaught() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("e.ledger")
        let ledger = try Self.populated(path)
        let live = try LedgerTests.dump(path)
        try DatabaseQueue(path: path).writeWithoutTransaction { try $0.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        try FileManager.default.copyItem(atPath: path, toPath: dir.path("sound.ledger"))
        func problems() throws -> [String] { try ledger.verify(all: true).problems.map(\.message) }
        for edit in [
            "UPDATE projection_texts SET text = 'p9' WHERE text = 'p1'",
            "UPDATE transaction_rows SET product = (SELECT code FROM projection_texts WHERE text = 'purchased') WHERE transaction_id = 'c3'",
            "UPDATE download_rows SET finished_at_ms = finished_at_ms + 1 WHERE download_id = 'cd5'",
            "UPDATE transaction_rows SET state = 999 WHERE transaction_id = 'c4'",
        ] {
            try DatabaseQueue(path: path).write { try $0.execute(sql: edit) }
            let found = try problems()
            #expect(found.contains { $0.contains("differs from a fresh rebuild") }, "\(edit): \(found)")
            _ = try ledger.rebuildProjections()
            // A text edited stays in projection_texts; the rows use the right one again.
            try DatabaseQueue(path: path).write {
                try $0.execute(sql: "UPDATE projection_texts SET text = 'p1' WHERE text = 'p9' AND NOT EXISTS (SELECT 1 FROM projection_texts WHERE text = 'p1')")
            }
            #expect(try LedgerTests.dump(path) == live, "\(edit)")
            #expect(try problems().isEmpty, "\(edit)")
        }
        // The writer reads the codes again after another connection's commit: after 'p1' was
        // renamed with sqlite3 and the rows rebuilt, a new purchase of p1 is p1, not 'p8'.
        try ledger.append(contentsOf: [E.queued("late", "p1")])
        try DatabaseQueue(path: path).write { try $0.execute(sql: "UPDATE projection_texts SET text = 'p8' WHERE text = 'p1'") }
        _ = try ledger.rebuildProjections()
        try ledger.append(contentsOf: [E.queued("later", "p1")])
        #expect(try ledger.transaction("later")?.product == "p1")
        #expect(try problems().isEmpty)
        let view = try DatabaseQueue(path: path).read { try String.fetchOne($0, sql: "SELECT sql FROM sqlite_master WHERE name = 'transactions'")! }
        // The same rows for verify's full scan, but not for a report of failed purchases.
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DROP VIEW transactions")
            try db.execute(sql: view.replacingOccurrences(of: "state.text AS state", with: "replace(state.text, 'failed', 'purchased') AS state"))
        }
        var found = try problems()
        #expect(found.last?.contains("the view transactions is not the one the migrations made") == true, "\(found)")
        // rebuild makes it again.
        _ = try ledger.rebuildProjections()
        #expect(try problems().isEmpty)
        // A change behind what a comparison that dropped comments would take for one: the view's
        // text is compared byte for byte.
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DROP VIEW transactions")
            try db.execute(sql: view.replacingOccurrences(of: "r.offer_id\n", with: "r.offer_id \"--\"\n"))
        }
        found = try problems()
        #expect(found.last?.contains("the view transactions is not the one the migrations made") == true, "\(found)")
        _ = try ledger.rebuildProjections()
        #expect(try problems().isEmpty)
        // A trigger, also under the name of a table or view (triggers have names of their own).
        for name in ["hide", "transactions", "grdb_migrations"] {
            try DatabaseQueue(path: path).write { db in
                try db.execute(sql: "CREATE TRIGGER \(name) AFTER INSERT ON transaction_rows BEGIN DELETE FROM transaction_rows WHERE transaction_id = 'c1'; END")
            }
            found = try problems()
            #expect(
                found == ["the file holds a trigger, \(name), which the ledger never makes: it was added with sqlite3 and can change what is written (DROP TRIGGER \(name))"],
                "\(found)")
            try DatabaseQueue(path: path).write { try $0.execute(sql: "DROP TRIGGER \(name)") }
        }
        // An index an analyst adds changes no result, and is no problem.
        try DatabaseQueue(path: path).write { try $0.execute(sql: "CREATE INDEX by_product ON transaction_rows (product)") }
        #expect(try problems().isEmpty)
        try DatabaseQueue(path: path).write { try $0.execute(sql: "DROP VIEW downloads") }
        found = try problems()
        #expect(found.count == 1 && found[0].contains("the view downloads, which the migrations make, is missing"), "\(found)")

        // A code no text has yet, in a column that shows NULL: the rows compare equal now.
        _ = try ledger.rebuildProjections()
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE transaction_rows SET offer_type = (SELECT max(code) + 1 FROM projection_texts) WHERE transaction_id = 'c9'")
        }
        found = try problems()
        #expect(found.count == 1 && found[0].contains("which no text of projection_texts has"), "\(found)")

        // With the log edited too, a plain verify names the log first, the schema after it.
        let both = dir.path("both.ledger")
        try FileManager.default.copyItem(atPath: dir.path("sound.ledger"), toPath: both)
        try DatabaseQueue(path: both).write { db in
            try db.execute(sql: "CREATE TRIGGER hide AFTER INSERT ON transaction_rows BEGIN SELECT 1; END")
            try db.execute(sql: "UPDATE event_blocks SET last_link = zeroblob(32) WHERE first_seq = (SELECT min(first_seq) FROM event_blocks)")
        }
        let first = try Ledger(path: both, configuration: testConfiguration()).verify().problems
        #expect(first.first?.kind == .chain, "\(first)")
        #expect(try Ledger(path: both, configuration: testConfiguration()).verify(all: true).problems.last?.kind == .schema)

        // On copies of the sound file: a table made case-blind (every value as it was, so the
        // rows compare equal, but a report would merge 'GEM' and 'gem'), and a table replaced
        // by a view (which could show each reader something else) over the texts kept under
        // another name. The views' own text stays as it was (legacy_alter_table).
        for (name, edit, expected) in [
            (
                "nocase.ledger", "CREATE TABLE projection_texts (code INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE COLLATE NOCASE)",
                ["the table projection_texts declares a collation or a generated column"]
            ),
            // The collation after what a text comparison that dropped comments took for one.
            (
                "hidden.ledger", "CREATE TABLE projection_texts (code INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE DEFAULT '--' COLLATE NOCASE)",
                ["the table projection_texts declares a collation or a generated column"]
            ),
            // A generated column, in SQLite's short form (no GENERATED): SQLite itself says so.
            (
                "generated.ledger", "CREATE TABLE projection_texts (code INTEGER PRIMARY KEY, text TEXT AS (upper(code)))",
                ["the table projection_texts declares its column text otherwise than the migrations made it"]
            ),
            (
                "view.ledger", "CREATE VIEW projection_texts AS SELECT code, text FROM kept_texts",
                ["projection_texts is a view, where the migrations made a table"]
            ),
            // One that tells verify's connection (which has a temp schema) from a report's: with
            // trusted_schema off it does not read at all, in verify or anywhere else.
            (
                "lying.ledger",
                """
                CREATE VIEW projection_texts AS SELECT code, CASE WHEN EXISTS (SELECT 1 FROM pragma_database_list WHERE name = 'temp')
                    THEN text ELSE text || '0' END AS text FROM kept_texts
                """,
                ["table transactions could not be read", "projection_texts is a view, where the migrations made a table"]
            ),
        ] {
            let copy = dir.path(name)
            try FileManager.default.copyItem(atPath: dir.path("sound.ledger"), toPath: copy)
            try DatabaseQueue(path: copy).writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA legacy_alter_table = ON; ALTER TABLE projection_texts RENAME TO kept_texts")
                try db.execute(sql: edit)
                if edit.hasPrefix("CREATE TABLE") {
                    let columns = edit.contains(" AS (") ? "code" : "code, text"
                    try db.execute(sql: "INSERT INTO projection_texts (\(columns)) SELECT \(columns) FROM kept_texts; DROP TABLE kept_texts")
                }
            }
            let copied = try Ledger(path: copy, configuration: testConfiguration())
            let problems = try copied.verify(all: true).problems.map(\.message)
            for message in expected { #expect(problems.contains { $0.contains(message) }, "\(name): \(problems)") }
            #expect(try !copied.verify().isValid)
        }
    }

    /// Texts Swift takes as equal but SQLite does not (an error domain "é" and "e" + U+0301, a
    /// product "café" and a domain "cafe" + U+0301, the Ångström sign and Å): each keeps its
    /// own code and its own bytes, whatever order they come in, through appends and rebuilds.
    @Test func textsEqualAsUnicodeButNotAsBytesKeepTheirOwnCodes() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("u.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        func failed(_ t: String, domain: String) -> Event {
            Event(at: E.at(2), .transactionFailed(transaction: t, error: StoreError(domain: domain, code: 2, message: "m")))
        }
        try ledger.append(contentsOf: [
            E.product("p1"), E.queued("t1", "p1"), failed("t1", domain: "e\u{301}"), E.queued("t2", "p1"), failed("t2", domain: "\u{E9}"),
            E.queued("t3", "p1"), failed("t3", domain: "cafe\u{301}"), E.product("caf\u{E9}"), E.queued("t4", "caf\u{E9}"),
            E.queued("t5", "p1"), failed("t5", domain: "\u{212B}"), E.queued("t6", "p1"), failed("t6", domain: "\u{C5}"),
        ])
        func stored() throws -> [String: String] {
            try DatabaseQueue(path: path).read { db in
                Dictionary(
                    uniqueKeysWithValues: try Row.fetchAll(db, sql: "SELECT transaction_id, hex(coalesce(error_domain, product)) AS bytes FROM transactions").map {
                        ($0["transaction_id"] as String, $0["bytes"] as String)
                    })
            }
        }
        let expected = ["t1": "65CC81", "t2": "C3A9", "t3": "63616665CC81", "t4": "636166C3A9", "t5": "E284AB", "t6": "C385"]
        #expect(try stored() == expected)
        #expect(try ledger.verify().isValid)
        _ = try ledger.rebuildProjections(rewritingEveryRow: true)
        #expect(try stored() == expected)
        #expect(try ledger.verify().isValid)
    }

    /// A code made in a transaction that is rolled back is forgotten with it: the next write of
    /// the same text makes it again instead of pointing at a row that does not exist.
    @Test func aCodeMadeInARolledBackTransactionIsNotUsedAfter() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("r.ledger")
        _ = try Self.populated(path)
        let queue = try DatabaseQueue(path: path)
        let statements = PreparedStatements()
        struct Abandon: Error {}
        let made = Locked<Int64>(0), again = Locked<Int64>(0)
        try queue.writeWithoutTransaction { db in
            do {
                try LedgerFile.immediateTransaction(db, statements) {
                    made.withLock { $0 = (try? statements.texts.code("a new text", db)) ?? -1 }
                    throw Abandon()
                }
                Issue.record("the transaction was not abandoned")
            } catch is Abandon {}
            try LedgerFile.immediateTransaction(db, statements) {
                again.withLock { $0 = (try? statements.texts.code("a new text", db)) ?? -1 }
                // Taken by another text first: a stale code would name it.
                _ = try statements.texts.code("another new text", db)
            }
        }
        let (text, cached) = try queue.write { db in
            (
                try String.fetchOne(db, sql: "SELECT text FROM projection_texts WHERE code = ?", arguments: [again.withLock { $0 }]),
                try statements.texts.code("a new text", db)
            )
        }
        #expect(made.withLock { $0 } > 0 && text == "a new text" && cached == again.withLock { $0 })
    }
}
