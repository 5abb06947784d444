import Foundation
import GRDB

/// How a ledger is opened. The defaults suit an app's audit store: every append durable
/// (`synchronous=FULL` in WAL mode), compressed blocks of 1,024 events, a snapshot every 15,000
/// events (at most 128 kept, sharing their unchanged pages).
public struct LedgerConfiguration: Sendable {
    /// SQLite's `synchronous` setting: how hard a commit waits for the disk.
    public enum Durability: String, Sendable {
        /// Each commit is on disk before `append` returns, even across power loss.
        case full = "FULL"
        /// In WAL mode, survives an app crash; the last commits may be lost on power loss.
        case normal = "NORMAL"
    }

    public var durability: Durability = .full
    /// How long an append waits for another process's write before failing with `storage`.
    public var busyTimeout: Duration = .seconds(10)
    /// A secret that turns the hash chain into an HMAC chain. Fixed when the ledger is created.
    public var chainKey: [UInt8]?
    /// Events per sealed, compressed block.
    public var blockSize: Int = 1024
    public var blockCodec: BlockCodec = .lz4Dictionary
    /// A snapshot of the reducer state is stored every this many events (0: never). Time travel
    /// replays at most this many events from the snapshot before; fewer snapshots keep the file
    /// smaller. 15,000: on the shared 1,000,000-event workload the state at a random seq takes
    /// about 8 ms (p99 16-22 ms), and the file 79.6 bytes an event (81.8 with 10,000).
    public var snapshotInterval: Int = 15_000
    /// At most this many snapshots are kept, thinned to stay evenly spread over the log. They
    /// share unchanged pages, so each costs little more than what changed since the previous one.
    public var maxSnapshots: Int = 128
    /// The most of the file the snapshots may take (pages and manifests, against the bytes the
    /// file holds in use). Past it the oldest-spread snapshots are dropped, never the newest, so
    /// time travel to those seqs replays further; set 1 for no bound. The shared 1,000,000-event
    /// workload takes 17%.
    public var maxSnapshotShare: Double = 0.25
    /// Which changed records a snapshot keeps in its overlay rather than rewriting their pages
    /// (tests set small limits to reach them with a small ledger).
    var snapshotOverlay = SnapshotCodec.OverlayLimits()
    /// How sealed blocks keep their events' links (tests write the older layout to read it back).
    var blockLayout = BlockLayout.current
    /// Whether events given to the library are checked as JSON input is (``InputLimits``). Tests
    /// turn it off to write what versions before the checks let in (a NUL in an id).
    package var checksInput = true
    /// Whether personal values are written inside the payloads, as versions before migration
    /// 0007 wrote them (not erasable). Tests turn it on to make such ledgers.
    package var writesPersonalValuesInline = false
    /// The clock giving each event's `recordedAt`. Inject a fixed one for deterministic tests.
    public var clock: @Sendable () -> Timestamp = { Timestamp.now }
    /// Open without writing anything (no migration, no catch-up).
    public var readOnly: Bool = false

    public init() {}
}

extension Timestamp {
    /// The current time.
    public static var now: Timestamp {
        let t = Date().timeIntervalSince1970
        return Timestamp(nanosecondsSinceEpoch: Int64((t * 1_000_000).rounded()) * 1000)
    }
}

/// What an append stored.
public struct AppendResult: Sendable {
    /// The stored events, in order, with their seq (including automatic cancellations).
    public var events: [RecordedEvent]
    /// Input events accepted without storing anything (identical repeats of a command).
    public var ignored: Int
    /// The last seq of the ledger after the append.
    public var lastSeq: Int64
}

/// An event-sourced ledger of in-app purchases and their downloads, in one SQLite file.
///
/// Open (or create) it, append what the app decides and what the store reports, and read back
/// the current state or the state at any past point:
///
/// ```swift
/// let ledger = try Ledger(path: "purchases.ledger")
/// try ledger.append(Event(at: .now, .paymentQueued(transaction: "t1", product: "com.example.book1", quantity: 1, user: "u1")))
/// let owned = try ledger.owns(product: "com.example.book1")
/// let before = try ledger.state(atSeq: 10)
/// ```
///
/// `Ledger` is `Sendable`: share one instance. Appends are serialized; reads go through their own
/// SQLite connections and never wait for a writer. Another process may append to the same file
/// at the same time: it waits for the lock (``LedgerConfiguration/busyTimeout``) and nothing is lost.
///
/// ## Topics
/// - ``append(_:)``, ``append(contentsOf:)``
/// - ``transactions(user:)``, ``downloads(transaction:)``, ``ownedContent()``, ``owns(product:)``
/// - ``contentURL(for:)``, ``updateAvailable(product:content:)``, ``download(forURL:)``
/// - ``state(atSeq:)``, ``state(at:)``, ``observe(from:pollInterval:)``
/// - ``verify(all:progress:)``, ``rebuildProjections(rewritingEveryRow:progress:)``, ``checkpoint()``
public final class Ledger: Sendable {
    /// The ledger file's path.
    public let path: String
    public let configuration: LedgerConfiguration
    /// Read-only connections, for every read: a pool when the ledger may be written (reads go on
    /// while an append commits), one connection when it is opened read-only (half the opening
    /// cost, which counts when a ship or a report opens a thousand device ledgers).
    let pool: any DatabaseReader
    /// The one writing connection, once something was written (``writeQueue()``).
    private let writeConnection: Locked<DatabaseQueue?>
    let chain: HashChain

