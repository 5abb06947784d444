import Foundation
import GRDB
import PurchaseLedgerFleetTesting
import Testing
@testable import PurchaseLedger

/// Personal values other than user ids sealed into LZ4 blocks (migration 0010, docs/format.md
/// "Personal values"): read back as written however the appends fell, checked by `verify`
/// against the chain's commitments, rewritten by an erasure, and sealed in a ledger from before.
@Suite(.serialized, .enabled(if: Workload.available, "needs python3 and Tools/gen_workload.py"))
struct PersonalValueBlocksTests {
    /// The 10,000-event workload's lines (3,297 personal values, of 1,029 users).
    static func lines() throws -> [Substring] {
        let text = try String(contentsOfFile: try Workload.file(events: 10_000), encoding: .utf8)
        return text.split(separator: "\n", omittingEmptySubsequences: true)
    }

    static func configuration(perBlock: Int) -> LedgerConfiguration {
        var c = testConfiguration(blockSize: 256, snapshotInterval: 1_500)
        c.personalValuesPerBlock = perBlock
        return c
    }

    /// Appends `lines` to a new ledger at `path`, `chunk` lines per append.
    static func ledger(_ path: String, _ lines: [Substring], chunk: Int, perBlock: Int) throws -> Ledger {
        let ledger = try Ledger(path: path, configuration: configuration(perBlock: perBlock))
        for start in stride(from: 0, to: lines.count, by: chunk) {
            let text = lines[start..<min(lines.count, start + chunk)].joined(separator: "\n") + "\n"
            _ = try ledger.appendJSONLines(try JSONLinesInput(bytes: Array(text.utf8)))
        }
        return ledger
    }

    static func export(_ ledger: Ledger) throws -> [String] {
        var lines: [String] = []
        try ledger.forEachEvent { e in
            lines.append(e.jsonLine)
            return true
        }
        return lines
    }

    /// (blocks, rows of values other than user ids, the highest ref a block covers, the lowest
    /// such row's ref).
    static func layout(_ path: String) throws -> (blocks: Int, tail: Int, sealedThrough: Int64, lowestRow: Int64?) {
        try DatabaseQueue(path: path).read { db in
            (
                try Int.fetchOne(db, sql: "SELECT count(*) FROM personal_value_blocks") ?? 0,
                try Int.fetchOne(db, sql: "SELECT count(*) FROM personal_values WHERE owner <> ref") ?? 0,
                try PersonalValueBlocks.sealedThrough(db),
                try Int64.fetchOne(db, sql: "SELECT min(ref) FROM personal_values WHERE owner <> ref")
            )
        }
    }

    /// In one append or in appends of 37 events (each crossing block boundaries at its own
    /// place), or never sealed: the same events, the same states at every point, verified.
    @Test func sealedValuesReadBackAsWrittenHoweverTheAppendsFell() throws {
        let dir = try TemporaryDirectory()
        let lines = try Self.lines()
        let whole = try Self.ledger(dir.path("whole.ledger"), lines, chunk: lines.count, perBlock: 1024)
        let chunked = try Self.ledger(dir.path("chunked.ledger"), lines, chunk: 37, perBlock: 1024)
        let rows = try Self.ledger(dir.path("rows.ledger"), lines, chunk: lines.count, perBlock: 1_000_000)

        for name in ["whole", "chunked"] {
            let layout = try Self.layout(dir.path("\(name).ledger"))
            #expect(layout.blocks >= 2, "\(name): \(layout)")
            #expect(layout.tail < 1024, "\(name): the open tail is less than a block: \(layout)")
            #expect(layout.lowestRow.map { $0 > layout.sealedThrough } ?? true, "\(name): no row left below the blocks: \(layout)")
        }
        #expect(try Self.layout(dir.path("rows.ledger")).blocks == 0)

        let expected = try Self.export(rows)
        #expect(try Self.export(whole) == expected)
        #expect(try Self.export(chunked) == expected)
        for ledger in [whole, chunked] {
            let report = try ledger.verify(all: true, everySnapshot: true)
            #expect(report.isValid, "\(report.problems.prefix(3))")
        }
        // Cold states (a new read-only open each: no cached values) at points before, between
        // and after snapshots, equal to those of the ledger that never sealed.
        var readOnly = Self.configuration(perBlock: 1024)
        readOnly.readOnly = true
        for seq: Int64 in [5, 1_499, 1_500, 4_321, 9_000, .max] {
            for name in ["rows", "whole", "chunked"] {
                try DatabaseQueue(path: dir.path("\(name).ledger")).read { PersonalValues.invalidate($0) }
            }
            let want = try Ledger(path: dir.path("rows.ledger"), configuration: readOnly).replayFromLog(through: seq)
            #expect(try Ledger(path: dir.path("whole.ledger"), configuration: readOnly).state(atSeq: seq) == want, "at \(seq)")
            #expect(try Ledger(path: dir.path("chunked.ledger"), configuration: readOnly).state(atSeq: seq) == want, "at \(seq)")
        }
        // The independent reader (docs/format.md alone) reads the blocks as export does.
        let reader = packageRoot.appending(path: "Tools/doc-reader.py").path
        let read = try LocalPostgres.run("/usr/bin/env", ["python3", reader, dir.path("chunked.ledger"), "--check-chain"])
        #expect(read == expected.joined(separator: "\n") + "\n", "the reader and export differ")
    }

