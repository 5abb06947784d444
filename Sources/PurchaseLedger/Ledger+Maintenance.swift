import GRDB

/// Maintenance: rebuilding the projections from the log, checkpointing the WAL.
extension Ledger {
    /// Drops and rebuilds every projection table from the log, in one transaction: the log is
    /// replayed in memory, then all rows are written in bulk.
    public func rebuildProjections(progress: ((Int64, Int64) -> Void)? = nil) throws {
        guard !configuration.readOnly else { throw LedgerError(.io, "the ledger was opened read-only") }
        do {
            try writeQueue().writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    let (state, history) = try Ledger.replayForProjections(db, progress: progress)
                    try Projector.rebuild(state: state, history: history, db)
                    return .commit
                }
            }
        } catch {
            throw Ledger.wrap(error, "rebuilding projections")
        }
    }

    /// Copies the write-ahead log into the database file and truncates it, so the file alone
    /// holds everything (SQLite does this on its own from time to time, and when the last
    /// connection closes).
    public func checkpoint() throws {
        guard !configuration.readOnly else { return }
        do {
            try writeQueue().writeWithoutTransaction { db in _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
        } catch {
            throw Ledger.wrap(error, "checkpointing")
        }
    }

    static func replayForProjections(_ db: Database, progress: ((Int64, Int64) -> Void)? = nil) throws -> (LedgerState, Projector.HistoryCollector) {
        var replay = LogReplay(collectingHistory: true)
        let total = try EventStore.lastSeq(db)
        try replay.run(db) { step, _, _ in
            if let progress, step.event.seq % 50_000 == 0 { progress(step.event.seq, total) }
            return true
        }
        return (replay.state, replay.history!)
    }
}