    struct Writer {
        var state: LedgerState
        var lastLink: [UInt8]
        /// Stored data that did not decode when the ledger was opened: appends are refused, since
        /// the state they would build on is incomplete. Reads and `verify` still work.
        var damage: LedgerError?
        /// Set when an append failed after changing `state`: reload before the next one.
        var stale = false
        /// What this writer's last commit left in the file, while nothing else has written to it
        /// since: the next append then neither reads the log's end again nor marks the projections.
        var lastCommit: LastCommit?
        /// The append path's statements, prepared once on the write connection.
        let statements = PreparedStatements()
        /// The refs of personal values this writer knows (in step with the table while nothing
        /// else writes to the file).
        var personal = PersonalEncoder()
        /// How many erasures the file had when `state` was loaded: after another connection's
        /// `forget`, the state (which holds the erased values) is loaded again, not advanced.
        var erasures: Int64 = 0
    }

    /// The file as this writer's last commit left it.
    struct LastCommit {
        /// SQLite's data version of the write connection right after the commit. It changes with
        /// every commit to the file, this connection's or another's, so an append that finds it
        /// unchanged knows the file is as it was.
        var dataVersion: UInt32
        /// Rows in the log's open tail (`events`).
        var tail: Int
    }

    /// The writer's state. Nothing else keeps a reference to its dictionaries between appends:
    /// a second reference would make the next append copy them all.
    /// Loaded on first use (the first append, ``currentState``, ``check(_:)``), so opening a
    /// ledger to rebuild, to read a state at a seq or to query the projections costs no full load.
    let writer: Locked<Writer?>
    /// Bumped after every commit, so live observers wake up.
    private let commits = Locked(0)
    var commitCount: Int { commits.withLock { $0 } }
    /// Wakes live observers after a commit that stored events.
    func noteCommit() { commits.withLock { $0 += 1 } }
    /// Snapshot pages loaded (on open, by ``state(atSeq:)``) or written, shared by later loads.
    let pageCache = SnapshotPageCache()
    /// The redaction secret of a read-only ledger that holds none (``redactor()``).
    let instanceRedactionSecret = Redactor.randomSecret()
    /// Whether a read-only ledger has found its projections current (`readProjections`).
    private let projectionsSeenCurrent = Locked(false)

    /// SQLite's `application_id` for ledger files ("PLdg").
    static let applicationID: Int32 = 0x504C_6467

