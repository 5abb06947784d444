import GRDB

/// What one append stores, gathered event by event as the append session decides, then
/// committed by ``commit(_:_:markProjections:)`` in the append's transaction.
///
/// The session hands over each stored event with its outcome and the state after it; the batch
/// turns it into its frame (the one mapper, ``FrameCodec``, with personal values as refs), links
/// and seals the frames into compressed blocks (``EventStore/BlockWriter``, off the calling
/// thread for a large append), encodes the snapshots due, and collects the projection changes.
/// All of it is spooled (in memory, spilling to a temporary file) or held until the commit, so a
/// refusal at any input event leaves nothing to undo: the transaction rolls back having written
/// nothing but the personal-value rows of the events decided so far, which go with it.
struct AppendBatch {
    private let db: Database
    private let configuration: LedgerConfiguration
    private let cache: SnapshotPageCache
    private let chain: HashChain
    private let spool = Spool()
    private var blocks: EventStore.BlockWriter
    private var snapshots: [Snapshots.Pending] = []
    private var spooledPages: Set<[UInt8]> = []
    /// A bulk append's snapshots, encoded on another thread while the rules go on (the file
    /// holds no page yet, so the encoder never reads it), with their pages in a spool of their
    /// own, which only the encoder's thread appends to. Made at the first snapshot due.
    private var encoder: SnapshotEncoder?
    private var changes: [Projector.OwnedChange] = []
    /// Whether the ledger was empty when the append began: every projection row is then new,
    /// and the tables are written in bulk from the state reached and `history`.
    private let bulk: Bool
    private var history = Projector.HistoryCollector()
    private var dirty = Projector.Dirty()
    /// The evidence rows of the signed events added (`transaction_evidence`), and the checks
    /// still to make (their signatures verified in parallel, a few hundred at a time).
    private var evidence: [EvidenceRow] = []
    private var checks: [EvidenceRows.Check] = []
    private var uniqueness = EvidenceRows.Uniqueness()
    private var evidenceSecret: EvidenceRows.Context?

    /// A batch appended after `lastLink`, inside the write transaction open on `db`.
    /// `storedTail`: the rows of the log's open tail, when the caller knows them. `emptyLedger`:
    /// whether the ledger holds no event yet.
    init(
        _ db: Database, configuration: LedgerConfiguration, chain: HashChain, lastLink: [UInt8], storedTail: Int?,
        emptyLedger: Bool, cache: SnapshotPageCache
    ) throws {
        self.db = db
        self.configuration = configuration
        self.cache = cache
        self.chain = chain
        bulk = emptyLedger
        blocks = try EventStore.BlockWriter(
            db, blockSize: configuration.blockSize, codec: configuration.blockCodec, layout: configuration.blockLayout, chain: chain,
            lastLink: lastLink, storedTail: storedTail)
    }

    /// Adds one decided event: its frame (linked into the chain by the block writer, off this
    /// thread), its personal values' rows, and the projection changes of its `outcome` in
    /// `state` (the state after it).
    mutating func add(_ recorded: RecordedEvent, outcome: Outcome, state: LedgerState, personal: inout PersonalEncoder) throws {
        let body = recorded.event.body
        // Personal values as refs into `personal_values` (docs/storage.md, "Erasure").
        let payload =
            if !configuration.writesPersonalValuesInline, try personal.prepare(body, in: state, db) {
                FrameCodec.payload(body, refs: personal)
            } else {
                FrameCodec.payload(body)
            }
        var frame = EventStore.Frame(recorded, payload: payload)
        // Its commitments were made just now from the values and salts stored with it.
        frame.introductionsChecked = true
        try blocks.add(frame, db)
        if body.signedTransaction != nil {
            if evidenceSecret == nil { evidenceSecret = try EvidenceRows.secret(db) }
            if case .check(let check) = EvidenceRows.pending(recorded, outcome: outcome, state: state, secret: evidenceSecret!) {
                checks.append(check)
                if checks.count >= 512 { try settleEvidence() }
            }
        }
        if let change = Projector.ownedChange(recorded, outcome: outcome, state: state) {
            if bulk { history.apply(change) } else { changes.append(change) }
        }
        // A bulk write builds every row from the final state: no need to track what changed.
        if !bulk { dirty.touch(recorded.event, state: state) }
    }