    /// A block edited, removed, undecodable, or a sealed value held again as a row: `verify`
    /// names it, and reading the values stops with corruptData rather than showing others.
    @Test func tamperingWithBlocksIsCaught() throws {
        let dir = try TemporaryDirectory()
        let source = dir.path("l.ledger")
        let lines = try Self.lines()
        _ = try Self.ledger(source, lines, chunk: lines.count, perBlock: 1024)
        let (first, count) = try DatabaseQueue(path: source).read { db in
            (try Int64.fetchOne(db, sql: "SELECT min(first_ref) FROM personal_value_blocks")!, try Int.fetchOne(db, sql: "SELECT count(*) FROM personal_value_blocks")!)
        }
        #expect(count >= 2)
        var readOnly = Self.configuration(perBlock: 1024)
        readOnly.readOnly = true
        /// The problems `verify` finds in a copy edited by `edit` (those of personal values, and
        /// all), and the error a replay from the first event then meets.
        func tampered(_ name: String, _ edit: (Database) throws -> Void) throws -> (problems: [String], all: [String], replay: LedgerError?) {
            let copy = dir.path(name)
            try FileManager.default.copyItem(atPath: source, toPath: copy)
            try DatabaseQueue(path: copy).write { try edit($0) }
            let ledger = try Ledger(path: copy, configuration: readOnly)
            let all = try ledger.verify(all: true).problems
            var failure: LedgerError?
            do { _ = try ledger.replayFromLog() } catch let error as LedgerError { failure = error }
            return (all.filter { $0.kind == .personalValues }.map(\.message), all.map(\.message), failure)
        }
        // A byte of a value changed (one of the last records: a literal near the end of the data).
        let edited = try tampered("edited.ledger") { db in
            var data = [UInt8](try Data.fetchOne(db, sql: "SELECT data FROM personal_value_blocks WHERE first_ref = ?", arguments: [first])!)
            let raw = try Int.fetchOne(db, sql: "SELECT raw_size FROM personal_value_blocks WHERE first_ref = ?", arguments: [first])!
            var records = try data.withUnsafeBytes { try LZ4.decompress($0, originalSize: raw) }
            records[records.count - 3] ^= 0x01
            data = try LZ4.compress(records)
            try db.execute(sql: "UPDATE personal_value_blocks SET data = ? WHERE first_ref = ?", arguments: [Data(data), first])
        }
        // The events are sealed with their commitments elided (docs/format.md): the commitment
        // made again from the edited value breaks the chain at the event that introduced it.
        let named = "or a personal value it introduces (ref "
        #expect(edited.problems.isEmpty && edited.all.contains { $0.contains(named) && $0.contains("edited or deleted beside the log") }, "\(edited.all)")
        // Plain verify (the first problem only) names the edit, not what it changed downstream.
        let plain = try Ledger(path: dir.path("edited.ledger"), configuration: readOnly).verify().problems
        #expect(plain.first?.kind == .chain && plain.first?.message.contains(named) == true, "\(plain)")
        let deleted = try tampered("deleted.ledger") { db in
            try db.execute(sql: "DELETE FROM personal_value_blocks WHERE first_ref = ?", arguments: [first])
        }
        #expect(deleted.problems.count >= 100 && deleted.problems.allSatisfy { $0.contains("no erasure recorded its removal") }, "\(deleted.problems.prefix(2))")
        // The independent reader, checking, sees it too (docs/format.md: a ref no place holds
        // was erased only if an erasure recorded it).
        let reader = packageRoot.appending(path: "Tools/doc-reader.py").path
        #expect(throws: (any Error).self) { try LocalPostgres.run("/usr/bin/env", ["python3", reader, dir.path("deleted.ledger"), "--check-chain"]) }
        #expect(throws: Never.self) { try LocalPostgres.run("/usr/bin/env", ["python3", reader, dir.path("deleted.ledger")]) }
        let damaged = try tampered("damaged.ledger") { db in
            try db.execute(sql: "UPDATE personal_value_blocks SET data = zeroblob(length(data)) WHERE first_ref = ?", arguments: [first])
        }
        // The events that hold one of its values do not decode (as with a damaged block of the
        // log), each naming it; a state past them stops there, never shows other values.
        let undecodable = "in the block of personal values \(first)..."
        #expect(damaged.all.first?.contains(undecodable) == true, "\(damaged.all.prefix(2))")
        #expect(damaged.replay?.code == .corruptData && damaged.replay?.message.contains(undecodable) == true, "\(String(describing: damaged.replay))")
        let resized = try tampered("resized.ledger") { db in
            try db.execute(sql: "UPDATE personal_value_blocks SET raw_size = raw_size + 1 WHERE first_ref = ?", arguments: [first])
        }
        #expect(resized.all.first?.contains(undecodable) == true, "\(resized.all.prefix(2))")
        let twice = try tampered("twice.ledger") { db in
            let block = try #require(try PersonalValueBlocks.blocks(db).first)
            let row = try #require(try PersonalValueBlocks.rows(of: block).last)
            try db.execute(
                sql: "INSERT INTO personal_values (ref, owner, salt, value) VALUES (?, ?, ?, ?)",
                arguments: [row.ref, row.owner, row.salt.map { Data($0) }, Data(row.value)])
        }
        #expect(twice.problems.count == 1 && twice.problems[0].contains("held twice"), "\(twice.problems)")
        // A range edited to nothing, or shrunk: the block does not decode (no trap, no value
        // read as erased), named by verify and by the replay.
        for (name, edit) in [("empty", "last_ref = first_ref - 2"), ("shrunk", "last_ref = first_ref + 100"), ("negative", "first_ref = -9223372036854775808")] {
            let result = try tampered("\(name).ledger") { db in
                try db.execute(sql: "UPDATE personal_value_blocks SET \(edit) WHERE first_ref = ?", arguments: [first])
            }
            #expect(!result.all.isEmpty, "\(name)")
            #expect(result.replay?.code == .corruptData, "\(name): \(String(describing: result.replay))")
        }
        // A size no LZ4 block reaches: refused before it is allocated.
        let huge = try tampered("huge.ledger") { db in
            try db.execute(sql: "UPDATE personal_value_blocks SET raw_size = 2113929216 WHERE first_ref = ?", arguments: [first])
        }
        #expect(huge.replay?.code == .corruptData)
        let claimed = try DatabaseQueue(path: dir.path("huge.ledger")).read { db in
            #expect(throws: LedgerError.self) { try PersonalValueBlocks.decompress(try #require(try PersonalValueBlocks.blocks(db).first)) }
            do { _ = try PersonalValueBlocks.decompress(try #require(try PersonalValueBlocks.blocks(db).first)) } catch { return "\(error)" }
            return ""
        }
        #expect(claimed.contains("claims 2113929216 bytes from"), "\(claimed)")
        // A snapshot's personal_refs edited out of range: no trap.
        let refs = try tampered("refs.ledger") { db in try db.execute(sql: "UPDATE snapshots SET personal_refs = -5") }
        #expect(refs.replay == nil)
        let reopened = try Ledger(path: dir.path("refs.ledger"), configuration: readOnly)
        #expect(try reopened.state(atSeq: 4_321) == (try reopened.replayFromLog(through: 4_321)))
        // A user's value made one of no user (with the user's salt, so that its commitment still
        // checks): forget would leave it. And a user id sealed as a value of no user, its row gone.
        let disowned = try tampered("disowned.ledger") { db in
            let block = try #require(try PersonalValueBlocks.blocks(db).first)
            let rows = try PersonalValueBlocks.rows(of: block)
            let value = try #require(rows.first { $0.owner != 0 })
            let salt = try #require(try Data.fetchOne(db, sql: "SELECT salt FROM personal_values WHERE ref = ?", arguments: [value.owner]))
            let edited = rows.map { $0.ref == value.ref ? PersonalValueRow(ref: $0.ref, owner: 0, salt: [UInt8](salt), value: $0.value) : $0 }
            try db.execute(sql: "DELETE FROM personal_value_blocks WHERE first_ref = ?", arguments: [block.first])
            try PersonalValueBlocks.write(edited[...], db)
        }
        #expect(disowned.problems.count == 1 && disowned.problems[0].contains("its owner was edited"), "\(disowned.problems)")
        let sealedUser = try tampered("sealed-user.ledger") { db in
            let user = try #require(try Row.fetchOne(db, sql: "SELECT ref, salt, value FROM personal_values WHERE owner = ref ORDER BY ref DESC LIMIT 1"))
            try db.execute(sql: "DELETE FROM personal_values WHERE ref = ?", arguments: [user[0] as Int64])
            let row = PersonalValueRow(ref: user[0], owner: 0, salt: [UInt8](user[1] as Data), value: [UInt8](user[2] as Data))
            try PersonalValueBlocks.write([row][...], db)
        }
        #expect(sealedUser.problems.contains { $0.contains("a user id in event") && $0.contains("forget would not find it") }, "\(sealedUser.problems)")
    }

    /// A ledger written before migration 0010 holds every value as a row: it reads as before
    /// (read-only, unmigrated), and its next append seals them, the events unchanged.
    @Test func aLedgerFromBeforeBlocksIsSealedAtItsNextAppend() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("old.ledger")
        let lines = try Self.lines()
        let old = try Self.ledger(path, Array(lines.dropLast()), chunk: lines.count, perBlock: 1_000_000)
        let before = try Self.export(old)
        let state = try old.state(atSeq: .max)
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DROP TABLE personal_value_blocks")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = '0010_personal_value_blocks'")
        }
        var readOnly = Self.configuration(perBlock: 1024)
        readOnly.readOnly = true
        let unmigrated = try Ledger(path: path, configuration: readOnly)
        #expect(try Self.export(unmigrated) == before)
        #expect(try unmigrated.state(atSeq: .max) == state)
        #expect(try unmigrated.verify(all: true).isValid)

