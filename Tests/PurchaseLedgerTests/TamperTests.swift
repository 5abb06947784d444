import Foundation
import GRDB
import Testing
@testable import PurchaseLedger
import PurchaseLedgerFleet

/// What must not change is bound into the chain (contract 5.2), tried as an attacker with sqlite3
/// would, on ledgers of 40,001 events (sealed blocks and snapshots), plain and keyed.
@Suite(.serialized) struct TamperTests {
    static let key = Array("a chain key of thirty-two bytes!".utf8)

    static func configuration(key: [UInt8]?) -> LedgerConfiguration {
        var c = testConfiguration(blockSize: 256, snapshotInterval: 5000)
        c.chainKey = key
        return c
    }

    /// Product p1, then 20,000 purchases by users `prefix`0...`prefix`19.
    static func ledger(_ path: String, key: [UInt8]?, users prefix: String) throws -> Ledger {
        let ledger = try Ledger(path: path, configuration: configuration(key: key))
        try ledger.append(E.product("p1"))
        try ledger.append(contentsOf: (0..<20_000).flatMap { [E.queued("t\($0)", user: "\(prefix)\($0 % 20)"), E.purchased("t\($0)")] })
        return ledger
    }

    static func write(_ path: String, _ sql: String, _ arguments: StatementArguments = []) throws {
        try DatabaseQueue(path: path).write { try $0.execute(sql: sql, arguments: arguments) }
    }

