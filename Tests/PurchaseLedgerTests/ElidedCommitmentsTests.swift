import Foundation
import GRDB
import PurchaseLedgerFleetTesting
import Testing
@testable import PurchaseLedger

/// Commitments kept out of sealed blocks (``BlockLayout/elidedCommitments``, docs/format.md):
/// the chain still covers every value, now through the commitment made again from the value and
/// its owner's salt, so an edited value breaks the chain at its event; `forget` keeps what the
/// chain needs; and what cannot be made again is stored as it was.
@Suite(.serialized, .enabled(if: Workload.available, "needs python3 and Tools/gen_workload.py"))
struct ElidedCommitmentsTests {
    static func configuration(_ layout: BlockLayout, blockSize: Int = 256) -> LedgerConfiguration {
        var c = testConfiguration(blockSize: blockSize, snapshotInterval: 1_500)
        c.personalValuesPerBlock = 1024
        c.blockLayout = layout
        return c
    }

    /// `lines` appended to a new ledger at `path`, `chunk` lines per append.
    static func ledger(
        _ path: String, _ lines: ArraySlice<Substring>, chunk: Int, layout: BlockLayout = .current, blockSize: Int = 256
    ) throws -> Ledger {
        let ledger = try Ledger(path: path, configuration: configuration(layout, blockSize: blockSize))
        try append(lines, to: ledger, chunk: chunk)
        return ledger
    }

    static func append(_ lines: ArraySlice<Substring>, to ledger: Ledger, chunk: Int) throws {
        for start in stride(from: lines.startIndex, to: lines.endIndex, by: chunk) {
            let text = lines[start..<min(lines.endIndex, start + chunk)].joined(separator: "\n") + "\n"
            _ = try ledger.appendJSONLines(try JSONLinesInput(bytes: Array(text.utf8)))
        }
    }

    /// Every commitment the chain covers, by ref, with the seq of the event that introduced it:
    /// read from the canonical payloads, as `verify` and an upload see them.
    static func commitments(_ path: String) throws -> [Int64: (commitment: [UInt8], seq: Int64)] {
        try DatabaseQueue(path: path).read { db in
            var found: [Int64: (commitment: [UInt8], seq: Int64)] = [:]
            try EventStore.scan(db, integrity: true) { entry in
                for (ref, commitment) in PayloadCodec.introductions(in: entry.payload) { found[ref] = (commitment, entry.event.seq) }
                return true
            }
            return found
        }
    }

    /// The sealed blocks, decompressed: their first seq, stored codec and frames.
    static func blocks(_ path: String) throws -> [(first: Int64, codec: Int64, raw: [UInt8])] {
        try DatabaseQueue(path: path).read { db in
            var dictionaries: [Int64: [UInt8]] = [:]
            return try Row.fetchAll(
                db, sql: "SELECT first_seq, last_seq, codec, dictionary_id, raw_size, data, last_link FROM event_blocks ORDER BY first_seq"
            ).map { row in
                let block = try EventStore.sealedBlock(db, row, from: row[0], through: row[1], dictionaries: &dictionaries, personal: .unresolved)
                return (row[0], row[2], try EventStore.decompress(block))
            }
        }
    }

    /// Whether `raw` holds any of `needles` (16 bytes each).
    static func holdsAny(_ raw: [UInt8], of needles: Set<[UInt8]>) -> Bool {
        guard raw.count >= 16 else { return false }
        return (0...(raw.count - 16)).contains { needles.contains(Array(raw[$0..<($0 + 16)])) }
    }

    static func export(_ ledger: Ledger) throws -> [String] { try PersonalValueBlocksTests.export(ledger) }

    /// A ledger of the 10,000-event workload written in one append, in a new temporary folder
    /// (kept while the result is), and the commitments its chain covers.
    static func sealedLedger() throws -> (dir: TemporaryDirectory, path: String, commitments: [Int64: (commitment: [UInt8], seq: Int64)]) {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let lines = try PersonalValueBlocksTests.lines()[...]
        _ = try ledger(path, lines, chunk: lines.count)
        return (dir, path, try commitments(path))
    }

