import Foundation
import GRDB

/// The ledger's SQLite file, and the one owner of its storage: opening it (created with mode
/// 0600, checked, migrated, its chain mode and identity fixed once), its connections (a pool of
/// read-only ones, and the one writing connection opened by the first write), loading the state
/// at a seq with any damage met on the way, and the write transaction an append commits in.
///
/// The application layer (``Ledger``) decides; this type and the `Persistence/` folder it heads
/// read and write. Nothing outside `Persistence/` and `Integrity/` opens a connection of its own.
final class LedgerFile: Sendable {
    /// The file's path.
    let path: String
    let configuration: LedgerConfiguration
    /// Read-only connections, for every read: a pool when the ledger may be written (reads go on
    /// while an append commits), one connection when it is opened read-only (half the opening
    /// cost, which counts when a ship or a report opens a thousand device ledgers).
    let pool: any DatabaseReader
    /// The one writing connection, once something was written (``writeQueue()``).
    private let writeConnection: Locked<DatabaseQueue?>
    /// The hash chain's mode: keyed (HMAC) when the configuration gives a chain key.
    let chain: HashChain
    /// Snapshot pages loaded (on open, by time travel) or written, shared by later loads.
    let pageCache = SnapshotPageCache()
    /// The seq of an interrupted erasure this open finished (``finishErasure(_:)``), for the
    /// `forget` that follows to report; taken once.
    let erasureFinishedOnOpen = Locked<Int64?>(nil)

    /// SQLite's `application_id` for ledger files ("PLdg").
    static let applicationID: Int32 = 0x504C_6467