    static func keyFile(_ dir: TemporaryDirectory) throws -> String {
        let path = dir.path("chain.key")
        _ = FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o600])
        return path
    }

    /// A ledger id changed in place (to pass the file off as another ledger, in the fleet or a
    /// ticket) breaks the chain at event 1: plain `verify` exits 1 and says so.
    @Test(arguments: [false, true]) func aLedgerIDChangedInPlaceFailsVerify(keyed: Bool) throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("a.ledger")
        let ledger = try Self.ledger(path, key: keyed ? Self.key : nil, users: "u")
        #expect(try ledger.lastSeq() == 40_001)
        #expect(try ledger.read { try Int.fetchOne($0, sql: "SELECT count(*) FROM snapshots") } ?? 0 >= 8)
        let keyArguments = keyed ? ["--key-file", try Self.keyFile(dir)] : []
        #expect(try cli(["verify", path] + keyArguments).status == 0)
        try Self.write(path, "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", [UUID().uuidString.lowercased()])
        let result = try cli(["verify", path] + keyArguments)
        #expect(result.status == 1, "\(result.stdout) \(result.stderr)")
        #expect(result.stdout.contains("seq 1") && result.stdout.contains("ledger id"), "\(result.stdout)")
    }

    /// Another ledger's id written into a file whose own chain is whole (the file relinked from
    /// that id) and shipped first: an id conflict, refused before the fleet store is touched; the
    /// rightful ledger still ships; plain `verify` and `verify --against` say the id is not the
    /// file's. (Before ids were derived from keys, the rightful ledger was refused afterwards as
    /// "rewritten".)
    @Test(.enabled(if: FleetServer.available, "needs PostgreSQL (Tools/ensure-dependencies.sh --with-postgres)"), arguments: [false, true])
    func anIDCopiedFromAnotherLedgerIsAnIDConflictAndTheRightfulLedgerStillShips(keyed: Bool) async throws {
        let dir = try TemporaryDirectory()
        let victim = dir.path("victim.ledger"), mallory = dir.path("mallory.ledger")
        let key: [UInt8]? = keyed ? Self.key : nil
        let rightful = try Self.ledger(victim, key: key, users: "alice-")
        let id = try #require(try rightful.identity())
        #expect(id.isProvenByKey && LedgerIdentity.hasDerivedForm(id.id))
        // Mallory's own file, given the victim's id before its first event, so its chain starts
        // from that id and is whole.
        _ = try Ledger(path: mallory, configuration: Self.configuration(key: key))
        try Self.write(mallory, "UPDATE ledger_info SET value = ? WHERE key = 'ledger_id'", [id.id])
        let forged = try Self.ledger(mallory, key: key, users: "mallory-")
        #expect(try forged.lastSeq() == 40_001)
        #expect(try forged.identity()?.isProvenByKey == false)
        let keyArguments = keyed ? ["--key-file", try Self.keyFile(dir)] : []
        let verified = try cli(["verify", mallory] + keyArguments)
        #expect(verified.status == 1 && verified.stdout.contains("not derived from this file's identity key"), "\(verified.stdout)")

        let (_, url) = try FleetServer.database()
        let first = try cli(["ship", mallory, "--to", url, "--json"] + keyArguments)
        #expect(first.status == 1 && first.stdout.contains("id conflict") && first.stdout.contains("idConflict"), "\(first.stdout) \(first.stderr)")
        let fleet = try await FleetStore.connect(url)
        #expect(try await fleet.counts() == (0, 0), "nothing of the refused file stays")
        let shipped = try cli(["ship", victim, "--to", url] + keyArguments)
        #expect(shipped.status == 0, "\(shipped.stdout) \(shipped.stderr)")
        #expect(try await fleet.counts() == (1, 40_001))
        #expect(try await fleet.shippedHead(ofLedger: id.id)?.publicKey == id.publicKey?.rawRepresentation)
        let again = try cli(["ship", mallory, "--to", url] + keyArguments)
        #expect(again.status == 1 && again.stderr.contains("id conflict"), "\(again.stderr)")
        let against = try cli(["verify", mallory, "--against", url] + keyArguments)
        #expect(against.status == 1 && against.stdout.contains("id conflict"), "\(against.stdout)")
        #expect(try cli(["verify", victim, "--against", url] + keyArguments).status == 0)
        #expect(try await fleet.counts() == (1, 40_001))
        await fleet.close()
    }

    /// A snapshot copied in from another ledger (another user's state at the same seq, pages and
    /// all) is caught by plain `verify`, and time travel never uses it.
    @Test(arguments: [false, true]) func aSnapshotFromAnotherLedgerIsCaughtAndNeverUsed(keyed: Bool) throws {
        let dir = try TemporaryDirectory()
        let victim = dir.path("victim.ledger"), other = dir.path("other.ledger")
        let key: [UInt8]? = keyed ? Self.key : nil
        let honest = try Self.ledger(victim, key: key, users: "alice-").state(atSeq: 20_000)
        _ = try Self.ledger(other, key: key, users: "mallory-")
        let seq: Int64 = 20_000
        try DatabaseQueue(path: victim).write { db in
            try db.execute(sql: "ATTACH DATABASE ? AS other", arguments: [other])
            try db.execute(sql: "INSERT OR IGNORE INTO snapshot_pages SELECT * FROM other.snapshot_pages")
            try db.execute(sql: "DELETE FROM snapshots WHERE seq = ?", arguments: [seq])
            try db.execute(sql: "INSERT INTO snapshots SELECT * FROM other.snapshots WHERE seq = ?", arguments: [seq])
        }
        let c = Self.configuration(key: key)
        let ledger = try Ledger(path: victim, configuration: c)
        #expect(try ledger.state(atSeq: seq) == honest, "time travel replays the log instead")
        #expect(try ledger.state(atSeq: seq).transactions["t1"]?.user == "alice-1")
        let report = try ledger.verify()
        #expect(report.problems.map(\.seq) == [seq] && report.problems[0].kind == .snapshot, "\(report.problems)")
        #expect(report.problems[0].message.contains("not bound to this ledger's chain"))
        let keyArguments = keyed ? ["--key-file", try Self.keyFile(dir)] : []
        let result = try cli(["verify", victim] + keyArguments)
        #expect(result.status == 1 && result.stdout.contains("the file was altered"), "\(result.stdout)")
    }
}
