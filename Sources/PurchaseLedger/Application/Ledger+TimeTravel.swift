import GRDB

/// Time travel: the state at any seq or time, from snapshots and the log, in memory.
extension Ledger {
    /// The state after the event at `seq`, rebuilt from the log and snapshots in memory; the
    /// projection tables are not read.
    public func state(atSeq seq: Int64) throws -> LedgerState {
        try read { db in try file.load(db, upTo: max(0, seq)).state }
    }

    /// The state after `seq`, replayed from the first event without using snapshots: the
    /// reference the snapshots are checked against, and the benchmark of a full replay.
    public func replayFromLog(through seq: Int64 = .max) throws -> LedgerState {
        try read { db in
            var replay = LogReplay()
            try replay.run(db, through: seq)
            return replay.state
        }
    }

    /// The state after the last event, in log order, whose `at` is at or before `time`.
    public func state(at time: Timestamp) throws -> LedgerState {
        var target: Int64 = 0
        try forEachEvent { event in
            if event.event.at <= time { target = event.seq }
            return true
        }
        return try state(atSeq: target)
    }

    /// The first seq after which `predicate` holds for the state and the event just applied.
    public func firstSeq(where predicate: (LedgerState, RecordedEvent) throws -> Bool) throws -> Int64? {
        try firstSeq(from: { _ in LedgerState() }, where: predicate)
    }

    /// ``firstSeq(where:)`` for a predicate that cannot hold before the transaction `id` has an
    /// event (one about its record or its downloads' records, as `replay --when` asks): the log
    /// is replayed from the latest snapshot before that transaction's first event, not from the
    /// start.
    ///
    /// ```swift
    /// // When did t1 first become purchased?
    /// let seq = try ledger.firstSeq(involvingTransaction: "t1") { state, _ in
    ///     state.transactions["t1"]?.state == .purchased
    /// }
    /// ```
    public func firstSeq(involvingTransaction id: String, where predicate: (LedgerState, RecordedEvent) throws -> Bool) throws -> Int64? {
        let id = Identifier.normalize(id)
        return try firstSeq(from: { db in try Ledger.stateBefore(transactions: [id], db, cache: pageCache, chain: chain) }, where: predicate)
    }

    /// ``firstSeq(where:)`` for a predicate that cannot hold before the download `id` has an
    /// event, replayed from the latest snapshot before its first one.
    public func firstSeq(involvingDownload id: String, where predicate: (LedgerState, RecordedEvent) throws -> Bool) throws -> Int64? {
        let id = Identifier.normalize(id)
        return try firstSeq(from: { db in try Ledger.stateBefore(download: id, db, cache: pageCache, chain: chain) }, where: predicate)
    }

    private func firstSeq(from start: (Database) throws -> LedgerState, where predicate: (LedgerState, RecordedEvent) throws -> Bool) throws -> Int64? {
        var found: Int64?
        try read { db in
            var replay = LogReplay(from: try start(db))
            try replay.run(db) { step, _, state in
                guard try predicate(state, step.event) else { return true }
                found = step.event.seq
                return false
            }
        }
        return found
    }

    /// The state of the latest snapshot at which none of `ids` has an event yet, or an empty state.
    ///
    /// A transaction, once it has an event, stays in every later state (as a record, or as the
    /// count of the events stored before it existed), and its downloads come after it: so every
    /// event of its timeline comes after that snapshot, and the snapshots, in seq order, can be
    /// searched by halves. A timeline in the middle of a 1,000,000-event ledger then replays half
    /// the log, not all of it.
    static func stateBefore(transactions ids: Set<String>, _ db: Database, cache: SnapshotPageCache, chain: HashChain) throws -> LedgerState {
        try stateBefore(db, cache: cache, chain: chain) { state in
            ids.contains { state.transactions.contains($0) || state.orphanStreamEvents["transaction:" + $0] != nil }
        }
    }

    /// The state of the latest snapshot at which the download `id` has no event yet (the same
    /// holds of a download as of a transaction), or an empty state.
    static func stateBefore(download id: String, _ db: Database, cache: SnapshotPageCache, chain: HashChain) throws -> LedgerState {
        try stateBefore(db, cache: cache, chain: chain) { state in state.downloads.contains(id) || state.orphanStreamEvents["download:" + id] != nil }
    }

    /// The state of the latest snapshot at which `started` is false, or an empty state; `started`
    /// must stay true in every state after one where it is.
    private static func stateBefore(_ db: Database, cache: SnapshotPageCache, chain: HashChain, started: (LedgerState) -> Bool) throws -> LedgerState {
        let seqs = try Snapshots.seqs(db)
        var best = LedgerState()
        var low = 0, high = seqs.count
        while low < high {
            let mid = (low + high) / 2
            // A snapshot that does not decode gives way to the one before it: still a state at
            // which the answer is known.
            guard let state = try Snapshots.latest(db, atOrBefore: seqs[mid], cache: cache, chain: chain) else {
                low = mid + 1
                continue
            }
            if started(state) {
                high = mid
            } else {
                if state.seq > best.seq { best = state }
                low = mid + 1
            }
        }
        return best
    }
}
