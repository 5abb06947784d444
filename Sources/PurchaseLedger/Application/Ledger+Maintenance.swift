import GRDB

/// Maintenance: rebuilding the projections from the log, checkpointing the WAL.
extension Ledger {
    /// Rebuilds every projection table from the log, in one transaction: the log is replayed in
    /// memory, and the tables are made equal to the rows that state gives. Only rows that are
    /// missing, different or extra are written, so a rebuild of sound tables writes nothing and a
    /// damaged table gets exactly its damaged rows back. A table mostly wrong or empty, and every
    /// table when the projections were written by another version, is rewritten in bulk (rows in
    /// key order, indexes built after them).
    ///
    /// ```swift
    /// let summary = try ledger.rebuildProjections()
    /// print("\(summary.rowsWritten) rows repaired, \(summary.rowsDeleted) removed")
    /// ```
    ///
    /// - Parameter rewritingEveryRow: rewrite every row in bulk even where it already matches
    ///   (after damage below the rows, in an index, that the row comparison does not see).
    @discardableResult
    public func rebuildProjections(rewritingEveryRow: Bool = false, progress: ((Int64, Int64) -> Void)? = nil) throws -> RebuildSummary {
        guard !configuration.readOnly else { throw LedgerError(.io, "the ledger was opened read-only") }
        do {
            return try writeQueue().writeWithoutTransaction { db in
                var summary = RebuildSummary()
                try db.inTransaction(.immediate) {
                    // A view of the projections changed or dropped with sqlite3 is made again.
                    _ = try Projector.restoreViews(db)
                    // The tables as stored are read on a read connection while the log replays
                    // here (the write lock is held, so both see the same commit), unless they
                    // are to be rewritten anyway. A table that cannot be read is rewritten whole.
                    let compare = try !rewritingEveryRow && Projector.status(db).current
                    let pool = self.pool
                    let stored = compare ? Pipeline([{ @Sendable in try? pool.read { db in try Projector.Table.all.map { try Projector.storedRowHashes($0, db) } } }]) : nil
                    // Snapshots written by an earlier version cannot be read: they are taken
                    // again during the replay, at the same seqs an import takes them.
                    let retake = try configuration.snapshotInterval > 0 && Ledger.onlyStaleSnapshots(db)
                    let interval = Int64(max(1, configuration.snapshotInterval))
                    // Encoded on another thread while the replay goes on, as an erasure's.
                    let spool = Spool(memoryLimit: 1 << 20)
                    let encoder = retake ? SnapshotEncoder(overlay: configuration.snapshotOverlay, spool: spool) : nil
                    var evidence = EvidenceRows.Collector()
                    let secret = try EvidenceRows.secret(db)
                    var (state, history) = try Ledger.replayForProjections(db, progress: progress, evidence: &evidence, secret: secret) { state in
                        guard let encoder, state.seq % interval == 0 else { return }
                        // No record of the personal refs assigned by then: a state loaded from
                        // one of these reads the whole personal-values table for its tail.
                        try encoder.snapshot(&state, personalRefs: nil)
                    }
                    let taken = try encoder?.finish(carrying: &state) ?? []
                    let storedRows = stored?.take(0)
                    summary = try Projector.reconcile(state: state, history: history, stored: storedRows, db)
                    summary.events = state.seq
                    releaseInBackground(consume state)
                    releaseInBackground(consume history)
                    releaseInBackground(consume storedRows)
                    // The signatures checked again; a row whose signature forget erased stands.
                    summary.rowsWritten += try EvidenceRows.reconcile(evidence, db)
                    try Snapshots.write(taken, keep: configuration.maxSnapshots, spool: spool, chain: chain, db)
                    summary.snapshotsTaken = taken.count
                    return .commit
                }
                // The pages of the snapshots taken again (an earlier version's) are free now.
                if summary.snapshotsTaken > 0 { LedgerFile.giveBackFreePages(db) }
                return summary
            }
        } catch {
            throw LedgerFile.wrap(error, "rebuilding projections")
        }
    }

    /// Whether the ledger holds snapshots and every one was written by another snapshot format
    /// or reducer version (an earlier version of the library): none of them can be read.
    static func onlyStaleSnapshots(_ db: Database) throws -> Bool {
        let (current, stale) =
            try Row.fetchOne(
                db,
                sql: """
                    SELECT count(*) FILTER (WHERE reducer_version = ? AND format IN \(SnapshotCodec.readableFormatsSQL)),
                    count(*) FILTER (WHERE reducer_version != ? OR format NOT IN \(SnapshotCodec.readableFormatsSQL))
                    FROM snapshots
                    """, arguments: [Reducer.version, Reducer.version]
            ).map { ($0[0] as Int, $0[1] as Int) } ?? (0, 0)
        return current == 0 && stale > 0
    }

    /// Copies the write-ahead log into the database file and truncates it, so the file alone
    /// holds everything (SQLite does this on its own from time to time, and when the last
    /// connection closes).
    public func checkpoint() throws {
        guard !configuration.readOnly else { return }
        do {
            try writeQueue().writeWithoutTransaction { db in _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        } catch {
            throw LedgerFile.wrap(error, "checkpointing")
        }
    }

    /// `each`: sees the state after each event, and may change it (a snapshot taken of it).
    /// `evidence`: gathers the `transaction_evidence` rows the log's signed events give (with
    /// `secret`, the ledger's), or without it only which transactions' signatures were erased.
    static func replayForProjections(
        _ db: Database, progress: ((Int64, Int64) -> Void)? = nil, evidence: UnsafeMutablePointer<EvidenceRows.Collector>? = nil,
        secret: EvidenceRows.Context? = nil, each: ((inout LedgerState) throws -> Void)? = nil
    ) throws -> (LedgerState, Projector.HistoryCollector) {
        var replay = LogReplay(collectingHistory: true)
        let total = try EventStore.lastSeq(db)
        try replay.run(db) { step, replayed, state in
            if let progress, step.event.seq % 50_000 == 0 { progress(step.event.seq, total) }
            if let evidence, step.event.event.body.signedTransaction != nil, case .outcome(let outcome) = replayed {
                if let secret {
                    evidence.pointee.add(EvidenceRows.found(step.event, outcome: outcome, state: state, secret: secret))
                } else if outcome.changedState, let jws = step.event.event.body.signedTransaction, SignedTransaction.isErasedMarker(jws),
                    let t = step.event.event.body.transactionID
                {
                    // Without a secret: only which signatures were erased (no signature checked).
                    evidence.pointee.add(.erased(transaction: t))
                }
            }
            try each?(&state)
            return true
        }
        return (replay.state, replay.history!)
    }
}

/// What ``Ledger/rebuildProjections(rewritingEveryRow:progress:)`` did.
public struct RebuildSummary: Sendable, Hashable {
    /// The events replayed (the log's last seq).
    public var events: Int64 = 0
    /// Rows inserted or rewritten: missing or different from the log's, or all of a table
    /// rewritten in bulk.
    public var rowsWritten = 0
    /// Rows deleted: the log gives no such row.
    public var rowsDeleted = 0
    /// Rows left as they were, already equal to the log's.
    public var rowsUnchanged = 0
    /// Snapshots taken again because every stored one was written by another snapshot format or
    /// reducer version (an earlier version of the library), at the seqs an import takes them.
    public var snapshotsTaken = 0
}
