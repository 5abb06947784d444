import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

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
        FileManager.default.createFile(atPath: path, contents: Data(key), attributes: [.posixPermissions: 0o600])
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
