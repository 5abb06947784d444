import GRDB

/// The one loop that folds the stored log into a state with the reducer. Loading a state (from a
/// snapshot on), time travel, catching up with another process, rebuilding projections,
/// verification, shipping, the observer replay and timelines all go through it, so "replay the
/// log" means one thing everywhere.
///
/// ```swift
/// var replay = LogReplay(collectingHistory: true)
/// try replay.run(db)                      // the whole log
/// Projector.rows(state: replay.state, history: replay.history!)
/// ```
struct LogReplay {
    /// The state after the last event replayed (its `seq` says which).
    var state: LedgerState
    /// The owned-content history as the projections keep it, when asked for at init.
    var history: Projector.HistoryCollector?

    /// Replays from `state` on (an empty state: from the first event). With `collectingHistory`,
    /// ``history`` gathers what the owned-content history projection holds.
    init(from state: LedgerState = LedgerState(), collectingHistory: Bool = false) {
        self.state = state
        history = collectingHistory ? Projector.HistoryCollector() : nil
    }

    /// One stored event as the loop hands it over: the event, and with `integrity`, its payload
    /// bytes and stored link. The scan's own entry, lent to `before` and `after` as it is (a
    /// wrapper around it copied the event, a few hundred bytes, once more per event).
    typealias Step = EventStore.Entry

    /// Replays the stored events after `state.seq` through `last`: ``run(_:through:integrity:onCorrupt:before:after:)``
    /// with nothing to see on the way.
    @inline(__always)
    mutating func run(_ db: Database, through last: Int64 = .max, onCorrupt: ((LedgerError) throws -> Void)? = nil) throws {
        try run(db, through: last, onCorrupt: onCorrupt) { _, _, _ in true }
    }

    /// Brings `state` forward to `last` (or the end): the events after `state.seq`, replayed in
    /// place. On a throw, `state` holds the events replayed before it.
    /// `personal`: what the events' personal refs stand for, when the caller has it (otherwise
    /// the whole table is read).
    static func advance(
        _ state: inout LedgerState, _ db: Database, through last: Int64 = .max, personal: PersonalValues? = nil,
        onCorrupt: ((LedgerError) throws -> Void)? = nil
    ) throws {
        var replay = LogReplay()
        swap(&replay.state, &state)  // the state stays uniquely referenced, so it is changed in place
        defer { swap(&replay.state, &state) }
        try replay.run(db, through: last, personal: personal, onCorrupt: onCorrupt) { _, _, _ in true }
    }

    /// For a state loaded from a snapshot (its transactions and downloads in stored pages, read
    /// the first time a record in them is): makes ready, on the scan's decoding thread, the pages
    /// the reducer will read for a block's events (each event's transaction or download, and a
    /// download's transaction) instead of on the reducer's thread as it meets them: a page with
    /// record lengths decompressed and its keys read, one without decoded whole. Ids the state
    /// holds outside its pages (the snapshot's overlay) are skipped, as a lookup skips their
    /// pages. The pages are shared and immutable, and each is made ready under its lock, whichever
    /// thread asks first: what the reducer reads is the same either way. Nil for a state in memory
    /// (a replay from the first event), which has no such pages.
    static func prefetcher(_ state: LedgerState) -> (@Sendable ([RecordedEvent]) -> Void)? {
        let transactions = state.transactions.pageReader, downloads = state.downloads.pageReader
        guard transactions != nil || downloads != nil else { return nil }
        return { events in
            for e in events {
                let body = e.event.body
                if let t = body.transactionID { transactions?.prepare(for: t) }
                // (The download itself is read for its transaction's id: its page is made ready then.)
                if let d = body.downloadID, let t = downloads?.value(for: d)?.transaction { transactions?.prepare(for: t) }
            }
        }
    }

    /// Replays the stored events after `state.seq` through `last`, in log order, streaming.
    ///
    /// - `integrity`: also hand over each event's payload bytes and stored link (verification,
    ///   shipping).
    /// - `onCorrupt`: damage found in a block or row; without it, damage throws
    ///   ``LedgerError/Code/corruptData`` naming the seq.
    /// - `before`: sees each event and the state before it; return false to leave the event out
    ///   of the state (verification does, once an event was lost).
    /// - `after`: sees each event applied, what the reducer made of it, and the state after it;
    ///   return false to stop.
    @inline(__always)
    mutating func run(
        _ db: Database, through last: Int64 = .max, integrity: Bool = false, personal: PersonalValues? = nil,
        onCorrupt: ((LedgerError) throws -> Void)? = nil,
        before: (Step, inout LedgerState) throws -> Bool = { _, _ in true },
        after: (Step, Reducer.Replayed, inout LedgerState) throws -> Bool
    ) throws {
        guard state.seq < last else { return }
        // The loop works on locals, not on `self`: a stored property handed to a closure is
        // copied first (every field of the state retained, per event); a local is lent as it is.
        var state = LedgerState()
        var history = self.history
        swap(&state, &self.state)
        self.history = nil
        defer {
            swap(&state, &self.state)
            self.history = history
        }
        try EventStore.scan(
            db, from: state.seq + 1, through: last, integrity: integrity, personal: personal, onCorrupt: onCorrupt,
            prefetch: LogReplay.prefetcher(state)
        ) { entry in
            guard try before(entry, &state) else { return true }
            let replayed = LogReplay.step(&state, entry.event.event, seq: entry.event.seq)
            if history != nil, case .outcome(let outcome) = replayed,
                let change = Projector.ownedChange(entry.event, outcome: outcome, state: state)
            {
                history!.apply(change)
            }
            return try after(entry, replayed, &state)
        }
    }

    /// One stored event folded into `state`: through the rules (``Reducer/replay(_:_:)``, which
    /// never fails), then numbered as the log numbers it: the state's seq, and the event's
    /// version in its stream.
    @discardableResult
    static func step(_ state: inout LedgerState, _ event: Event, seq: Int64) -> Reducer.Replayed {
        let replayed = Reducer.replay(&state, event)
        state.seq = seq
        _ = state.recordStreamEvent(event.body)
        return replayed
    }
}