    /// In one append, or in appends of 7 events (each block then sealed from the open tail the
    /// appends before left): no sealed block holds a commitment, yet the chain covers every
    /// value and verifies, the events read as with commitments stored, and the log is smaller.
    @Test func sealedBlocksHoldNoCommitmentYetTheChainCoversEveryValue() throws {
        let dir = try TemporaryDirectory()
        let lines = try PersonalValueBlocksTests.lines()[...]
        let stored = try Self.ledger(dir.path("stored.ledger"), lines, chunk: lines.count, layout: .trailingLinks)
        let expected = try Self.export(stored)
        let storedBytes = try DatabaseQueue(path: dir.path("stored.ledger")).read { db in
            try Int.fetchOne(db, sql: "SELECT sum(length(data)) FROM event_blocks") ?? 0
        }
        for (name, chunk) in [("whole", lines.count), ("appends", 7)] {
            let path = dir.path("\(name).ledger")
            let ledger = try Self.ledger(path, lines, chunk: chunk)
            let commitments = try Self.commitments(path)
            #expect(commitments.count > 3_000, "\(name): \(commitments.count) values")
            let needles = Set(commitments.values.map(\.commitment))
            let blocks = try Self.blocks(path)
            #expect(blocks.count >= 30, "\(name)")
            for block in blocks {
                #expect(block.codec / 3 == Int64(BlockLayout.elidedCommitments.rawValue), "\(name): block \(block.first) has codec \(block.codec)")
                #expect(!Self.holdsAny(block.raw, of: needles), "\(name): block \(block.first) holds a commitment")
            }
            let report = try ledger.verify(all: true, everySnapshot: true)
            #expect(report.isValid, "\(name): \(report.problems.prefix(3))")
            #expect(try Self.export(ledger) == expected, "\(name)")
            let bytes = try DatabaseQueue(path: path).read { db in try Int.fetchOne(db, sql: "SELECT sum(length(data)) FROM event_blocks") ?? 0 }
            // 16 random bytes a value, which LZ4 cannot shorten.
            #expect(bytes < storedBytes - commitments.count * 12, "\(name): \(bytes) bytes of blocks against \(storedBytes)")
        }
    }

    /// A user id edited beside the log (its row, with sqlite3) changes the commitment made again
    /// for the event that introduced it: the chain breaks there, and `verify` says which value.
    /// Deleted, the same, and the value is reported missing.
    @Test func aValueEditedBesideTheLogBreaksTheChainAtItsEvent() throws {
        let (dir, path, commitments) = try Self.sealedLedger()
        let (sealedThrough, users) = try DatabaseQueue(path: path).read { db in
            (
                try Int64.fetchOne(db, sql: "SELECT max(last_seq) FROM event_blocks") ?? 0,
                try Int64.fetchAll(db, sql: "SELECT ref FROM personal_values WHERE owner = ref ORDER BY ref")
            )
        }
        let sealed = users.filter { (commitments[$0]?.seq ?? .max) <= sealedThrough }
        #expect(sealed.count >= 2)
        let ref = sealed[sealed.count / 2], seq = commitments[ref]!.seq
        for edit in ["UPDATE personal_values SET value = CAST('u-edited' AS BLOB) WHERE ref = ?", "DELETE FROM personal_values WHERE ref = ?"] {
            let copy = dir.path("copy.ledger")
            try? FileManager.default.removeItem(atPath: copy)
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            try DatabaseQueue(path: copy).write { db in try db.execute(sql: edit, arguments: [ref]) }
            let problems = try Ledger(path: copy, configuration: Self.configuration(.current)).verify(all: true).problems
            let chain = problems.first { $0.kind == .chain }
            #expect(chain?.seq == seq, "\(edit): \(problems.map(\.description))")
            // "... or a personal value it introduces (ref 12, 13), or its owner's salt, was edited or deleted beside the log"
            let named = chain?.message.split(separator: "(ref ").last?.prefix { $0 != ")" }.split(separator: ", ").map(String.init) ?? []
            #expect(named.contains(String(ref)) && chain?.message.contains("personal value") == true, "\(chain?.message ?? "")")
            if edit.hasPrefix("DELETE") {
                #expect(problems.contains { $0.kind == .personalValues && $0.message.contains("personal value \(ref),") && $0.message.contains("missing") })
            }
        }
    }

