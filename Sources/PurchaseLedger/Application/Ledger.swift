package import GRDB

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
///
/// ### Opening
/// - ``init(path:configuration:)``
/// - ``path``
/// - ``configuration``
/// - ``identity()``
///
/// ### Appending
/// - ``append(_:)``
/// - ``append(contentsOf:)``
/// - ``append(contentsOf:progress:)``
/// - ``check(_:)``
/// - ``importJSONLines(from:progress:)``
/// - ``appendJSONLines(_:progress:)``
/// - ``checkJSONLines(_:)``
///
/// ### Reading current state
/// - ``currentState``
/// - ``transactions(user:)``
/// - ``transaction(_:)``
/// - ``downloads(transaction:)``
/// - ``owns(product:)``
/// - ``ownedContent()``
/// - ``contentURL(for:)``
/// - ``updateAvailable(product:content:)``
/// - ``download(forURL:)``
/// - ``projectionsAreCurrent()``
///
/// ### Reading the log
/// - ``lastSeq()``
/// - ``events(from:limit:)``
/// - ``events(inStream:)``
/// - ``forEachEvent(from:through:_:)``
/// - ``forEachEvent(ofTransaction:from:_:)``
/// - ``forEachEvent(ofDownload:from:_:)``
/// - ``observe(from:pollInterval:)``
///
/// ### Time travel
/// - ``state(atSeq:)``
/// - ``state(at:)``
/// - ``select(_:in:)``
/// - ``replayFromLog(through:)``
/// - ``firstSeq(where:)``
/// - ``firstSeq(involvingTransaction:where:)``
/// - ``firstSeq(involvingDownload:where:)``
/// - ``timeline(transaction:)``
/// - ``timelines(transactions:)``
/// - ``TimelineEntry``
/// - ``replay(into:through:)``
///
/// ### Reports
/// - ``purchaseHistory(_:)``
/// - ``purchaseHistory(transactionID:)``
/// - ``userSummary(_:)``
/// - ``undelivered(limit:)``
/// - ``stuckDownloads(idle:asOf:)``
/// - ``unfinishedTransactions()``
/// - ``failureRates(from:to:)``
/// - ``revenue(from:to:groupBy:byStorefront:allEnvironments:)``
/// - ``dailyRevenue(from:to:)``
/// - ``statistics()``
///
/// ### Integrity
/// - ``verify(all:everySnapshot:progress:)``
/// - ``checkpoint(signingKey:at:)``
/// - ``verify(against:publicKey:)``
///
/// ### Maintenance
/// - ``rebuildProjections(rewritingEveryRow:progress:)``
/// - ``checkpoint()``
///
/// ### Privacy and bug reports
/// - ``forget(user:)``
/// - ``redactor()``
/// - ``extract(_:to:redact:configuration:)``
/// - ``extractedEvents(_:)``
public final class Ledger: Sendable {
    /// The ledger file's path.
    public let path: String
    /// How the ledger was opened.
    public let configuration: LedgerConfiguration
    /// The file: its connections, loading, and the transaction an append commits in.
    let file: LedgerFile
    /// The file's read-only connections.
    var pool: any DatabaseReader { file.pool }
    /// The hash chain's mode.
    package var chain: HashChain { file.chain }
    /// Snapshot pages loaded (on open, by ``state(atSeq:)``) or written, shared by later loads.
    var pageCache: SnapshotPageCache { file.pageCache }

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
    /// The redaction secret of a read-only ledger that holds none (``redactor()``).
    let instanceRedactionSecret = Redactor.randomSecret()
    /// Whether a read-only ledger has found its projections current (`readProjections`).
    private let projectionsSeenCurrent = Locked(false)

    /// Opens the ledger at `path`, creating it (mode 0600) if it does not exist.
    ///
    /// Throws ``LedgerError`` with code `notALedger` for any other file, `schemaTooNew` for a
    /// ledger written by a newer version, `keyRequired` / `keyMismatch` for a keyed chain.
    public init(path: String, configuration: LedgerConfiguration = LedgerConfiguration()) throws {
        self.path = path
        self.configuration = configuration
        writer = Locked(nil)
        file = try LedgerFile(path: path, configuration: configuration)
        if !configuration.readOnly {
            do {
                try catchUpProjections()
            } catch let error as LedgerError where error.code == .corruptData {
                // A damaged log: the projections stay as they were, reads and verify still work,
                // and appends are refused once they load the state and meet the damage.
            }
        }
    }

    /// Runs `body` with the write connection's page cache at `kib`, then sets it back.
    func withWriterCache<T>(_ kib: Int, _ body: () throws -> T) throws -> T {
        try file.withWriterCache(kib, body)
    }

    /// The writing connection, opened on first use.
    func writeQueue() throws -> DatabaseQueue {
        try file.writeQueue()
    }

    /// Loads the writer's state and link again from the file (after a rolled-back append).
    func reload(_ w: inout Writer) throws {
        w.lastCommit = nil
        (w.state, w.lastLink, w.erasures) = try pool.read { db in
            let erasures = try LedgerFile.erasures(db)
            let loaded = try file.load(db, upTo: .max)
            return (loaded.state, loaded.lastLink, erasures)
        }
    }

    /// Runs `body` with the writer's state, loading it on first use.
    func withWriter<T>(_ body: (inout Writer) throws -> T) throws -> T {
        try writer.withLock { w in
            if w == nil {
                do {
                    let (loaded, erasures) = try file.loadHead()
                    w = Writer(state: loaded.state, lastLink: loaded.lastLink, damage: loaded.damage)
                    w!.erasures = erasures
                } catch {
                    throw LedgerFile.wrap(error, "reading \(path)")
                }
            }
            return try body(&w!)
        }
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

    /// Reads through the pool, every error as a ``LedgerError``.
    package func read<T>(_ body: (Database) throws -> T) throws -> T {
        try file.read(body)
    }
}
