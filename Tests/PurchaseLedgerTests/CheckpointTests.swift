import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Signed checkpoints: what a plain hash chain cannot show (a history rewritten with every link
/// recomputed, a file rolled back or cut short), a checkpoint kept elsewhere does.
struct CheckpointTests {
    /// A ledger with sealed blocks and snapshots: product p1, then `count` purchases of users u0...
    static func ledger(_ path: String, count: Int, key: [UInt8]? = nil) throws -> Ledger {
        var configuration = testConfiguration()
        configuration.chainKey = key
        let ledger = try Ledger(path: path, configuration: configuration)
        try ledger.append(E.product("p1"))
        try ledger.append(contentsOf: (0..<count).flatMap { [E.queued("t\($0)", user: "u\($0 % 7)"), E.purchased("t\($0)")] })
        return ledger
    }

    /// What a forger who knows the format does: the same events, one changed, written into a new
    /// file by the library itself (so every link is right), given the original's ledger id.
    static func forge(_ ledger: Ledger, to path: String, key: [UInt8]? = nil, keep: Int? = nil, change: (Event) -> Event) throws -> Ledger {
        var events = try ledger.events(from: 1, limit: .max).filter { !$0.appendedByLedger }.map(\.event)
        if let keep { events = Array(events.prefix(keep)) }
        events = events.map(change)
        var configuration = testConfiguration()
        configuration.chainKey = key
        // The id and the identity key first (whoever can edit the file holds both): the chain
        // starts from the id.
        _ = try Ledger(path: path, configuration: configuration)
        let id = try #require(try ledger.identity()).id
        let identityKey = try ledger.read { try Data.fetchOne($0, sql: "SELECT value FROM ledger_info WHERE key = 'identity_key'") }
        try DatabaseQueue(path: path).write {
            try $0.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", arguments: [id])
            try $0.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'identity_key'", arguments: [identityKey])
        }
        let forged = try Ledger(path: path, configuration: configuration)
        try forged.append(contentsOf: events)
        return forged
    }

    @Test(arguments: [nil, Array("a chain key of thirty-two bytes!".utf8)])
    func aCheckpointCatchesRewritesRollbacksAndTruncationsThatThePlainChainCannot(key: [UInt8]?) throws {
        let dir = try TemporaryDirectory()
        let ledger = try Self.ledger(dir.path("a.ledger"), count: 300, key: key)
        let blocks = try ledger.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM event_blocks") } ?? 0
        #expect(blocks > 10, "sealed blocks")
        let signer = CheckpointSigningKey()
        let checkpoint = try ledger.checkpoint(signingKey: signer)
        let id = try ledger.identity()?.id
        #expect(checkpoint.seq == 601 && checkpoint.ledgerID == id)
        try ledger.verify(against: checkpoint, publicKey: signer.publicKey)
        // It round-trips through its JSON and still verifies; the ledger may grow past it.
        let read = try Checkpoint(json: checkpoint.json)
        #expect(read == checkpoint)
        try ledger.append(contentsOf: [E.queued("t-late"), E.purchased("t-late")])
        try ledger.verify(against: read, publicKey: signer.publicKey)

        // A user rewritten at seq 100, every link recomputed: the chain is whole, verify passes,
        // and only the checkpoint shows it.
        let forged = try Self.forge(ledger, to: dir.path("forged.ledger"), key: key) { event in
            if case .paymentQueued("t49", let p, let q, _) = event.body { return Event(at: event.at, .paymentQueued(transaction: "t49", product: p, quantity: q, user: "mallory")) }
            return event
        }
        #expect(try forged.verify().isValid, "a recomputed chain verifies")
        let rewritten = try #require(#expect(throws: CheckpointMismatch.self) { try forged.verify(against: checkpoint, publicKey: signer.publicKey) })
        #expect(rewritten.seq == 601 && rewritten.message.contains("rewritten"), "\(rewritten)")

        // Cut short (or an older copy put back): the seq where the file ends.
        let short = try Self.forge(ledger, to: dir.path("short.ledger"), key: key, keep: 500) { $0 }
        let truncated = try #require(#expect(throws: CheckpointMismatch.self) { try short.verify(against: checkpoint, publicKey: signer.publicKey) })
        #expect(truncated.seq == 500 && truncated.message.contains("ends at seq 500"), "\(truncated)")

        // Another ledger, another key, an altered checkpoint.
        let other = try Self.ledger(dir.path("other.ledger"), count: 3, key: key)
        #expect(throws: CheckpointMismatch.self) { try other.verify(against: checkpoint, publicKey: signer.publicKey) }
        #expect(throws: CheckpointMismatch.self) { try ledger.verify(against: checkpoint, publicKey: CheckpointSigningKey().publicKey) }
        var altered = checkpoint
        altered.seq = 3
        #expect(throws: CheckpointMismatch.self) { try ledger.verify(against: altered, publicKey: signer.publicKey) }
    }

    @Test func theCommandsWriteKeysPrivatelyAndVerifyExitsOneNamingTheSeq() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        _ = try Self.ledger(path, count: 50)
        let key = dir.path("support.key")
        #expect(try cli(["keygen", "-o", key]).status == 0)
        let mode = try FileManager.default.attributesOfItem(atPath: key)[.posixPermissions] as? Int
        #expect(mode == 0o600)
        #expect(try String(contentsOfFile: key + ".pub", encoding: .utf8).hasPrefix("purchase-ledger public key ed25519 "))
        let again = try cli(["keygen", "-o", key])
        #expect(again.status == 3 && again.stderr.contains("never replaces"), "\(again.stderr)")

        let checkpoint = dir.path("a.checkpoint.json")
        let before = try fileBytes(path)
        #expect(try cli(["checkpoint", path, "--signing-key", key, "-o", checkpoint]).status == 0)
        #expect(try fileBytes(path) == before, "checkpoint writes nothing into the ledger")
        let ok = try cli(["verify", path, "--checkpoint", checkpoint, "--public-key", key + ".pub"])
        #expect(ok.status == 0 && ok.stdout.contains("extends the checkpoint"), "\(ok.stdout) \(ok.stderr)")

        let forged = try Self.forge(try Ledger(path: path, configuration: testConfiguration()), to: dir.path("forged.ledger")) { event in
            if case .paymentQueued("t7", let p, let q, _) = event.body { return Event(at: event.at, .paymentQueued(transaction: "t7", product: p, quantity: q, user: "mallory")) }
            return event
        }
        _ = forged
        #expect(try cli(["verify", dir.path("forged.ledger")]).status == 0, "the plain chain was recomputed")
        let caught = try cli(["verify", dir.path("forged.ledger"), "--checkpoint", checkpoint, "--public-key", key + ".pub"])
        #expect(caught.status == 1 && caught.stdout.contains("seq 101") && caught.stdout.contains("rewritten"), "\(caught.stdout) \(caught.stderr)")

        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: key)
        let open = try cli(["checkpoint", path, "--signing-key", key])
        #expect(open.status == 2 && open.stderr.contains("chmod 600"), "\(open.stderr)")
        let half = try cli(["verify", path, "--checkpoint", checkpoint])
        #expect(half.status == 2 && half.stderr.contains("together"))
    }

    /// A personal value edited beside its commitment (the chain untouched, projections rebuilt):
    /// in the open tail, where its event stores the commitment, the file still extends the
    /// checkpoint, and `verify --checkpoint` says so, then reports the value, as plain `verify`
    /// does (exit 1). In a sealed block, where the commitment is made again from the value
    /// (docs/format.md, "Commitments elided"), the edit changes the chain: the file no longer
    /// extends the checkpoint. Its ok lines say what each checked.
    @Test func verifyWithACheckpointChecksEverythingTheChainCommitsTo() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        do {
            let ledger = try Self.ledger(path, count: 30)
            // A user id whose event stays in the open tail (blocks of 8: 61 events sealed through 56).
            try ledger.append(E.queued("t-tail", user: "u-tail"))
        }
        let key = dir.path("support.key"), checkpoint = dir.path("cp.json")
        #expect(try cli(["keygen", "-o", key]).status == 0)
        #expect(try cli(["checkpoint", path, "--signing-key", key, "-o", checkpoint]).status == 0)
        let clean = try cli(["verify", path, "--checkpoint", checkpoint, "--public-key", key + ".pub"])
        #expect(clean.status == 0 && clean.stdout.contains("extends the checkpoint") && clean.stdout.contains("every personal value matches its commitment"), "\(clean.stdout)")

        let u3Ref = try DatabaseQueue(path: path).read { db in try PersonalValues.userRef("u3", db) }
        for (user, sealed) in [("u-tail", false), ("u3", true)] {
            let copy = dir.path("\(user).ledger")
            try FileManager.default.copyItem(atPath: path, toPath: copy)
            try DatabaseQueue(path: copy).write { db in
                try db.execute(sql: "UPDATE personal_values SET value = CAST('u9' AS BLOB) WHERE value = CAST(? AS BLOB)", arguments: [user])
            }
            #expect(try cli(["rebuild", copy]).status == 0)
            #expect(try cli(["report", copy, "--user", "u9", "--format", "csv"]).stdout.contains(user == "u3" ? "t3" : "t-tail"), "the edit shows in the reports")
            let caught = try cli(["verify", copy, "--checkpoint", checkpoint, "--public-key", key + ".pub", "--all"])
            #expect(caught.status == 1, "\(caught.stdout) \(caught.stderr)")
            if sealed {
                #expect(
                    !caught.stdout.contains("extends the checkpoint") && caught.stdout.contains("the hash chain breaks at event 8")
                        && caught.stdout.contains("or a personal value it introduces (ref \(u3Ref!))"), "\(caught.stdout) \(caught.stderr)")
            } else {
                #expect(caught.stdout.contains("extends the checkpoint") && caught.stdout.contains("personalValues"), "\(caught.stdout)")
            }
        }
    }

    /// Another ledger's key-derived id copied into a file whose identity key is then deleted (the
    /// chain relinked from that id): verify reports the id (exit 1) and checkpoint refuses to sign
    /// under it, as when the key is replaced instead.
    @Test func aKeyDerivedIDWithNoKeyIsReportedAndNeverSigned() throws {
        let dir = try TemporaryDirectory()
        let mine = try Self.ledger(dir.path("a.ledger"), count: 20)
        let theirs = try Ledger(path: dir.path("b.ledger"), configuration: testConfiguration())
        let theirID = try #require(try theirs.identity()?.id)
        #expect(LedgerIdentity.hasDerivedForm(theirID))
        // A's events relinked under B's id (the chain starts from the id), then the key deleted.
        let path = dir.path("forged.ledger")
        _ = try Ledger(path: path, configuration: testConfiguration())
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", arguments: [theirID])
        }
        try Ledger(path: path, configuration: testConfiguration())
            .append(contentsOf: try mine.events(from: 1, limit: .max).filter { !$0.appendedByLedger }.map(\.event))
        try DatabaseQueue(path: path).write { db in try db.execute(sql: "DELETE FROM ledger_info WHERE key = 'identity_key'") }
        let verify = try cli(["verify", path])
        #expect(verify.status == 1 && verify.stdout.contains("not derived from this file's identity key (the file has none"), "\(verify.stdout) \(verify.stderr)")
        let key = dir.path("support.key")
        #expect(try cli(["keygen", "-o", key]).status == 0)
        let signed = try cli(["checkpoint", path, "--signing-key", key, "-o", dir.path("cp.json")])
        #expect(signed.status == 1 && signed.stderr.contains("nothing was signed"), "\(signed.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir.path("cp.json")))
    }

    /// Values only an edited file can hold (written here as a forger would: the library without
    /// its input checks, every link right): verify reports them as damage with their seq, export
    /// refuses to write JSON it cannot (a NaN) or that import would refuse.
    @Test func storedValuesTheImporterWouldRefuseAreDamageWithTheirSeq() throws {
        let dir = try TemporaryDirectory()
        var unchecked = testConfiguration()
        unchecked.checksInput = false
        // A NaN progress cannot even reach this file's projections (SQLite stores NaN as NULL);
        // in an edited payload, the check names it.
        #expect(InputLimits.storedValueProblem(.downloadProgressed(download: "d1", progress: .nan, bytesWritten: nil, timeRemaining: nil))?.contains("nan") == true)
        for (name, bad) in [
            ("infinite", Event(at: E.at(5), .downloadProgressed(download: "d1", progress: 0.5, bytesWritten: nil, timeRemaining: .infinity))),
            (
                "price",
                Event(
                    at: E.at(5),
                    .productRegistered(
                        ProductRegistration(
                            product: "p2", kind: .consumable, price: "-1.00", currency: "USD", downloadable: false, contents: [], relatedProducts: [])))
            ),
        ] {
            let path = dir.path("\(name).ledger")
            let ledger = try Ledger(path: path, configuration: unchecked)
            try ledger.append(contentsOf: [E.product("p1", contents: [("c1", "1.0")]), E.queued("t1"), E.purchased("t1", downloads: ["d1"]), E.start("d1"), bad])
            let report = try ledger.verify()
            // A number that is not finite does not even decode; any other value, the rules would refuse.
            let why = name == "price" ? "the importer would refuse" : "which no writer stores"
            #expect(report.problems.first?.seq == 5 && report.problems.first?.message.contains(why) == true, "\(name): \(report.problems)")
            if name != "price" {
                // Every command that meets it names it, and none prints `nan` or `inf` as JSON.
                for command in [["events", path, "--json"], ["replay", path, "--json"], ["timeline", path, "--transaction", "t1", "--json"], ["rebuild", path]] {
                    let result = try cli(command)
                    #expect(result.status != 0 && (result.stderr + result.stdout).contains("5"), "\(name): \(command[0]): \(result.stdout) \(result.stderr)")
                    #expect(!result.stdout.contains("nan") && !result.stdout.contains(":inf"), "\(name): \(command[0]) printed \(result.stdout)")
                }
            }
            let verify = try cli(["verify", path])
            #expect(verify.status == 1 && verify.stdout.contains("seq 5"), "\(name): \(verify.stdout)")
            let export = try cli(["export", path])
            #expect(export.status == 3 && export.stderr.contains("seq 5") && !export.stdout.contains("nan"), "\(name): \(export.stderr)")
            // The checked library refuses the same event at input.
            #expect(throws: LedgerError.self) { try Ledger(path: dir.path("\(name)-checked.ledger"), configuration: testConfiguration()).append(bad) }
        }
    }

    /// A keyed ledger passed off as plain (its chain mode and key check edited in ledger_info):
    /// verifying it with its key is tampering (exit 1), and the library opened with the key refuses it.
    @Test func aKeyedLedgerTurnedPlainFailsVerifyWithItsKeyAsTampering() throws {
        let dir = try TemporaryDirectory()
        let key = dir.path("chain.key")
        _ = FileManager.default.createFile(atPath: key, contents: Data(Array("a chain key of thirty-two bytes!".utf8)), attributes: [.posixPermissions: 0o600])
        let path = dir.path("keyed.ledger")
        #expect(try cli(["append", path, "--key-file", key], stdin: sampleLog).status == 0)
        #expect(try cli(["verify", path, "--key-file", key]).status == 0)
        try DatabaseQueue(path: path).write { db in
            try db.execute(sql: "UPDATE ledger_info SET value = 'sha256' WHERE key = 'chain'")
            try db.execute(sql: "UPDATE ledger_info SET value = NULL WHERE key = 'key_check'")
        }
        let verify = try cli(["verify", path, "--key-file", key])
        #expect(verify.status == 1 && verify.stdout.contains("tampering"), "\(verify.stdout) \(verify.stderr)")
        var keyed = LedgerConfiguration()
        keyed.chainKey = Array("a chain key of thirty-two bytes!".utf8)
        #expect { try Ledger(path: path, configuration: keyed) } throws: { ($0 as? LedgerError)?.code == .notKeyed }
        // Without the key, the plain chain does not match the keyed links either.
        #expect(try cli(["verify", path]).status == 1)
    }
}