    /// Opens the ledger at `path`, creating it (mode 0600) if it does not exist.
    ///
    /// Throws ``LedgerError`` with code `notALedger` for any other file, `schemaTooNew` for a
    /// ledger written by a newer version, `keyRequired` / `keyMismatch` for a keyed chain.
    public init(path: String, configuration: LedgerConfiguration = LedgerConfiguration()) throws {
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
        writer = Locked(nil)
        do {
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
            if !configuration.readOnly && size == 0 {
                // A new ledger: in WAL mode from its first write on.
                try Ledger.writeQueue(writeConnection, path: path, configuration: configuration).writeWithoutTransaction { db in
                    _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
                }
            }
            var config = Ledger.connectionConfiguration(configuration)
            config.readonly = true
            pool = configuration.readOnly ? try DatabaseQueue(path: path, configuration: config) : try DatabasePool(path: path, configuration: config)
            try Ledger.prepare(pool, openWriter: writeQueue, configuration: configuration, path: path)
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB {
            var notALedger = LedgerError(.notALedger, "\(path) is not a ledger (not an SQLite database)")
            notALedger.underlying = error
            throw notALedger
        } catch {
            throw Ledger.wrap(error, "opening \(path)")
        }
        if !configuration.readOnly {
            do {
                try catchUpProjections()
            } catch let error as LedgerError where error.code == .corruptData {
                // A damaged log: the projections stay as they were, reads and verify still work,
                // and appends are refused once they load the state and meet the damage.
            }
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
        defer { try? queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA cache_size = \(-Ledger.writerCacheKiB)") } }
        return try body()
    }

    /// The writing connection, opened on first use.
    func writeQueue() throws -> DatabaseQueue {
        try Ledger.writeQueue(writeConnection, path: path, configuration: configuration)
    }

    private static func writeQueue(_ connection: Locked<DatabaseQueue?>, path: String, configuration: LedgerConfiguration) throws -> DatabaseQueue {
        try connection.withLock { queue in
            if let queue { return queue }
            let opened = try openWriteConnection(path, configuration: configuration)
            queue = opened
            return opened
        }
    }

    /// The state after the last stored event, with the damage found on the way. Through the page
    /// cache: a later state at an earlier seq shares most of these pages.
    private static func loadWriter(_ pool: any DatabaseReader, cache: SnapshotPageCache, chain: HashChain) throws -> Writer {
        var damage: LedgerError?
        var erasures: Int64 = 0
        let (state, link) = try pool.read { db in
            erasures = try Ledger.erasures(db)
            return try withUnsafeMutablePointer(to: &damage) { try Ledger.loadState(db, upTo: .max, cache: cache, chain: chain, damage: $0) }
        }
        var writer = Writer(state: state, lastLink: link, damage: damage)
        writer.erasures = erasures
        return writer
    }

    /// How many times `forget` erased a user from the file in `db`.
    static func erasures(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db.cachedStatement(sql: "SELECT value FROM ledger_info WHERE key = 'personal_erasures'")) ?? 0
    }

    /// Loads the writer's state and link again from the file (after a rolled-back append).
    func reload(_ w: inout Writer) throws {
        w.lastCommit = nil
        (w.state, w.lastLink, w.erasures) = try pool.read { db in
            let erasures = try Ledger.erasures(db)
            let (state, link) = try Ledger.loadState(db, upTo: .max, cache: pageCache, chain: chain)
            return (state, link, erasures)
        }
    }

    /// Runs `body` with the writer's state, loading it on first use.
    func withWriter<T>(_ body: (inout Writer) throws -> T) throws -> T {
        try writer.withLock { w in
            if w == nil {
                do {
                    w = try Ledger.loadWriter(pool, cache: pageCache, chain: chain)
                } catch {
                    throw Ledger.wrap(error, "reading \(path)")
                }
            }
            return try body(&w!)
        }
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
            if applicationID != Ledger.applicationID && applicationID != 0 {
                // Another application marked the file as its own: never turned into a ledger.
                throw LedgerError(
                    .notALedger, "\(path) is an SQLite database of another application (application_id \(applicationID)), not a ledger; nothing was written")
            }
            if applicationID != Ledger.applicationID && tables > 0 && !interrupted {
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
            if configuration.readOnly, try !Migrations.readableWithoutMigrating(db) {
                throw LedgerError(.schemaTooNew, "\(path) needs a migration and was opened read-only")
            }
        }
        let upToDate = try pool.read { db -> Bool in
            guard try migrator.hasCompletedMigrations(db), try Int32.fetchOne(db, sql: "PRAGMA application_id") == Ledger.applicationID else {
                return false
            }
            let keys = try String.fetchAll(
                db, sql: "SELECT key FROM ledger_info WHERE key IN ('chain', 'ledger_id', 'redaction_secret', 'identity_key')")
            return keys.count == 4
        }
        // An up-to-date ledger is opened without writing a byte.
        if !configuration.readOnly && !upToDate {
            let writer = try openWriter()
            // The file says it is a ledger before the first table exists: a creation killed
            // half-way is finished by the next open instead of leaving a file nobody can open.
            try writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA application_id = \(Ledger.applicationID)") }
            try migrator.migrate(writer)
            try writer.write { db in
                try db.execute(sql: "PRAGMA application_id = \(Ledger.applicationID)")
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
            }
            // A migration that rebuilds a table (0003, 0004) leaves the old one's pages free in
            // the file: past a tenth of it, they are given back, once, on the upgrading open (a
            // 1,000,000-event ledger grew from 96 to 113 MB without it; VACUUM took about 1 s).
            try writer.writeWithoutTransaction { db in
                let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
                let free = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
                if free > 0 && free * 10 > pages { try db.execute(sql: "VACUUM") }
            }
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

    /// A ledger whose creation was killed after its first migration and before it was marked as
    /// a ledger (earlier builds marked it last): no application id, and every migration
    /// recorded is one of ours. No event can be in it: events are appended after the mark.
    private static func interruptedCreation(_ db: Database, applicationID: Int32) throws -> Bool {
        guard applicationID == 0, try db.tableExists("grdb_migrations") else { return false }
        let recorded = try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations")
        return Set(recorded).isSubset(of: embeddedMigrations.map(\.name))
    }

    /// This ledger's identity: a UUID derived from its identity key when the file was created (or,
    /// for a ledger made before identities existed, on its first writable open), never changed
    /// afterwards. Two files never share one, so a fleet store (several devices of one user) tells
    /// them apart, and only the file holding the key can prove the id is its own
    /// (``LedgerIdentity/isProvenByKey``). Nil only for an old ledger only ever opened read-only.
    public func identity() throws -> LedgerIdentity? {
        try read { db in
            try LedgerIdentity.read(db)
        }
    }

    /// Rebuilds the projections when they lag the log or were written by another version.
    private func catchUpProjections() throws {
        let (status, last) = try pool.read { db in (try Projector.status(db), try EventStore.lastSeq(db)) }
        if status.seq != last || !status.current {
            try rebuildProjections()
        }
    }

    // MARK: - State loading

    /// The state after `target` (or the end), from the newest valid snapshot at or before it plus
    /// the events after it. Returns the state and, when it reaches the end, nothing else is needed.
    static func loadState(
        _ db: Database, upTo target: Int64, cache: SnapshotPageCache, chain: HashChain,
        damage: UnsafeMutablePointer<LedgerError?>? = nil
    ) throws -> (LedgerState, [UInt8]) {
        let snapshot = try Snapshots.latestWithRefs(db, atOrBefore: target, cache: cache, chain: chain)
        var state = snapshot?.state ?? LedgerState()
        // The events after a snapshot need only the user ids' rows and those assigned since.
        let personal = try snapshot?.personalRefs.map { refs in
            let next =
                target == .max
                ? nil
                : try Int64.fetchOne(db.cachedStatement(sql: "SELECT min(personal_refs) FROM snapshots WHERE seq > ?"), arguments: [target])
            return try PersonalValues.since(refs, upTo: next, db)
        }
        let onCorrupt: ((LedgerError) throws -> Void)? = damage.map { pointer in { error in if pointer.pointee == nil { pointer.pointee = error } } }
        try LogReplay.advance(&state, db, through: target, personal: personal, onCorrupt: onCorrupt)
        return (state, target == .max ? try EventStore.lastLink(db) : [])
    }

    deinit {
        // The writer's state is freed record by record: for a large ledger that took a few
        // tenths of a second (0.15-0.35 s after a 1,000,000-event import), which the caller
        // letting go of the ledger, or a CLI command exiting, need not wait for.
        let state = writer.withLock { w in
            defer { w = nil }
            return w?.state
        }
        if let state {
            releaseInBackground(state)
        }
    }

    /// The state after the last commit seen by this instance. Waits for an append in progress;
    /// the projection reads (``transactions(user:)``...) never wait.
    ///
    /// A read-only ledger reads it on first use; should that read fail (an I/O error), this is an
    /// empty state and ``state(atSeq:)`` throws the reason.
    public var currentState: LedgerState {
        (try? withWriter { $0.state }) ?? LedgerState()
    }

    /// Whether the projection tables (what reports and queries read) are in step with the log
    /// and were written by this version. A writable open makes them so; a read-only open of a
    /// ledger last written by an older version may find them stale.
    public func projectionsAreCurrent() throws -> Bool {
        try read { db in
            let status = try Projector.status(db)
            return try status.current && status.seq == EventStore.lastSeq(db)
        }
    }

    /// `read`, for the queries of the projection tables: on a read-only ledger whose tables are
    /// stale, throws `staleProjections` instead of answering from them.
    func readProjections<T>(_ body: (Database) throws -> T) throws -> T {
        // Once current, a ledger's projections stay so (every writer keeps them in step): checked
        // until seen current, not at every query (it doubled one user's history, 0.23 -> 0.45 ms).
        if configuration.readOnly, !projectionsSeenCurrent.withLock({ $0 }) {
            guard try projectionsAreCurrent() else {
                throw LedgerError(
                    .staleProjections,
                    "\(path): its report tables were written by an older purchase-ledger (or lag its log) and it was opened read-only; open it for writing once (`purchase-ledger rebuild \(path)`), which rebuilds them from the log and changes nothing else"
                )
            }
            projectionsSeenCurrent.withLock { $0 = true }
        }
        return try read(body)
    }

    package func read<T>(_ body: (Database) throws -> T) throws -> T {
        do {
            return try pool.read(body)
        } catch {
            throw Ledger.wrap(error, "reading")
        }
    }

}