        let ledger = try Ledger(path: path, configuration: Self.configuration(perBlock: 1024))
        _ = try ledger.appendJSONLines(try JSONLinesInput(bytes: Array((lines.last! + "\n").utf8)))
        let layout = try Self.layout(path)
        #expect(layout.blocks >= 2 && layout.tail < 1024, "\(layout)")
        #expect(Array(try Self.export(ledger).prefix(before.count)) == before)
        let report = try ledger.verify(all: true, everySnapshot: true)
        #expect(report.isValid, "\(report.problems.prefix(3))")
    }

    /// Time travel to before the only snapshot of a ledger that had an erasure, in a new
    /// process (nothing cached): the erased values read as erased. (It stopped with
    /// corruptData, "older than the snapshot it follows", before the blocks.)
    @Test func timeTravelBeforeTheSnapshotAfterAnErasure() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("demo.ledger")
        #expect(try cli(["demo", path]).status == 0)
        #expect(try cli(["forget", path, "--user", "u-bob"]).status == 0)
        for seq in [20, 40, 60, 73] {
            let replay = try cli(["replay", path, "--at", String(seq), "--json"])
            #expect(replay.status == 0, "at \(seq): \(replay.stderr)")
            #expect(!replay.stdout.contains("u-bob"))
        }
        #expect(try cli(["replay", path, "--at", "60", "--json"]).stdout.contains("[erased "))
    }
}
