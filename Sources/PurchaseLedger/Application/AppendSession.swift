/// One append's decisions. ``decide(_:at:into:mutated:keep:)`` runs each input event through the
/// rules (``Reducer/take(_:at:_:_:)``, the one plan-then-reduce loop) and numbers what is stored;
/// the ``AppendBatch`` it feeds turns that into bytes, and ``commit(_:markProjections:)`` has the
/// batch store it. Between them the caller holds the write lock, so a refusal at any input event
/// leaves nothing to undo. The session itself reads and writes no table.
struct AppendSession {
    private let configuration: LedgerConfiguration
    private var batch: AppendBatch
    private var stored = 0, ignored = 0, anomalies = 0, appendedByLedger = 0
    private var firstSeq: Int64?

    init(_ batch: AppendBatch, configuration: LedgerConfiguration) {
        self.batch = batch
        self.configuration = configuration
    }

    /// Runs the rules on one input event (and on what the ledger appends before it), advancing
    /// the writer's state, seq and chain link. Throws the refusal placed at the input's position.
    mutating func decide(
        _ given: Event, at position: LedgerError.Position, into w: inout Ledger.Writer, mutated: inout Bool,
        keep: ((RecordedEvent) -> Void)?
    ) throws {
        let input = given.normalizingIDs()
        // The state is taken out of the writer for the rules, and put back whatever happens.
        var state = LedgerState()
        swap(&state, &w.state)
        defer { swap(&state, &w.state) }
        try Reducer.take(input, at: position, &state) { event, outcome, state, byLedger in
            mutated = true
            try store(event, outcome, &state, byLedger: byLedger, &w.personal, keep: keep)
        }
    }

    /// Stores an event the ledger records itself, outside the rules (an erasure), as the next
    /// event of the log.
    mutating func record(_ event: Event, into w: inout Ledger.Writer) throws {
        var state = LedgerState()
        swap(&state, &w.state)
        defer { swap(&state, &w.state) }
        let outcome = try Reducer.reduce(&state, event)
        try store(event, outcome, &state, byLedger: true, &w.personal, keep: nil)
    }

    /// Numbers one decided event, hands it to the batch and, at the interval, a snapshot of the
    /// state after it; counts it.
    private mutating func store(
        _ event: Event, _ outcome: Outcome, _ state: inout LedgerState, byLedger: Bool, _ personal: inout PersonalEncoder,
        keep: ((RecordedEvent) -> Void)?
    ) throws {
        guard outcome.isStored else {
            ignored += 1
            return
        }
        let seq = state.seq + 1
        let version = state.recordStreamEvent(event.body)
        state.seq = seq
        let recorded = RecordedEvent(
            seq: seq, version: version, event: event, recordedAt: configuration.clock(),
            anomaly: outcome.anomaly, appendedByLedger: byLedger)
        try batch.add(recorded, outcome: outcome, state: state, personal: &personal)
        stored += 1
        if firstSeq == nil { firstSeq = seq }
        if recorded.anomaly != nil { anomalies += 1 }
        if recorded.appendedByLedger { appendedByLedger += 1 }
        keep?(recorded)
        // At exact multiples of the interval, whatever the batch sizes.
        if configuration.snapshotInterval > 0, seq % Int64(configuration.snapshotInterval) == 0 {
            try batch.snapshot(&state, personal: personal)
        }
    }

    /// Has the batch store everything decided, at the state `w` reached, and moves the writer's
    /// chain link on. Returns the rows the log's open tail then holds, or nil when nothing was
    /// stored.
    mutating func commit(_ w: inout Ledger.Writer, markProjections: Bool) throws -> Int? {
        guard stored > 0 else { return nil }
        let written = try batch.commit(&w.state, personal: &w.personal, statements: w.statements, markProjections: markProjections)
        w.lastLink = written.lastLink
        return written.tail
    }

    func summary(lastSeq: Int64) -> ImportSummary {
        ImportSummary(
            stored: stored, firstSeq: firstSeq, lastSeq: lastSeq, ignored: ignored, anomalies: anomalies,
            appendedByLedger: appendedByLedger, skippedLedgerAppended: 0)
    }
}