    /// The rows of the checks made so far (signatures verified on every core), in log order,
    /// each Apple transaction vouching for one ledger transaction.
    private mutating func settleEvidence() throws {
        let db = self.db
        // A batch into an empty ledger has no stored row to look a key up in: its own are in
        // `uniqueness` already.
        let stored = !bulk
        for row in EvidenceRows.rows(checks) {
            evidence.append(try uniqueness.apply(row) { key, t in stored ? try EvidenceRows.holder(of: key, besides: t, db) : nil })
        }
        checks.removeAll(keepingCapacity: true)
    }

    /// Adds a snapshot of `state` (the state after its last event), sharing the pages of the
    /// snapshots stored before; `state` then continues from the snapshot's pages.
    /// In a bulk append the snapshot is encoded on another thread, and `state` continues from
    /// its pages at the next snapshot or at the commit.
    mutating func snapshot(_ state: inout LedgerState, personal: PersonalEncoder) throws {
        let personalRefs = configuration.writesPersonalValuesInline ? nil : personal.assignedRefs
        if bulk {
            if encoder == nil { encoder = SnapshotEncoder(overlay: configuration.snapshotOverlay, spool: Spool(memoryLimit: 1 << 20)) }
            try encoder!.snapshot(&state, personalRefs: personalRefs)
            return
        }
        let snapshot: Snapshots.Pending
        (state, snapshot) = try Snapshots.encode(
            state, db, overlay: configuration.snapshotOverlay, spooled: &spooledPages, spool: spool, personalRefs: personalRefs)
        snapshots.append(snapshot)
    }

    /// Stores everything added: the log's blocks and tail rows, the personal values' rows, the
    /// snapshots, the owned-content history in order, and the projection rows of what changed,
    /// at `state` (the state the batch reached, which then continues from the last snapshot's
    /// pages); and, when `markProjections`, that the projections are in step with the log.
    /// Returns the chain link of the last event and the rows the log's open tail then holds.
    /// Called only when an event was added.
    mutating func commit(
        _ state: inout LedgerState, personal: inout PersonalEncoder, statements: PreparedStatements, markProjections: Bool
    ) throws -> (lastLink: [UInt8], tail: Int) {
        let written = try blocks.write(db, statements)
        try personal.write(db)
        try settleEvidence()
        try EvidenceRows.write(evidence, db)
        evidence.removeAll()
        if let encoder { snapshots = try encoder.finish(carrying: &state) }
        try Snapshots.write(snapshots, keep: configuration.maxSnapshots, spool: encoder?.spool ?? spool, chain: chain, db)
        if bulk {
            try Projector.writeAll(state: state, history: history, db)
        } else {
            var copied: [String: String] = [:]
            for change in changes {
                try Projector.apply(change, copied: &copied, db, statements)
            }
            try Projector.flush(dirty, state: state, db, statements)
            if markProjections { try Projector.markInStep(db) }
        }
        // Measured against the whole file: the projection rows are written by now.
        if !snapshots.isEmpty { try Snapshots.keepWithin(share: configuration.maxSnapshotShare, db) }
        // The state now continues from the last snapshot's pages: keep them for later time
        // travel. Not those of every snapshot of a long import: a page superseded by a later
        // snapshot of the same append is rarely read again, and 1,000,000 events held 32 MB of
        // them (ledger-bench import-once: peak RSS 219 against 187 MB).
        if !snapshots.isEmpty { cache.remember(state) }
        return written
    }
}