    /// Opens the file at `path`, creating it (mode 0600) if it does not exist and the
    /// configuration is not read-only. Opening an up-to-date ledger writes nothing.
    init(path: String, configuration: LedgerConfiguration) throws {
        self.path = path
        self.configuration = configuration
        chain = HashChain(key: configuration.chainKey)
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            throw LedgerError(.io, "\(path) is a directory; give the path of a ledger file inside it (for example \(path)/purchases.ledger)")
        }
        if !configuration.readOnly && !FileManager.default.fileExists(atPath: path) {
            // Created by us first, so SQLite and its -wal/-shm files get the owner-only mode.
            guard FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o600]) else {
                throw LedgerError(.io, "cannot create \(path)")
            }
        } else if !FileManager.default.fileExists(atPath: path) {
            throw LedgerError(.io, "no ledger at \(path)")
        }
        // Reads go through a pool of read-only connections. The one writing connection is
        // opened by the first write (an append, a migration, a rebuild): until then opening a
        // ledger writes nothing at all, so an append refused by the rules leaves the file and
        // its WAL byte for byte as they were.
        writeConnection = Locked(nil)
        do {
            // Only a writable open asks for the size (Foundation's attributes also look the owner's
            // and group's names up, through nsswitch: about 1 ms of every command that opens a ledger).
            if !configuration.readOnly && ((try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0) == 0 {
                // A new ledger: in WAL mode from its first write on.
                try LedgerFile.writeQueue(writeConnection, path: path, configuration: configuration).writeWithoutTransaction { db in
                    _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
                }
            }
            var config = LedgerFile.connectionConfiguration(configuration)
            config.readonly = true
            pool = configuration.readOnly ? try DatabaseQueue(path: path, configuration: config) : try DatabasePool(path: path, configuration: config)
            try LedgerFile.prepare(pool, openWriter: writeQueue, configuration: configuration, path: path)
            // An erasure killed between its commit and its checkpoint left the erased values'
            // old pages in the main file: a writable open finishes it (docs/storage.md).
            if !configuration.readOnly,
                try pool.read({ try Bool.fetchOne($0, sql: "SELECT EXISTS (SELECT 1 FROM ledger_info WHERE key = 'erasure_unfinished')") }) == true
            {
                let finished = try writeQueue().writeWithoutTransaction { db in try LedgerFile.finishErasure(db) }
                erasureFinishedOnOpen.withLock { $0 = finished }
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB {
            var notALedger = LedgerError(.notALedger, "\(path) is not a ledger (not an SQLite database)")
            notALedger.underlying = error
            throw notALedger
        } catch {
            throw LedgerFile.wrap(error, "opening \(path)")
        }
    }

    /// What every connection to the ledger is opened with.
    private static func connectionConfiguration(_ configuration: LedgerConfiguration) -> Configuration {
        var config = Configuration()
        config.prepareDatabase { db in
            // Reads through read(2) and SQLite's own page cache, not a memory map (whatever the
            // library's build default): a full scan of a mapped file keeps every page it touched
            // in the process's resident memory until the connection closes (25 MB of a
            // 1,000,000-event replay's 179 MB peak), and reading through the map was not faster
            // here (replay 1.03-1.12 s against 1.05-1.25 s, time travel p99 36-40 ms against
            // 30-34 ms, two runs each).
            try db.execute(sql: "PRAGMA mmap_size = 0")
            // Deleted and overwritten content is zeroed, not left in free space, whatever the
            // library's build default (Debian's is on already; so the figures here include it):
            // an erased value leaves no copy in the file (docs/storage.md, "Erasure").
            try db.execute(sql: "PRAGMA secure_delete = ON")
            // What the file's schema holds (views, triggers) runs no function that is not
            // innocuous: a view put in with sqlite3 cannot read `pragma_database_list` to tell
            // `verify`'s connection from a report's and show each something else.
            try db.execute(sql: "PRAGMA trusted_schema = OFF")
        }
        config.busyMode = .timeout(
            TimeInterval(configuration.busyTimeout.components.seconds)
                + TimeInterval(configuration.busyTimeout.components.attoseconds) / 1e18)
        return config
    }

    /// The writing connection. A queue, not a second pool: a pool's writer makes sure of a
    /// non-empty WAL file by committing a throw-away table, which would touch the file on every
    /// open. The ledger is in WAL mode from its creation, and SQLite keeps that mode in the file.
    private static func openWriteConnection(_ path: String, configuration: LedgerConfiguration) throws -> DatabaseQueue {
        guard !configuration.readOnly else { throw LedgerError(.io, "the ledger was opened read-only") }
        var config = connectionConfiguration(configuration)
        config.journalMode = .default
        let queue = try DatabaseQueue(path: path, configuration: config)
        try queue.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(configuration.durability.rawValue)")
            try db.execute(sql: "PRAGMA cache_size = \(-writerCacheKiB)")
        }
        return queue
    }

    /// The write connection's page cache, in KiB. Each durable append reads the B-tree pages it
    /// changes (the log's tail, the transactions, downloads, owned content and their indexes); in
    /// a large ledger SQLite's default 2 MiB lets them go between appends. With 8 MiB, one-event
    /// appends to the 1,000,000-event workload's ledger (`ledger-bench append-at-scale`, medians of
    /// 9 appends, runs alternated with the default) came to a median of 0.92x of a raw commit over
    /// 11 runs (0.86-1.06), against 0.88x over 16 runs (0.80-1.05) with the default: fsync makes
    /// every run noisy, the gain is small but it held in most pairs. A streaming import writes
    /// each page once and runs with the default (``bulkCacheKiB``): the larger cache only added to
    /// its peak memory (192 MB against 182 MB at 1,000,000 events).
    static let writerCacheKiB = 8192
    static let bulkCacheKiB = 2000

    /// Runs `body` with the write connection's page cache at `kib`, then sets it back. SQLite
    /// frees the pages past a smaller limit at once.
    func withWriterCache<T>(_ kib: Int, _ body: () throws -> T) throws -> T {
        let queue = try writeQueue()
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = \(-kib)") }
        defer { try? queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = \(-LedgerFile.writerCacheKiB)") } }
        return try body()
    }

    /// The writing connection, opened on first use.
    func writeQueue() throws -> DatabaseQueue {
        try LedgerFile.writeQueue(writeConnection, path: path, configuration: configuration)
    }

    private static func writeQueue(_ connection: Locked<DatabaseQueue?>, path: String, configuration: LedgerConfiguration) throws -> DatabaseQueue {
        try connection.withLock { queue in
            if let queue { return queue }
            let opened = try openWriteConnection(path, configuration: configuration)
            queue = opened
            return opened
        }
    }

    /// How many times `forget` erased a user from the file in `db`.
    static func erasures(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM ledger_info WHERE key = 'personal_erasures'")) ?? 0
    }

    /// Wraps any error as a ``LedgerError``.
    static func wrap(_ error: any Error, _ doing: String) -> LedgerError {
        if let error = error as? LedgerError { return error }
        var wrapped: LedgerError
        if let error = error as? DatabaseError {
            if error.resultCode == .SQLITE_NOTADB {
                wrapped = LedgerError(.notALedger, "not a ledger (not an SQLite database)")
            } else if error.resultCode == .SQLITE_CORRUPT {
                wrapped = LedgerError(.corruptData, "the SQLite file is damaged: \(error.message ?? "corrupt")")
            } else {
                wrapped = LedgerError(.storage, "\(doing): SQLite error \(error.resultCode.rawValue): \(error.message ?? "")")
            }
            wrapped.underlying = error
            return wrapped
        }
        wrapped = LedgerError(.storage, "\(doing): \(error)")
        wrapped.underlying = error
        return wrapped
    }

    /// Checks the file is a ledger this version can read, runs pending migrations, and fixes the
    /// chain mode on creation.
    private static func prepare(_ pool: any DatabaseReader, openWriter: () throws -> DatabaseQueue, configuration: LedgerConfiguration, path: String) throws {
        let migrator = Migrations.migrator
        let key = configuration.chainKey
        try pool.read { db in
            let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
            let tables = try Int.fetchOne(db, sql: "SELECT count(*) FROM sqlite_master") ?? 0
            let interrupted = try interruptedCreation(db, applicationID: applicationID)
            if applicationID != LedgerFile.applicationID && applicationID != 0 {
                // Another application marked the file as its own: never turned into a ledger.
                throw LedgerError(
                    .notALedger, "\(path) is an SQLite database of another application (application_id \(applicationID)), not a ledger; nothing was written")
            }
            if applicationID != LedgerFile.applicationID && tables > 0 && !interrupted {
                throw LedgerError(.notALedger, "\(path) is an SQLite database but not a ledger")
            }
            if configuration.readOnly && tables == 0 && applicationID == 0 {
                throw LedgerError(.notALedger, "\(path) is empty: no ledger yet (append or import events to make it one)")
            }
            if try migrator.hasBeenSuperseded(db) {
                throw LedgerError(
                    .schemaTooNew,
                    "\(path) was written by a newer purchase-ledger (schema \(try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0), this version knows \(embeddedMigrations.count)); upgrade to read it"
                )
            }
            if !configuration.readOnly, !configuration.writesPulledCopy, tables > 0,
                try db.tableExists("ledger_info"), try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'pulled_from'") != nil
            {
                throw LedgerError(
                    .pulledCopy,
                    "\(path) is a copy pulled from a fleet store (purchase-ledger pull): it is read-only (its identity key stayed on the device); nothing was written")
            }
            if configuration.readOnly, try !Migrations.readableWithoutMigrating(db) {
                throw LedgerError(.schemaTooNew, "\(path) needs a migration and was opened read-only")
            }
        }
        let upToDate = try pool.read { db -> Bool in
            guard try migrator.hasCompletedMigrations(db), try Int32.fetchOne(db, sql: "PRAGMA application_id") == LedgerFile.applicationID else {
                return false
            }
            let keys = try String.fetchAll(
                db, sql: "SELECT key FROM ledger_info WHERE key IN ('chain', 'ledger_id', 'redaction_secret', 'identity_key')")
            // An app given that the ledger does not record (or records otherwise) is written, or refused, below.
            if let bundle = configuration.appleBundleID,
                try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'apple_bundle_id'") != bundle
            {
                return false
            }
            return keys.count == 4
        }
        // An up-to-date ledger is opened without writing a byte.
        if !configuration.readOnly && !upToDate {
            let writer = try openWriter()
            // The file says it is a ledger before the first table exists: a creation killed
            // half-way is finished by the next open instead of leaving a file nobody can open.
            try writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA application_id = \(LedgerFile.applicationID)") }
            try migrator.migrate(writer)
            try writer.write { db in
                try db.execute(sql: "PRAGMA application_id = \(LedgerFile.applicationID)")
                try db.execute(sql: "PRAGMA user_version = \(embeddedMigrations.count)")
                let created = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'chain'") == nil
                if created {
                    // The chain of a new ledger starts from its id (HashChain.genesis).
                    try db.execute(
                        sql: "INSERT INTO ledger_info (key, value) VALUES ('chain', ?), ('key_check', ?), ('genesis', 'ledger-id')",
                        arguments: [key == nil ? "sha256" : "hmac-sha256", key.map { Data(HashChain.keyCheck($0)) }])
                }
                // The identity key, made once: a new ledger's id is derived from its public key
                // (LedgerIdentity), so no other file can prove it holds that id.
                var identityKey = try LedgerIdentity.identityKey(db)
                if identityKey == nil {
                    let key = CheckpointSigningKey()
                    try db.execute(sql: "INSERT INTO ledger_info (key, value) VALUES ('identity_key', ?)", arguments: [Data(key.seed)])
                    identityKey = key
                }
                if try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'ledger_id'") == nil {
                    // Ledgers made before identities existed get theirs on the first writable open, and say so.
                    let origin = created ? "created" : "assigned on open at \(configuration.clock())"
                    try db.execute(
                        sql: "INSERT INTO ledger_info (key, value) VALUES ('ledger_id', ?), ('ledger_id_origin', ?)",
                        arguments: [LedgerIdentity.id(derivedFrom: identityKey!.publicKey), origin])
                }
                // The secret of this ledger's pseudonyms (Redactor), made once.
                try db.execute(
                    sql: "INSERT OR IGNORE INTO ledger_info (key, value) VALUES ('redaction_secret', ?)", arguments: [Data(Redactor.randomSecret())])
                // The app whose signed transactions count as Apple's evidence, recorded once.
                if let bundle = configuration.appleBundleID {
                    let recorded = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'apple_bundle_id'")
                    if let recorded, recorded != bundle {
                        throw LedgerError(
                            .malformedInput, "this ledger checks Apple's signatures for the app \(recorded), not \(bundle): a ledger belongs to one app")
                    }
                    if recorded == nil {
                        try db.execute(sql: "INSERT INTO ledger_info (key, value) VALUES ('apple_bundle_id', ?)", arguments: [bundle])
                        // The evidence stored so far was checked without it: checked again by the rebuild this open runs.
                        if try db.tableExists("transaction_evidence"), try Int.fetchOne(db, sql: "SELECT count(*) FROM transaction_evidence") ?? 0 > 0 {
                            try db.execute(sql: "UPDATE ledger_info SET value = 'stale' WHERE key = 'projection_stamp'")
                        }
                    }
                }
            }
            // A migration that rebuilds a table (0003, 0004) leaves the old one's pages free in
            // the file: past a tenth of it, they are given back, once, on the upgrading open (a
            // 1,000,000-event ledger grew from 96 to 113 MB without it; VACUUM took about 1 s).
            writer.writeWithoutTransaction { db in LedgerFile.giveBackFreePages(db) }
        }
        try pool.read { db in
            let mode = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'chain'")
            if mode == "hmac-sha256" {
                guard let key else { throw LedgerError(.keyRequired, "this ledger's hash chain is keyed; open it with its chain key") }
                let check = try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'key_check'")
                guard check == Data(HashChain.keyCheck(key)) else { throw LedgerError(.keyMismatch, "the chain key given is not this ledger's key") }
            } else if key != nil {
                throw LedgerError(
                    .notKeyed,
                    "a chain key was given, but the file says its hash chain has no key: it is another ledger, or a keyed ledger whose key check was removed from ledger_info (tampering); a key cannot be added after creation"
                )
            }
        }
    }

    /// Gives the file's free pages back (VACUUM) when they are more than a tenth of it: after an
    /// upgrade left a table's or a snapshot's old pages behind. Outside any transaction. Never
    /// fails what came before it: when the file is busy past the timeout, or there is no room for
    /// the copy VACUUM makes, the pages stay free, and later writes use them.
    static func giveBackFreePages(_ db: Database) {
        guard let pages = try? Int.fetchOne(db, sql: "PRAGMA page_count"), let free = try? Int.fetchOne(db, sql: "PRAGMA freelist_count"),
            free > 0 && free * 10 > pages
        else { return }
        try? db.execute(sql: "VACUUM")
    }

    /// Finishes an erasure whose transaction committed (`erasure_unfinished` in `ledger_info`,
    /// holding its event's seq): checkpoints the WAL into the main file and truncates it, so no
    /// page image of the erased values is left in either, then clears the mark (checkpointed
    /// too). Returns the erasure's seq when it finished one; nil when none was pending, or when
    /// another connection kept the WAL from being truncated (the mark stays for the next try:
    /// ``Ledger/forget(user:)``, or the next writable open).
    static func finishErasure(_ db: Database) throws -> Int64? {
        guard let seq = try Int64.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'erasure_unfinished'") else { return nil }
        guard try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")?[0] as Int64? == 0 else { return nil }
        try db.execute(sql: "DELETE FROM ledger_info WHERE key = 'erasure_unfinished'")
        _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
        return seq
    }

    /// A ledger whose creation was killed after its first migration and before it was marked as
    /// a ledger (earlier builds marked it last): no application id, and every migration
    /// recorded is one of ours. No event can be in it: events are appended after the mark.
    private static func interruptedCreation(_ db: Database, applicationID: Int32) throws -> Bool {
        guard applicationID == 0, try db.tableExists("grdb_migrations") else { return false }
        let recorded = try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations")
        return Set(recorded).isSubset(of: embeddedMigrations.map(\.name))
    }

    // MARK: - Loading

    /// A state loaded from the file: the state, the chain link of its last event (empty unless
    /// loaded to the end), and the first damage met on the way when the load was asked to go on
    /// past damage.
    struct Loaded {
        var state: LedgerState
        var lastLink: [UInt8]
        var damage: LedgerError?
    }

    /// The state after `target` (or the end), from the newest valid snapshot at or before it plus
    /// the events after it, through this file's page cache. With `collectingDamage`, stored bytes
    /// that do not decode are stepped over and the first such damage comes back in
    /// ``Loaded/damage``; without it they throw.
    func load(_ db: Database, upTo target: Int64, collectingDamage: Bool = false) throws -> Loaded {
        let snapshot = try Snapshots.latestWithRefs(db, atOrBefore: target, cache: pageCache, chain: chain)
        var state = snapshot?.state ?? LedgerState()
        // The events after a snapshot need only the user ids' rows and those assigned since; and
        // none past the refs the next snapshot records (a state before the first snapshot reads
        // those alone, not the whole table: `replay --at 5` of a 1,000,000-event ledger read
        // 324,610 values for 5 events).
        func next() throws -> Int64? {
            guard target != .max else { return nil }
            return try Int64.fetchOne(db.cachedStatement(sql: "SELECT min(personal_refs) FROM snapshots WHERE seq > ?"), arguments: [target])
        }
        let personal: PersonalValues?
        if let snapshot {
            personal = try snapshot.personalRefs.map { try PersonalValues.since($0, upTo: next(), db) }
        } else if try db.columns(in: "snapshots").contains(where: { $0.name == "personal_refs" }) {
            // (A ledger opened read-only before migration 0007 has neither refs nor the column.)
            personal = try next().map { try PersonalValues.since(0, upTo: $0, db) }
        } else {
            personal = nil
        }
        var damage: LedgerError?
        try LogReplay.advance(
            &state, db, through: target, personal: personal,
            onCorrupt: collectingDamage ? { error in if damage == nil { damage = error } } : nil)
        return Loaded(state: state, lastLink: target == .max ? try EventStore.lastLink(db) : [], damage: damage)
    }

    /// The state after the last stored event, with the damage found on the way, and how many
    /// erasures the file had then. Through the page cache: a later state at an earlier seq
    /// shares most of these pages.
    func loadHead() throws -> (Loaded, erasures: Int64) {
        try pool.read { db in
            let erasures = try LedgerFile.erasures(db)
            return (try load(db, upTo: .max, collectingDamage: true), erasures)
        }
    }

    /// Reads through the pool, every error as a ``LedgerError``.
    func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try pool.read(body)
        } catch {
            throw LedgerFile.wrap(error, "reading")
        }
    }

    // MARK: - Writing

    private static let begin = PreparedSQL("BEGIN IMMEDIATE")
    private static let commit = PreparedSQL("COMMIT")
    private static let rollback = PreparedSQL("ROLLBACK")

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction on the writing connection and commits it,
    /// or rolls it back when `body` throws: what an append commits its batch in. Returns what
    /// `body` returned and SQLite's data version of the connection right after the commit (it
    /// changes with every later commit to the file, this connection's or another's).
    func transaction<T>(_ statements: PreparedStatements, _ body: (Database) throws -> T) throws -> (T, dataVersion: UInt32?) {
        try writeQueue().writeWithoutTransaction { db in
            var result: T?
            try LedgerFile.immediateTransaction(db, statements) { result = try body(db) }
            return (result!, EventStore.dataVersion(db))
        }
    }

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction on the write connection, and commits, or
    /// rolls back when it throws. GRDB's `inTransaction` does the same, but prepares its `BEGIN`
    /// and `COMMIT` again each time and runs its observer bookkeeping around them; on a one-event
    /// append that showed in the profile.
    static func immediateTransaction(_ db: Database, _ statements: PreparedStatements, _ body: () throws -> Void) throws {
        try statements(begin, db).executeWithoutArguments(db)
        do {
            try body()
            try statements(commit, db).executeWithoutArguments(db)
            statements.texts.keepMade()
        } catch {
            if db.isInsideTransaction { try? statements(rollback, db).executeWithoutArguments(db) }
            statements.texts.forgetMade()
            throw error
        }
    }
}