    /// `forget` keeps each erased value's commitment (the chain's) before deleting the value and
    /// its salt: the chain verifies after it, and each erased value reads as the marker of that
    /// commitment, as it did when the commitment was stored in the block.
    @Test func forgetKeepsTheCommitmentsTheChainNeeds() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let lines = try PersonalValueBlocksTests.lines()[...]
        let ledger = try Self.ledger(path, lines, chunk: lines.count)
        let commitments = try Self.commitments(path)
        let (user, userRef, owned) = try DatabaseQueue(path: path).read { db in
            let user = try String.fetchOne(db, sql: "SELECT user_id FROM transactions WHERE store_transaction_id IS NOT NULL ORDER BY transaction_id LIMIT 1")!
            let ref = try PersonalValues.userRef(user, db)!
            let owned = try PersonalValueBlocks.owners(db).filter { $0.owner == ref }.map(\.ref)
            return (user, ref, owned)
        }
        #expect(!owned.isEmpty)
        let summary = try ledger.forget(user: user)
        let kept = try DatabaseQueue(path: path).read { db in
            try Row.fetchAll(db, sql: "SELECT ref, commitment FROM erased_commitments").map { ($0[0] as Int64, [UInt8]($0[1] as Data)) }
        }
        #expect(kept.count == summary.values, "\(kept.count) kept, \(summary.values) erased")
        for (ref, commitment) in kept {
            #expect(commitments[ref]?.commitment == commitment, "ref \(ref)")
        }
        #expect(Set(kept.map(\.0)) == Set(owned + [userRef]))
        let report = try ledger.verify(all: true, everySnapshot: true)
        #expect(report.isValid, "\(report.problems.prefix(3))")
        let exported = try Self.export(ledger).joined(separator: "\n")
        #expect(!exported.contains(user))
        for ref in owned {
            let marker = PersonalValues.erasedMarker(ref: UInt64(ref), commitment: commitments[ref]!.commitment)
            #expect(exported.contains(marker), "\(marker) of value \(ref)")
        }
    }

    /// A value of the open tail edited before its block is sealed no longer gives the commitment
    /// its event stored: sealing keeps that event's commitment in the block, so `verify` names
    /// the edited value, as it did before commitments were elided, and the chain holds.
    @Test func aTailValueEditedBeforeSealingKeepsItsCommitment() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let lines = try PersonalValueBlocksTests.lines()[...]
        // The first 900 lines (the catalog, then purchases) stay in the open tail of 1,024.
        let ledger = try Self.ledger(path, lines.prefix(900), chunk: 900, blockSize: 1024)
        let ref = try DatabaseQueue(path: path).write { db -> Int64 in
            #expect(try Int.fetchOne(db, sql: "SELECT count(*) FROM event_blocks") == 0)
            let ref = try #require(try Int64.fetchOne(db, sql: "SELECT max(ref) FROM personal_values WHERE owner <> ref"))
            try db.execute(sql: "UPDATE personal_values SET value = CAST('edited' AS BLOB) WHERE ref = ?", arguments: [ref])
            return ref
        }
        try Self.append(lines.dropFirst(900).prefix(1_500), to: ledger, chunk: 50)
        let commitments = try Self.commitments(path)
        let introduced = try #require(commitments[ref])
        let holding = try Self.blocks(path).filter { $0.first <= introduced.seq }.last
        #expect(holding.map { Self.holdsAny($0.raw, of: [introduced.commitment]) } == true, "the block keeps the commitment of value \(ref)")
        let problems = try ledger.verify(all: true).problems
        #expect(!problems.contains { $0.kind == .chain }, "\(problems.map(\.description))")
        #expect(
            problems.contains { $0.kind == .personalValues && $0.message.contains("personal value \(ref) is not the value event \(introduced.seq) committed to") },
            "\(problems.map(\.description))")
    }

    /// A payload with a field 14 of its own (here added with sqlite3 to a row of the open tail)
    /// would read as elided refs in a block of the new layout: the block is sealed in the older
    /// one, so the edit still shows as what it is, the chain broken at that event.
    @Test func aPayloadHoldingFieldFourteenIsSealedInTheOlderLayout() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let lines = try PersonalValueBlocksTests.lines()[...]
        let ledger = try Self.ledger(path, lines.prefix(100), chunk: 100)
        try DatabaseQueue(path: path).write { db in
            // Field 14, wire 2 (key 0x72), one byte: 0x05.
            try db.execute(sql: "UPDATE events SET payload = CAST(payload || x'720105' AS BLOB) WHERE seq = 50")
        }
        try Self.append(lines.dropFirst(100).prefix(700), to: ledger, chunk: 700)
        let blocks = try Self.blocks(path)
        #expect(blocks.count >= 3)
        let first = try #require(blocks.first)
        #expect(first.first == 1 && first.codec / 3 == Int64(BlockLayout.trailingLinks.rawValue), "codec \(first.codec)")
        #expect(blocks.dropFirst().allSatisfy { $0.codec / 3 == Int64(BlockLayout.elidedCommitments.rawValue) }, "the blocks after it elide")
        let problems = try ledger.verify(all: true).problems
        #expect(problems.first { $0.kind == .chain }?.seq == 50, "\(problems.map(\.description))")
    }

    /// A ledger from before migration 0011 (its blocks store every commitment, and it has no
    /// `erased_commitments`): the next writable open adds the table, later blocks elide, both
    /// kinds read and verify side by side, and an erasure of a user with values in both keeps
    /// the chain whole, for the library and for the independent reader of the docs.
    @Test func aLedgerFromBeforeTheMigrationMixesBothLayouts() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("l.ledger")
        let lines = try PersonalValueBlocksTests.lines()[...]
        do { _ = try Self.ledger(path, lines.prefix(5_000), chunk: 5_000, layout: .trailingLinks) }
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "DROP TABLE erased_commitments; DELETE FROM grdb_migrations WHERE identifier = '0011_erased_commitments'")
            try db.execute(sql: "PRAGMA user_version = \(Migrations.names.count - 1)")
        }
        let ledger = try Ledger(path: path, configuration: Self.configuration(.current))
        try Self.append(lines.dropFirst(5_000), to: ledger, chunk: 1_000)
        let layouts = Set(try Self.blocks(path).map { $0.codec / 3 })
        #expect(layouts == [Int64(BlockLayout.trailingLinks.rawValue), Int64(BlockLayout.elidedCommitments.rawValue)], "\(layouts)")
        // The user with the most values, whose values are in blocks of both layouts.
        let commitments = try Self.commitments(path)
        let lastOld = try Self.blocks(path).last { $0.codec / 3 == Int64(BlockLayout.trailingLinks.rawValue) }!.first + 255
        let user = try DatabaseQueue(path: path).read { db -> String in
            let owners =
                try PersonalValueBlocks.owners(db)
                + Row.fetchAll(db, sql: "SELECT ref, owner FROM personal_values WHERE owner <> ref").map { (ref: $0[0] as Int64, owner: $0[1] as Int64) }
            let both = Dictionary(grouping: owners.filter { $0.owner > 0 }, by: \.owner).filter { _, values in
                values.contains { (commitments[$0.ref]?.seq ?? 0) <= lastOld } && values.contains { (commitments[$0.ref]?.seq ?? 0) > lastOld }
            }
            let owner = try #require(both.max { $0.value.count < $1.value.count }?.key)
            return try String.fetchOne(db, sql: "SELECT CAST(value AS TEXT) FROM personal_values WHERE ref = ?", arguments: [owner])!
        }
        _ = try ledger.forget(user: user)
        let report = try ledger.verify(all: true, everySnapshot: true)
        #expect(report.isValid, "\(report.problems.prefix(3))")
        let reader = packageRoot.appending(path: "Tools/doc-reader.py").path
        let read = try LocalPostgres.run("/usr/bin/env", ["python3", reader, path, "--check-chain"])
        #expect(read.split(separator: "\n").map(String.init) == (try Self.export(ledger)))
    }

    /// A sealed value deleted without an erasure (its block of values rewritten without it,
    /// nothing kept): the chain breaks at its event, and the CLI's export and the independent
    /// reader both show it as `[erased <ref>]` (no commitment says which value it was; the reader
    /// used to show the 16 zero bytes it hashes in its place).
    @Test func aValueDeletedWithoutAnErasureReadsAsItsRefInBothReaders() throws {
        let (dir, path, commitments) = try Self.sealedLedger()
        defer { withExtendedLifetime(dir) {} }
        let (ref, seq) = try DatabaseQueue(path: path).read { db -> (Int64, Int64) in
            let sealedThrough = try Int64.fetchOne(db, sql: "SELECT max(last_seq) FROM event_blocks") ?? 0
            let sealed = try PersonalValueBlocks.owners(db).filter { $0.owner > 0 && (commitments[$0.ref]?.seq ?? .max) <= sealedThrough }
            let chosen = sealed[sealed.count / 2].ref
            return (chosen, commitments[chosen]!.seq)
        }
        // On a copy: this process keeps the values it read of the original's path.
        let copy = dir.path("deleted.ledger")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try DatabaseQueue(path: copy).write { db in _ = try PersonalValueBlocks.erase([ref], db) }
        let ledger = try Ledger(path: copy, configuration: Self.configuration(.current))
        let exported = try Self.export(ledger)
        let line = exported.first { $0.hasPrefix("{\"seq\":\(seq),") }
        #expect(line?.contains("[erased \(ref)]") == true, "\(line ?? "no event \(seq)")")
        let reader = packageRoot.appending(path: "Tools/doc-reader.py").path
        let read = try LocalPostgres.run("/usr/bin/env", ["python3", reader, copy]).split(separator: "\n").map(String.init)
        let difference = zip(read, exported).first { $0 != $1 }
        #expect(read.count == exported.count && difference == nil, "\(difference.map { "reader: \($0.0)\nCLI:    \($0.1)" } ?? "")")
        let problems = try ledger.verify(all: true).problems
        #expect(problems.contains { $0.kind == .chain && $0.seq == seq }, "\(problems.map(\.description))")
    }

    /// What an attacker with sqlite3 tries once commitments are made again from the values, each
    /// reported (a helper's attack on this change): a value held twice (the chain makes no
    /// commitment for it, whichever copy a reader shows), a value deleted and passed off as
    /// erased (its commitment added to `erased_commitments`, its ref to the list a pulled copy
    /// keeps), a commitment kept for a value still held, and cells of the wrong type, which
    /// are reported instead of stopping the reader.
    @Test func valuesHeldTwiceOrPassedOffAsErasedAreReported() throws {
        let (dir, path, commitments) = try Self.sealedLedger()
        let (sealedValue, owner) = try DatabaseQueue(path: path).read { db -> (Int64, Int64) in
            let sealedThrough = try Int64.fetchOne(db, sql: "SELECT max(last_seq) FROM event_blocks") ?? 0
            let owned = try PersonalValueBlocks.owners(db).filter { $0.owner > 0 && (commitments[$0.ref]?.seq ?? .max) <= sealedThrough }
            let chosen = owned[owned.count / 2]
            return (chosen.ref, chosen.owner)
        }
        let seq = commitments[sealedValue]!.seq
        func tampered(_ name: String, _ sql: String...) throws -> [VerificationProblem] {
            let copy = dir.path(name)
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            try DatabaseQueue(path: copy).write { db in for statement in sql { try db.execute(sql: statement) } }
            return try Ledger(path: copy, configuration: Self.configuration(.current)).verify(all: true).problems
        }
        let twice = try tampered("twice.ledger", "INSERT INTO personal_values (ref, owner, value) VALUES (\(sealedValue), \(owner), CAST('EVIL' AS BLOB))")
        #expect(twice.contains { $0.kind == .chain && $0.seq == seq }, "\(twice.map(\.description))")
        #expect(twice.contains { $0.message.contains("personal value \(sealedValue) is held twice") }, "\(twice.map(\.description))")
        // Held again in a block of its own, added beside the block that holds it (a reader shows
        // the later block's copy): no commitment either.
        let added = dir.path("added-block.ledger")
        try FileManager.default.copyItem(atPath: path, toPath: added)
        try DatabaseQueue(path: added).write { db in
            try PersonalValueBlocks.write([PersonalValueRow(ref: sealedValue, owner: owner, salt: nil, value: Array("EVIL".utf8))][...], db)
        }
        let inTwoBlocks = try Ledger(path: added, configuration: Self.configuration(.current)).verify(all: true).problems
        #expect(inTwoBlocks.contains { $0.kind == .chain && $0.seq == seq }, "\(inTwoBlocks.map(\.description))")

        // Deleted from its block (the block rewritten without it), its commitment kept, its ref
        // listed as a fleet store's erasure.
        let copy = dir.path("deleted.ledger")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        try DatabaseQueue(path: copy).write { db in
            #expect(try PersonalValueBlocks.erase([sealedValue], db) == 1)
            try db.execute(
                sql: "INSERT INTO erased_commitments (ref, commitment) VALUES (?, ?)", arguments: [sealedValue, Data(commitments[sealedValue]!.commitment)])
            try db.execute(sql: "INSERT INTO ledger_info (key, value) VALUES ('fleet_erased_refs', ?)", arguments: ["\(sealedValue)"])
        }
        let passedOff = try Ledger(path: copy, configuration: Self.configuration(.current)).verify(all: true).problems
        #expect(!passedOff.contains { $0.kind == .chain }, "the commitment is the right one: \(passedOff.map(\.description))")
        #expect(passedOff.contains { $0.message.contains("fleet_erased_refs lists values erased by a fleet store, but this file is not a copy pulled from one") })
        #expect(passedOff.contains { $0.message.contains("erased_commitments keeps a commitment of personal value \(sealedValue), which no erasure event") })

        let kept = try tampered(
            "kept.ledger", "INSERT INTO erased_commitments (ref, commitment) VALUES (\(sealedValue), x'00112233445566778899aabbccddeeff')")
        #expect(kept.map(\.message) == ["erased_commitments keeps a commitment of personal value \(sealedValue), which is still held: it was edited"])

        // Cells of the wrong type: the chain breaks where they are used, and nothing stops.
        let typed = try tampered("typed.ledger", "UPDATE personal_values SET value = 2000000000000001 WHERE ref = \(owner)")
        #expect(typed.contains { $0.kind == .chain && $0.seq == commitments[owner]!.seq }, "\(typed.map(\.description))")
    }
}
