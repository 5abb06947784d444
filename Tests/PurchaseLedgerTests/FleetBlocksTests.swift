import Foundation
import GRDB
import PostgresNIO
import Testing
@testable import PurchaseLedger
@testable import PurchaseLedgerFleet
import PurchaseLedgerFleetTesting

/// The fleet's log in blocks (migration 0012): the codec refuses every edit of a block's shape,
/// `migrate` moves a store's event rows into blocks unchanged, and ship keeps a ledger's own
/// events past a head moved back into a block while naming the blocks that are not its own.
@Suite(.serialized, .enabled(if: FleetServer.available && Workload.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"))
struct FleetBlocksTests {
    /// A ledger of `count` events of the reference workload.
    static func ledger(_ count: Int, in dir: TemporaryDirectory, name: String = "device.ledger") throws -> Ledger {
        let lines = try String(contentsOfFile: try Workload.file(events: 20_000), encoding: .utf8).split(separator: "\n").prefix(count)
        let ledger = try Ledger(path: dir.path(name))
        _ = try ledger.append(contentsOf: try lines.map { try JSONLines.decode(String($0)) })
        return ledger
    }

    @Test func aBlockDecodesToItsEventsAndEveryEditOfItsShapeIsNamed() throws {
        let dir = try TemporaryDirectory()
        let chained = try Self.ledger(1500, in: dir).shipment(after: 0, link: nil).events
        let events = chained.map(UploadedFrame.init)
        let blocks = try FleetBlock.encode(events)
        #expect(blocks.map(\.firstSeq) == [1, 1025] && blocks.last?.lastSeq == Int64(events.count))
        var decoded: [UploadedFrame] = []
        for b in blocks {
            decoded += try FleetBlock.decode(firstSeq: b.firstSeq, lastSeq: b.lastSeq, rawSize: b.rawSize, frames: b.frames, links: b.links)
        }
        #expect(decoded.map(\.seq) == events.map(\.seq) && decoded.map(\.link) == events.map(\.link) && decoded.map(\.payload) == events.map(\.payload))
        #expect(decoded.map(\.at) == events.map(\.at) && decoded.map(\.recorded) == events.map(\.recorded) && decoded.map(\.version) == events.map(\.version))
        #expect(decoded.map(\.type) == events.map(\.type) && decoded.map(\.anomaly) == events.map(\.anomaly))
        let bytes = blocks.reduce(0) { $0 + $1.frames.count + $1.links.count }
        #expect(bytes < events.count * 64, "\(bytes) bytes for \(events.count) events")

        let b = blocks[1]
        // The scan walks the same events without copying them, with the subject of the types asked
        // for (a purchase's transaction, its stream's name); and the first event's time alone.
        var scanned: [(seq: Int64, type: EventType, anomaly: Rule?, subject: String?)] = []
        try FleetBlock.scan(firstSeq: b.firstSeq, lastSeq: b.lastSeq, rawSize: b.rawSize, frames: b.frames, subjectOf: [.transactionPurchased]) {
            scanned.append(($0, $1, $2, $3))
        }
        let inB = chained.filter { $0.event.seq >= b.firstSeq }
        #expect(scanned.map(\.seq) == inB.map(\.event.seq) && scanned.map(\.type) == inB.map(\.event.event.type) && scanned.map(\.anomaly) == inB.map(\.event.anomaly))
        #expect(scanned.contains { $0.subject != nil })
        #expect(scanned.map { $0.subject.map { "transaction:" + $0 } } == inB.map { $0.event.event.type == .transactionPurchased ? $0.event.stream : nil })
        #expect(try FleetBlock.firstEventAt(firstSeq: b.firstSeq, lastSeq: b.lastSeq, rawSize: b.rawSize, frames: b.frames) == inB[0].event.event.at.nanosecondsSinceEpoch)
        #expect(throws: LedgerError.self) {
            try FleetBlock.scan(firstSeq: b.firstSeq, lastSeq: b.lastSeq, rawSize: b.rawSize, frames: Array(b.frames.dropLast(9)), subjectOf: []) { _, _, _, _ in }
        }
        #expect(throws: LedgerError.self) {
            try FleetBlock.scan(firstSeq: b.firstSeq, lastSeq: b.lastSeq - 1, rawSize: b.rawSize, frames: b.frames, subjectOf: []) { _, _, _, _ in }
        }
        #expect(throws: LedgerError.self) { try FleetBlock.firstEventAt(firstSeq: b.firstSeq, lastSeq: b.lastSeq, rawSize: b.rawSize + 1, frames: b.frames) }
        func refusal(_ first: Int64, _ last: Int64, _ raw: Int64, _ frames: [UInt8], _ links: [UInt8]) -> String {
            do {
                _ = try FleetBlock.decode(firstSeq: first, lastSeq: last, rawSize: raw, frames: frames, links: links)
                return "decoded"
            } catch {
                return error.code == .corruptData ? error.message : "\(error.code)"
            }
        }
        #expect(refusal(b.firstSeq, b.lastSeq + 1, b.rawSize, b.frames, b.links).contains("bytes of links"))
        #expect(refusal(b.firstSeq, b.lastSeq + 1, b.rawSize, b.frames, b.links + b.links.suffix(32)).contains("does not decode"))
        #expect(refusal(b.firstSeq, b.firstSeq - 2, b.rawSize, b.frames, b.links).contains("range no ship writes"))
        #expect(refusal(0, b.lastSeq, b.rawSize, b.frames, b.links).contains("range no ship writes"))
        #expect(refusal(1, 5000, b.rawSize, b.frames, b.links).contains("range no ship writes"))
        #expect(refusal(b.firstSeq, b.lastSeq, 1 << 31, b.frames, b.links).contains("claims"))
        #expect(refusal(b.firstSeq, b.lastSeq, FleetBlock.maxRawSize + 1, b.frames, b.links).contains("more than any block a ship writes"))
        #expect(refusal(b.firstSeq, b.lastSeq, Int64(b.frames.count) * 300, b.frames, b.links).contains("does not decompress"))
        #expect(refusal(b.firstSeq, b.lastSeq, b.rawSize, Array(b.frames.dropLast(9)), b.links).contains("does not decompress"))
        #expect(refusal(b.firstSeq, b.lastSeq - 1, b.rawSize, b.frames, Array(b.links.dropLast(32))).contains("bytes after its last frame"))
        // A link edited is the block's shape still: the chain (ship, the audit) catches it.
        var links = b.links
        links[40] ^= 1
        #expect(refusal(b.firstSeq, b.lastSeq, b.rawSize, b.frames, links) == "decoded")
    }

    /// A store migrated before 0012, holding one row per event (as its ships wrote them, one
    /// ledger with a row missing): `migrate` moves every row into blocks unchanged and drops the
    /// old table; the audit still names the missing event, and the ledgers ship on. A row no
    /// block can hold stops the migration, naming it, with nothing changed.
    @Test func migrateMovesAStoresEventRowsIntoBlocks() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database(migrated: false)
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        var sql = "CREATE TABLE fleet_migrations (name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());\n"
        for migration in PurchaseLedgerFleet.embeddedMigrations.prefix(11) { sql += migration.sql + "\nINSERT INTO fleet_migrations (name) VALUES ('\(migration.name)');\n" }
        _ = try server.psql(sql, database: database)
        // Two ledgers as an earlier version's ships left them: a row each in `ledgers` and one
        // row per event (their projection rows are replaced by their next ship).
        let ledgers = [try Self.ledger(1200, in: dir), try Self.ledger(30, in: dir, name: "other.ledger")]
        var shipped: [[ChainedEvent]] = []
        for ledger in ledgers {
            let id = try #require(try ledger.identity()).id
            let events = try ledger.shipment(after: 0, link: nil).events
            shipped.append(events)
            let head = try #require(try ledger.identityStatement(seq: Int64(events.count), link: events.last!.link)).json
            let key = try #require(try ledger.identity()?.publicKey).rawRepresentation
            _ = try server.psql(
                """
                INSERT INTO ledgers (ledger_id, identity_origin, last_seq, last_link, first_shipped_at, last_shipped_at, rows_version, public_key, head_statement, chain)
                VALUES ('\(id)', 'created', \(events.count), '\\x\(Hex.encode(events.last!.link))', now(), now(), 4, '\\x\(Hex.encode(key))', $$\(head)$$, 'sha256')
                """, database: database)
            for part in stride(from: 0, to: events.count, by: 150) {
                let values = events[part..<min(part + 150, events.count)].map { c in
                    let e = c.event
                    return "('\(id)', \(e.seq), '\(e.stream)', \(e.version), '\(e.event.type.name)', \(e.event.at.nanosecondsSinceEpoch), "
                        + "\(e.recordedAt.nanosecondsSinceEpoch), \(e.anomaly.map { "'\($0.name)'" } ?? "NULL"), \(e.appendedByLedger), "
                        + "'\\x\(Hex.encode(c.payload))', '\\x\(Hex.encode(c.link))')"
                }
                _ = try server.psql("INSERT INTO events VALUES \(values.joined(separator: ",\n"))", database: database)
            }
        }
        let ids = try ledgers.map { try #require(try $0.identity()).id }
        _ = try server.psql("DELETE FROM events WHERE ledger_id = '\(ids[1])' AND seq = 6", database: database)

        // A row of a version no ship writes: refused, named, nothing changed.
        _ = try server.psql("UPDATE events SET version = -1 WHERE ledger_id = '\(ids[1])' AND seq = 8", database: database)
        let negative = try cli(["migrate", url])
        #expect(negative.status != 0 && negative.stderr.contains("event 8 of ledger \(ids[1]) cannot move into a block"), "\(negative.stderr)")
        _ = try server.psql(
            "UPDATE events SET version = \(shipped[1][7].event.version) WHERE ledger_id = '\(ids[1])' AND seq = 8", database: database)
        // A row of a type no version writes: refused, named, nothing changed.
        _ = try server.psql("UPDATE events SET type = 'nonsense' WHERE ledger_id = '\(ids[1])' AND seq = 9", database: database)
        let refused = try cli(["migrate", url])
        #expect(refused.status != 0 && refused.stderr.contains("event 9 of ledger \(ids[1]) cannot move into a block"), "\(refused.stderr)")
        #expect(try server.psql("SELECT count(*) FROM events", database: database) == "\(shipped[0].count + shipped[1].count - 1)\n")
        #expect(try server.psql("SELECT to_regclass('event_blocks') IS NULL, count(*) FROM fleet_migrations", database: database) == "t|11\n")
        // (Put back as it was: the audit below finds only the missing row.)
        _ = try server.psql(
            "UPDATE events SET type = '\(shipped[1][8].event.event.type.name)' WHERE ledger_id = '\(ids[1])' AND seq = 9", database: database)

        let migrated = try cli(["migrate", url])
        #expect(migrated.status == 0 && migrated.stdout.contains("0012_event_blocks"), "\(migrated.stdout) \(migrated.stderr)")
        #expect(try server.psql("SELECT to_regclass('events') IS NULL, to_regclass('events_before_blocks') IS NULL", database: database) == "t|t\n")
        let fleet = try await FleetStore.connect(url)
        let moved = try await fleet.storedEvents(ofLedger: ids[0])
        #expect(moved.map(\.seq) == shipped[0].map(\.event.seq) && moved.map(\.link) == shipped[0].map(\.link) && moved.map(\.payload) == shipped[0].map(\.payload))
        #expect(moved.map(\.type) == shipped[0].map(\.event.event.type) && moved.map(\.at) == shipped[0].map(\.event.event.at.nanosecondsSinceEpoch))
        let blocks = try await fleet.fetch("SELECT ledger_id::text AS id, first_seq, last_seq FROM event_blocks ORDER BY 1, 2")
        let expected: [(String, Int64, Int64)] = [(ids[0], 1, 1024), (ids[0], 1025, Int64(shipped[0].count)), (ids[1], 1, 5), (ids[1], 7, Int64(shipped[1].count))]
        #expect(blocks.count == 4)
        for (row, want) in zip(
            blocks.sorted { ($0["id"] as String, $0["first_seq"] as Int64) < ($1["id"] as String, $1["first_seq"] as Int64) }, expected.sorted { ($0.0, $0.1) < ($1.0, $1.1) })
        {
            #expect(row["id"] as String == want.0 && row["first_seq"] as Int64 == want.1 && row["last_seq"] as Int64 == want.2)
        }
        await fleet.close()
        // The first ledger ships on from where its rows ended (its projection rows with it).
        _ = try ledgers[0].append(try JSONLines.decode(#"{"type":"restoreStarted","at":"2030-01-01T00:00:00Z"}"#))
        let next = try cli(["ship", ledgers[0].path, "--to", url, "--json"])
        #expect(next.status == 0 && next.stdout.contains(#""shippedEvents":1"#), "\(next.stdout) \(next.stderr)")
        let audit = try cli(["verify", url])
        #expect(audit.status == 1 && audit.stdout.contains("ledger \(ids[1]), seq 6: the events jump from seq 5 to 7"), "\(audit.stdout)")
        #expect(!audit.stdout.contains("ledger \(ids[0])"), "\(audit.stdout)")
    }

    /// The shipping credential moves a head back into the middle of a block, then plants blocks
    /// past it: ship keeps the ledger's own events (no new block overlaps them) and names only
    /// the planted blocks; once the owner deletes those, it ships on and the audit is clean.
    @Test func shipKeepsItsOwnEventsPastAHeadMovedBackAndNamesOnlyThePlantedBlocks() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let ledger = try Self.ledger(1100, in: dir)
        #expect(try cli(["ship", ledger.path, "--to", url]).status == 0)
        let id = try #require(try ledger.identity()).id
        let events = try ledger.shipment(after: 0, link: nil).events
        let last = Int64(events.count)
        // The head moved back to seq 1000, inside the block 1...1024, with its signed statement of then.
        let statement = try #require(try ledger.identityStatement(seq: 1000, link: events[999].link)).json
        let moveHeadBack = "UPDATE ledgers SET last_seq = 1000, last_link = '\\x\(Hex.encode(events[999].link))', head_statement = $$\(statement)$$ WHERE ledger_id = '\(id)';"
        // The DELETE a refusal names for the owner, checked to name only the blocks `firstSeqs`.
        func namedDelete(_ result: CLIResult, _ firstSeqs: String) throws -> String {
            let delete = try #require(
                result.stderr.range(of: "DELETE FROM event_blocks").map { String(result.stderr[$0.lowerBound...].prefix { $0 != ";" }) }, "\(result.stderr)")
            #expect(delete.hasSuffix("first_seq IN (\(firstSeqs))"), "\(delete)")
            return delete
        }
        _ = try server.psql(moveHeadBack, database: database)
        let kept = try cli(["ship", ledger.path, "--to", url, "--json"])
        #expect(kept.status == 0 && kept.stdout.contains(#""shippedEvents":0"#), "\(kept.stdout) \(kept.stderr)")
        #expect(try server.psql("SELECT last_seq FROM ledgers WHERE ledger_id = '\(id)'", database: database) == "\(last)\n")
        #expect(try cli(["verify", url]).status == 0)

        // Moved back again, and a block planted right after the ledger's own: refused, naming
        // only the planted block.
        _ = try server.psql(
            """
            \(moveHeadBack)
            INSERT INTO event_blocks SELECT ledger_id, \(last + 1), \(last + 1), raw_size, frames, substring(links from 1 for 32)
                FROM event_blocks WHERE ledger_id = '\(id)' AND first_seq = 1;
            """, database: database)
        _ = try ledger.append(try JSONLines.decode(#"{"type":"restoreStarted","at":"2030-01-01T00:00:00Z"}"#))
        let blocked = try cli(["ship", ledger.path, "--to", url])
        #expect(blocked.status == 1 && blocked.stderr.contains("past the head it shipped (seq \(last)), from seq \(last + 1)"), "\(blocked.stderr)")
        let statementText = try namedDelete(blocked, "\(last + 1)")
        _ = try server.psql(statementText, database: database)
        let shipped = try cli(["ship", ledger.path, "--to", url, "--json"])
        #expect(shipped.status == 0 && shipped.stdout.contains(#""shippedEvents":1"#), "\(shipped.stdout) \(shipped.stderr)")
        #expect(try cli(["verify", url]).status == 0)

        // A block planted to sort before the ledger's own block past a head moved back (its
        // links copied, its frames garbage): only the planted block is named, never the ledger's.
        let now = try ledger.shipment(after: 0, link: nil).events
        let top = Int64(now.count)
        let copied = now[989..<Int(top)].map { Hex.encode($0.link) }.joined()
        _ = try server.psql(
            """
            \(moveHeadBack)
            INSERT INTO event_blocks VALUES ('\(id)', 990, \(top), 4, '\\x00', '\\x\(copied)');
            """, database: database)
        let named = try cli(["ship", ledger.path, "--to", url])
        let delete = try namedDelete(named, "990")
        let overlapping = try cli(["verify", url])
        #expect(overlapping.stdout.contains("seq 990: the block of events 990...\(top) overlaps the events before it"), "\(overlapping.stdout)")
        _ = try server.psql(delete, database: database)
        #expect(try cli(["ship", ledger.path, "--to", url]).status == 0)
        #expect(try cli(["verify", url]).status == 0)

        // A decodable copy of its own events 990...1024 planted over the head moved back into
        // block 1...1024: the copy is named, never the block that holds events 1...989.
        _ = try server.psql(moveHeadBack, database: database)
        try server.plantCopy(of: id, seqs: 990...1024, database: database)
        let copy = try cli(["ship", ledger.path, "--to", url])
        let deleteCopy = try namedDelete(copy, "990")
        _ = try server.psql(deleteCopy, database: database)
        #expect(try cli(["ship", ledger.path, "--to", url]).status == 0)
        #expect(try cli(["verify", url]).status == 0)

        // A copy of two of its own events planted inside its blocks, and a block at the last seq
        // there is: `pull` still reads the ledger, and the audit names both blocks.
        _ = try server.psql(
            "INSERT INTO event_blocks VALUES ('\(id)', 9223372036854775807, 9223372036854775807, 4, '\\x00', '\\x\(Hex.encode(events[0].link))')",
            database: database)
        try server.plantCopy(of: id, seqs: 2...3, database: database)
        let audit = try cli(["verify", url])
        #expect(
            audit.status == 1 && audit.stdout.contains("seq 2: the block of events 2...3 overlaps") && audit.stdout.contains("past any seq a ledger reaches"), "\(audit.stdout)")
        #expect(!audit.stdout.contains("missing"), "\(audit.stdout)")
        let pulled = dir.path("pulled.ledger")
        let pull = try cli(["pull", url, "--ledger", id, "-o", pulled])
        #expect(pull.status == 0, "\(pull.stderr)")
        var readOnly = LedgerConfiguration()
        readOnly.readOnly = true
        #expect(try Ledger(path: pulled, configuration: readOnly).lastSeq() == top)
    }

    /// `forget` finds a user's ledger however its head was moved: a head moved back to seq 0
    /// hides none of its events from the erasure.
    @Test func forgetFindsTheUserPastAHeadMovedBack() async throws {
        let dir = try TemporaryDirectory()
        let (server, url) = try FleetServer.database()
        let database = String(url.split(separator: "/").last!.split(separator: "?").first!)
        let ledger = try Self.ledger(300, in: dir)
        #expect(try cli(["ship", ledger.path, "--to", url]).status == 0)
        let id = try #require(try ledger.identity()).id
        let user = try #require(try ledger.transactions().compactMap(\.user).first)
        _ = try server.psql("UPDATE ledgers SET last_seq = 0 WHERE ledger_id = '\(id)'", database: database)
        let forgot = try cli(["forget", url, "--user", user])
        #expect(forgot.status == 0, "\(forgot.stdout) \(forgot.stderr)")
        #expect(try server.psql("SELECT count(*) FROM transactions WHERE user_id = '\(user)'", database: database) == "0\n")
        #expect(try server.psql("SELECT count(*) FROM personal_values WHERE value = convert_to('\(user)', 'UTF8')", database: database) == "0\n")
        #expect(try server.psql("SELECT count(*) FROM erased_users WHERE ledger_id = '\(id)'", database: database) == "1\n")
    }
}

extension LocalPostgres {
    /// Inserts a block holding a copy of ledger `id`'s events `seqs` (decodable, links and all):
    /// events held twice, as someone with the shipping credential can plant them.
    func plantCopy(of id: String, seqs: ClosedRange<Int64>, database: String) throws {
        let row = try psql(
            "SELECT first_seq, last_seq, raw_size, encode(frames, 'hex'), encode(links, 'hex') FROM event_blocks WHERE ledger_id = '\(id)' AND first_seq = 1",
            database: database
        ).trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "|").map(String.init)
        let events = try FleetBlock.decode(
            firstSeq: Int64(row[0])!, lastSeq: Int64(row[1])!, rawSize: Int64(row[2])!, frames: Hex.decode(row[3])!, links: Hex.decode(row[4])!)
        let block = try FleetBlock.encode(Array(events[Int(seqs.lowerBound - 1)...Int(seqs.upperBound - 1)]))[0]
        try psql(
            "INSERT INTO event_blocks VALUES ('\(id)', \(block.firstSeq), \(block.lastSeq), \(block.rawSize), '\\x\(Hex.encode(block.frames))', '\\x\(Hex.encode(block.links))')",
            database: database)
    }
}
