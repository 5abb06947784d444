import Foundation
import GRDB
import Testing
@testable import PurchaseLedger
import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// The one declaration of each persisted record (``RecordSchema``) against everything made from
/// it: the migrations of both stores, the projection rows, the JSON and the snapshot records.
@Suite struct RecordSchemaTests {
    @Test func theSQLiteMigrationsMakeExactlyTheDeclaredColumns() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("a.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: RuleCase.finished)
        for table in Projector.Table.all {
            // A compact table (migration 0012) stores each coded text column as an INTEGER code,
            // behind a view of the declared name with the stored table's columns, in its order.
            let coded = Set((table.compact?.coded ?? []).map { table.columns[$0] })
            let (viewed, stored) = try ledger.read { db in
                (
                    try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table.name]),
                    try String.fetchAll(db, sql: "SELECT name FROM pragma_table_info(?)", arguments: [table.stored])
                )
            }
            #expect(viewed == stored && Set(viewed) == Set(table.columns), "\(table.name)")
            let made = try ledger.read { db in
                try Row.fetchAll(db, sql: "PRAGMA table_info(\(table.stored))").map { row -> ProjectionColumn in
                    let type: String = row["type"]
                    // An INTEGER PRIMARY KEY (a rowid) is never NULL, whatever `notnull` says.
                    let notNull: Bool = row["notnull"] || row["pk"] as Int > 0
                    let kind: ColumnType = type == "TEXT" ? .text : type == "REAL" ? .real : .integer
                    return ProjectionColumn(row["name"], kind, nullable: !notNull)
                }
            }
            // SQLite has one INTEGER type for integers and booleans.
            let declared = table.declared.map {
                ProjectionColumn($0.name, $0.type == .boolean || coded.contains($0.name) ? .integer : $0.type, nullable: $0.nullable)
            }
            #expect(Set(made) == Set(declared), "\(table.name): \(Set(made).symmetricDifference(declared).map { "\($0)" }.sorted())")
            for column in table.declared {
                let sqlType = try ledger.read { db in
                    try String.fetchOne(db, sql: "SELECT type FROM pragma_table_info(?) WHERE name = ?", arguments: [table.stored, column.name])
                }
                #expect(sqlType == (coded.contains(column.name) ? "INTEGER" : column.type.sqlite), "\(table.stored).\(column.name)")
            }
        }
    }

    @Test(.enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
    func theFleetMigrationsMakeTheDeclaredColumnsKeyedByLedger() throws {
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!)
        for table in Projector.Table.all {
            let made = try server.psql(
                """
                SELECT column_name || '|' || data_type || '|' || is_nullable FROM information_schema.columns
                WHERE table_schema = 'public' AND table_name = '\(table.name)'
                """, database: database
            ).split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            var declared = ["ledger_id|uuid|NO"] + table.declared.map { "\($0.name)|\($0.type.postgres)|\($0.nullable ? "YES" : "NO")" }
            // The fleet's own columns: the catalog's, on each transaction row.
            if table.name == Projector.Table.transactions.name { declared += FleetStore.catalogColumns.map { "\($0.column)|text|YES" } }
            #expect(Set(made) == Set(declared), "\(table.name): \(Set(made).symmetricDifference(declared).sorted())")
        }
    }

    /// A transaction and a download with every field set to something other than its default.
    static func full() -> (TransactionRecord, DownloadRecord) {
        var t = TransactionRecord.Fields(transaction: "t-1", product: "p", user: "u", quantity: 3, state: .purchased)
        t.finished = true; t.revoked = true; t.revocationReason = "refund"; t.originalTransaction = "t-0"
        t.storeTransactionId = "2000001"; t.downloads = ["t-1.d1", "other"]
        t.error = StoreError(domain: "SKErrorDomain", code: -2, message: "declined")
        t.wasDeferred = true; t.discardedContent = true
        t.queuedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_000_000)
        t.purchasedAt = Timestamp(nanosecondsSinceEpoch: 1_700_000_001_000_000_123)
        t.failedAt = Timestamp(millisecondsSinceEpoch: 1_600_000_000_000)
        t.finishedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_002_000)
        t.revokedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_003_000)
        t.events = 9
        t.paid.price = "0.99"; t.paid.currency = "EUR"; t.paid.priceSource = .event; t.paid.storefront = "FRA"
        t.paid.environment = .sandbox; t.paid.ownership = .familyShared; t.paid.offer = Offer(type: .promotional, id: "spring")
        var d = DownloadRecord.Fields(download: "t-1.d1", transaction: "t-1", url: "https://x/y", content: "c", contentVersion: ContentVersion("1.2"), contentLength: 42)
        d.state = .cancelled; d.started = true; d.progress = 0.25; d.bytesWritten = 10; d.timeRemaining = 3.5
        d.contentURL = "file:///c"; d.copiedOut = true; d.destination = "/dest"; d.bytesCopied = 7; d.discarded = true
        d.error = StoreError(domain: "NSURLErrorDomain", code: -1009, message: "offline"); d.cancelReason = .transactionFinished
        d.attempts = 2
        d.startedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_000_500)
        d.lastActivityAt = Timestamp(millisecondsSinceEpoch: 1_700_000_000_900)
        d.finishedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_001_000)
        d.copiedOutAt = Timestamp(millisecondsSinceEpoch: 1_700_000_001_500)
        d.events = 4
        return (TransactionRecord(fields: t), DownloadRecord(fields: d))
    }

    /// Every field a row gives back reads back as it was written; every field a snapshot holds
    /// too. A field added to a record and to its declaration with a wrong getter or setter fails
    /// here.
    @Test func everyDeclaredFieldRoundTrips() throws {
        let (t, d) = Self.full()
        // Rows: all but what a row does not hold (a transaction's downloads; a download's
        // snapshot-only progress details), which keep their blank values.
        var rowT = TransactionRecord.blank
        TransactionRecord.schema.read(&rowT, from: TransactionRecord.schema.row(TransactionRow(record: t)))
        rowT.downloads = t.downloads
        // Times go through whole milliseconds in a row.
        var expectedT = t.fields
        expectedT.purchasedAt = Timestamp(millisecondsSinceEpoch: 1_700_000_001_000)
        #expect(rowT == expectedT)
        var rowD = DownloadRecord.blank
        DownloadRecord.schema.read(&rowD, from: DownloadRecord.schema.row(DownloadRow(d, contentURL: d.contentURL)))
        var expectedD = d.fields
        expectedD.timeRemaining = nil; expectedD.bytesCopied = nil
        #expect(rowD == expectedD)

        // Snapshots: every field, exactly.
        var w = BinaryWriter()
        TransactionRecord.schema.writeSnapshot(t.fields, to: &w)
        DownloadRecord.schema.writeSnapshot(d.fields, to: &w)
        var snapT = TransactionRecord.blank, snapD = DownloadRecord.blank
        let atEnd = try w.bytes.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            try TransactionRecord.schema.readSnapshot(into: &snapT, &r)
            try DownloadRecord.schema.readSnapshot(into: &snapD, &r)
            return r.isAtEnd
        }
        #expect(snapT == t.fields)
        #expect(snapD == d.fields)
        #expect(atEnd)

        // Owned content: its row (times in whole milliseconds) and its snapshot.
        let o = OwnedContent(
            product: "p", content: "c", contentVersion: ContentVersion("2.1")!, destination: "/d", transaction: "t-1", download: "t-1.d1",
            copiedAt: Timestamp(millisecondsSinceEpoch: 1_700_000_004_000))
        let row = OwnedContent.schema.row(OwnedRow(fields: o, historySeq: 12))
        #expect(row.count == Projector.Table.ownedContent.columns.count && row.last == 12.columnValue)
        var rowO = OwnedContent.blank
        OwnedContent.schema.read(&rowO, from: row)
        #expect(rowO == o)
        var ow = BinaryWriter()
        OwnedContent.schema.writeSnapshot(o, to: &ow)
        var snapO = OwnedContent.blank
        try ow.bytes.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            try OwnedContent.schema.readSnapshot(into: &snapO, &r)
        }
        #expect(snapO == o)
    }

    /// The JSON members come from the declaration, in its order.
    @Test func theJSONFollowsTheDeclaration() throws {
        let (t, d) = Self.full()
        let json = try JSONSerialization.jsonObject(with: Data(StateJSON.encode(t).utf8)) as! [String: Any]
        #expect(json["transaction"] as? String == "t-1")
        #expect(json["revocationReason"] as? String == "refund")
        #expect((json["error"] as? [String: Any])?["code"] as? Int == -2)
        #expect(json["downloads"] as? [String] == ["t-1.d1", "other"])
        #expect(json["priceSource"] as? String == "event")
        #expect(json["wasDeferred"] == nil, "a field declared without a JSON key is not in the JSON")
        let keys = TransactionRecord.schema.fields.compactMap { $0.json == nil ? nil : $0.name }
        #expect(keys.first == "transaction")
        let download = try JSONSerialization.jsonObject(with: Data(StateJSON.encode(d).utf8)) as! [String: Any]
        #expect(download["lost"] as? Bool == true)
        #expect(download["contentURL"] is NSNull, "a cancelled download shows no content URL")
        #expect(download["attempts"] == nil)
    }

    /// Adding a field is one line of a declaration: its column, its row value, its JSON member,
    /// its snapshot bytes and its reading back all follow.
    @Test func aFieldAddedToADeclarationReachesEveryForm() throws {
        struct Sample: RecordSource, Hashable {
            var id = ""
            var count = 0
            var storefront: String?
            var fields: Sample { self }
        }
        let base: [RecordField<Sample>] = [
            .key("id", column: "id", json: "id", get: { $0.id }, set: { $0.id = $1 }),
            .field("count", column: "count", json: "count", get: { $0.count }, set: { $0.count = $1 }),
        ]
        let added = RecordSchema(base + [.field("storefront", column: "storefront", json: "storefront", get: { $0.storefront }, set: { $0.storefront = $1 })])
        #expect(RecordSchema(base).columnNames == ["id", "count"])
        #expect(added.columns.last == ProjectionColumn("storefront", .text, nullable: true))
        let sample = Sample(id: "a", count: 2, storefront: "USA")
        #expect(added.row(sample) == ["a".columnValue, 2.columnValue, "USA".columnValue])
        var back = Sample()
        added.read(&back, from: added.row(sample))
        #expect(back == sample)
        var w = JSONWriter()
        w.beginObject(); added.writeJSON(sample, to: &w); w.endObject()
        #expect(w.string == #"{"id":"a","count":2,"storefront":"USA"}"#)
        var bytes = BinaryWriter()
        added.writeSnapshot(sample, to: &bytes)
        var snap = Sample()
        try bytes.bytes.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            try added.readSnapshot(into: &snap, &r)
        }
        #expect(snap == sample)
    }

    /// Snapshots in format 9 (pages without record lengths) are still current: used for time
    /// travel, kept with their pages when a format-10 snapshot is written beside them, not taken
    /// again by `rebuild`, and checked by `verify`.
    @Test func formatNineSnapshotsStayCurrent() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("nine.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(snapshotInterval: 8))
        try ledger.append(contentsOf: StorageTests.everyType)
        let seqs = [Int64(5), 9, 17, try ledger.lastSeq()]
        let expected = try seqs.map { try ledger.state(atSeq: $0) }
        try DatabaseQueue(path: path).write { db in try db.execute(sql: "UPDATE snapshots SET format = 9") }
        let nine = try Ledger(path: path, configuration: testConfiguration(snapshotInterval: 8))
        let before = try nine.read { db in try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots WHERE format = 9 ORDER BY seq") }
        #expect(!before.isEmpty)
        #expect(try nine.rebuildProjections().snapshotsTaken == 0, "format 9 is current")
        for (seq, state) in zip(seqs, expected) { #expect(try nine.state(atSeq: seq) == state, "seq \(seq)") }
        for i in 0..<6 { try nine.append(contentsOf: [E.queued("n\(i)", "p2"), E.purchased("n\(i)")]) }
        let after = try nine.read { db in try Row.fetchAll(db, sql: "SELECT seq, format FROM snapshots ORDER BY seq") }
        #expect(after.filter { $0[1] as Int == 9 }.map { $0[0] as Int64 } == before, "kept")
        #expect(after.contains { $0[1] as Int == 10 }, "and a format-10 one written beside them")
        for (seq, state) in zip(seqs, expected) { #expect(try nine.state(atSeq: seq) == state, "seq \(seq), after the new snapshot") }
        let report = try nine.verify(everySnapshot: true)
        #expect(report.isValid, "\(report.problems)")
        #expect(report.snapshotsChecked == after.count)
    }

    /// A ledger whose snapshots an earlier version wrote (another snapshot format) gets them taken
    /// again by `rebuild`; states read from them equal the log's.
    @Test func rebuildRetakesSnapshotsAnEarlierVersionWrote() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("old.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration(snapshotInterval: 8))
        try ledger.append(contentsOf: StorageTests.everyType)
        let seqs = [Int64(5), 9, 17, try ledger.lastSeq()]
        let expected = try seqs.map { try ledger.state(atSeq: $0) }
        // Format 8: a layout no version of this code reads (format 9's pages are still read);
        // with a page only such a snapshot held, which must not outlive it.
        // Their pages damaged, each keeping its address: the retake writes them anew instead of
        // referring to them.
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE snapshots SET format = 8")
            try db.execute(sql: "INSERT INTO snapshot_pages (hash, raw_size, data) VALUES (x'00112233445566778899AABBCCDDEEFF', 3, x'30616263')")
            try db.execute(sql: "UPDATE snapshot_pages SET data = zeroblob(length(data)) WHERE raw_size != 3")
        }
        let stale = try Ledger(path: path, configuration: testConfiguration(snapshotInterval: 8))
        let before = try stale.read { db in try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        let summary = try stale.rebuildProjections()
        #expect(summary.snapshotsTaken == before.count && !before.isEmpty)
        let after = try stale.read { db in try Row.fetchAll(db, sql: "SELECT seq, format FROM snapshots ORDER BY seq") }
        #expect(after.map { $0[0] as Int64 } == before, "taken again at the same seqs")
        #expect(after.allSatisfy { $0[1] as Int == SnapshotCodec.format })
        #expect(try stale.rebuildProjections().snapshotsTaken == 0, "a second rebuild finds current snapshots")
        let (pages, referenced) = try stale.read { db in
            let manifests = try Data.fetchAll(db, sql: "SELECT manifest FROM snapshots")
            let referenced = try Set(
                manifests.flatMap { m -> [Data] in
                    let (_, kinds, overlays) = try SnapshotCodec.parse([UInt8](m))
                    return kinds.flatMap { $0.map { Data($0.address) } } + overlays.values.flatMap { $0.chunks.map { Data($0.address) } }
                })
            return (Set(try Data.fetchAll(db, sql: "SELECT hash FROM snapshot_pages")), referenced)
        }
        #expect(pages == referenced, "\(pages.subtracting(referenced).count) pages no snapshot refers to")
        let reopened = try Ledger(path: path, configuration: testConfiguration(snapshotInterval: 8))
        for (seq, state) in zip(seqs, expected) {
            #expect(try reopened.state(atSeq: seq) == state, "seq \(seq)")
        }
        #expect(try reopened.verify(everySnapshot: true).isValid)
    }
}
