import Foundation
import GRDB

/// What ``Ledger/importJSONLines(from:progress:)`` stored: counts, not the events, so a large
/// import's memory stays flat.
public struct ImportSummary: Sendable, Hashable {
    /// Events stored, automatic cancellations included.
    public var stored: Int
    /// The seq of the first event stored (nil when nothing was).
    public var firstSeq: Int64?
    /// The last seq of the ledger after the import.
    public var lastSeq: Int64
    /// Input events accepted without storing anything (identical repeats of a command).
    public var ignored: Int
    /// Stored events flagged with the rule they broke (observations that make no sense).
    public var anomalies: Int
    /// Cancellations the ledger appended itself (downloads of a transaction finished early).
    public var appendedByLedger: Int
    /// Lines an export marked `appendedByLedger`, left for the ledger to append again.
    public var skippedLedgerAppended: Int
}

/// How far a streaming import has got.
public struct ImportProgress: Sendable, Hashable {
    /// Input events decided so far.
    public var events: Int
    /// Input bytes read so far, and the input's size when it is a file.
    public var bytesRead: Int
    public var totalBytes: Int?
}

extension Ledger {
    /// Appends one event. See ``append(contentsOf:)``.
    @discardableResult
    public func append(_ event: Event) throws -> AppendResult {
        do {
            return try append(contentsOf: [event])
        } catch var error as LedgerError {
            // One event: no place to name.
            error.batchIndex = nil
            throw error
        }
    }

    /// Appends events in one SQLite transaction: all of them, or, when one is malformed or a
    /// command breaks a rule, none (the error's ``LedgerError/batchIndex`` says which).
    ///
    /// Observations that make no sense are stored as anomalies; an early finish also stores one
    /// `downloadCancelled` (reason `transactionFinished`) per started download, just before it.
    @discardableResult
    public func append(contentsOf events: [Event]) throws -> AppendResult {
        try append(contentsOf: events, progress: nil)
    }

    /// ``append(contentsOf:)``, calling `progress(done, total)` every 10,000 input events, for
    /// large imports.
    @discardableResult
    public func append(contentsOf events: [Event], progress: ((Int, Int) -> Void)?) throws -> AppendResult {
        var index = 0
        var stored: [RecordedEvent] = []
        let summary = try appendSession(keepEvents: { stored.append($0) }) {
            guard index < events.count else { return nil }
            defer { index += 1 }
            if let progress, index % 10_000 == 0, index > 0 { progress(index, events.count) }
            do {
                if configuration.checksInput { try InputLimits.check(events[index]) }
            } catch let error as LedgerError {
                throw error.at(.batch(index))
            }
            return (events[index], .batch(index))
        }
        return AppendResult(events: stored, ignored: summary.ignored, lastSeq: summary.lastSeq)
    }

    /// Streams JSON Lines into the ledger in one atomic write, reading, deciding and storing
    /// them in pieces: memory stays flat whatever the input's size, and each event goes through
    /// the rules once. All of it is stored, or, at the first malformed line or refused command,
    /// nothing: the error names the line, and the ledger file and its WAL are left exactly as
    /// they were.
    ///
    /// The input is read and parsed on a thread of its own, ahead of the rules. After an error
    /// that thread may still be waiting on the input (a pipe) for its current line; it ends when
    /// that line comes or the input closes, so do not read from `reader` again after an error.
    ///
    /// ```swift
    /// let summary = try ledger.importJSONLines(from: try JSONLinesReader(path: "export.jsonl"))
    /// print("stored \(summary.stored) events, last seq \(summary.lastSeq)")
    /// ```
    @discardableResult
    public func importJSONLines(from reader: JSONLinesReader, progress: ((ImportProgress) -> Void)? = nil) throws -> ImportSummary {
        let ahead = ReadAhead(willWait: { !reader.hasBufferedLine }) { () throws -> (event: Event, line: Int, bytesRead: Int)? in
            guard let (event, line) = try reader.next() else { return nil }
            return (event, line, reader.bytesRead)
        }
        var decided = 0
        var summary: ImportSummary
        do {
            summary = try withWriterCache(Ledger.bulkCacheKiB) {
                try appendSession(keepEvents: nil) {
                    guard let item = try ahead.next() else { return nil }
                    decided += 1
                    if let progress, decided % 10_000 == 0 {
                        progress(ImportProgress(events: decided, bytesRead: item.bytesRead, totalBytes: reader.totalBytes))
                    }
                    return (item.event, .line(item.line))
                }
            }
        } catch {
            // A refusal or a malformed line: report it now, even if the input is a pipe the
            // reading thread is still waiting on.
            ahead.stop(waiting: false)
            throw error
        }
        // The reading thread gave its last line, so this returns at once.
        ahead.stop()
        summary.skippedLedgerAppended = reader.skippedLedgerAppended
        return summary
    }

    /// Checks events against the rules without writing anything: throws the error `append` would
    /// throw (with ``LedgerError/batchIndex``), or returns the outcomes it would have.
    public func check(_ events: [Event]) throws -> [Outcome] {
        var state = try withWriter { $0.state }
        var outcomes: [Outcome] = []
        for (index, input) in events.enumerated() {
            do {
                if configuration.checksInput { try InputLimits.check(input) }
            } catch {
                throw error.at(.batch(index))
            }
            try Reducer.take(input.normalizingIDs(), at: .batch(index), &state) { _, outcome, _, _ in outcomes.append(outcome) }
        }
        return outcomes
    }

    /// Runs one append: takes the write lock, catches up with other processes, decides every
    /// input event `next` gives (with its position: a line, or an index in a batch), then writes
    /// what was decided and commits. A refusal rolls back a transaction that wrote nothing.
    private func appendSession(keepEvents: ((RecordedEvent) -> Void)?, next: () throws -> (Event, LedgerError.Position)?) throws -> ImportSummary {
        guard !configuration.readOnly else { throw LedgerError(.io, "the ledger was opened read-only") }
        let summary = try withWriter { w throws -> ImportSummary in
            if let damage = w.damage {
                throw LedgerError.make(.corruptData, "the ledger is damaged, so nothing can be appended (\(damage.message)); run verify", seq: damage.seq)
            }
            if w.stale {
                try reload(&w)
                w.stale = false
            }
            var mutated = false
            let lastCommit = w.lastCommit
            w.lastCommit = nil
            do {
                return try writeQueue().writeWithoutTransaction { db in
                    var summary: ImportSummary!
                    var tail: Int?
                    try Ledger.immediateTransaction(db, w.statements) {
                        // Nothing committed to the file since this writer's last commit: its state
                        // and the tail it left are the file's, and the projections are marked.
                        let known = lastCommit.flatMap { $0.dataVersion == EventStore.dataVersion(db) ? $0 : nil }
                        if known == nil {
                            mutated = try catchUp(&w, db)
                            // Another connection may have recorded personal values: start from the table.
                            try w.personal.sync(db)
                        }
                        var session = try AppendSession(
                            db, configuration: configuration, chain: chain, lastLink: w.lastLink, storedTail: known?.tail,
                            emptyLedger: w.state.seq == 0, cache: pageCache)
                        while let (event, position) = try next() {
                            try session.decide(event, at: position, into: &w, db, mutated: &mutated, keep: keepEvents)
                        }
                        tail = try session.write(&w, db, markProjections: known == nil) ?? known?.tail
                        summary = session.summary(lastSeq: w.state.seq)
                    }
                    if let version = EventStore.dataVersion(db), let tail {
                        w.lastCommit = LastCommit(dataVersion: version, tail: tail)
                    }
                    return summary
                }
            } catch {
                // The transaction rolled back: the in-memory state is ahead of the file. Reload it
                // now, or, if that fails too, before the next append.
                if mutated {
                    do {
                        try reload(&w)
                    } catch {
                        w.stale = true
                    }
                }
                throw Ledger.wrap(error, "appending")
            }
        }
        if summary.stored > 0 {
            noteCommit()
        }
        return summary
    }

    private static let begin = PreparedSQL("BEGIN IMMEDIATE")
    private static let commit = PreparedSQL("COMMIT")
    private static let rollback = PreparedSQL("ROLLBACK")

    /// Runs `body` in a `BEGIN IMMEDIATE` transaction on the write connection, and commits, or
    /// rolls back when it throws. GRDB's `inTransaction` does the same, but prepares its `BEGIN`
    /// and `COMMIT` again each time and runs its observer bookkeeping around them; on a one-event
    /// append that showed in the profile.
    static func immediateTransaction(_ db: Database, _ statements: PreparedStatements, _ body: () throws -> Void) throws {
        try statements(begin, db).executeWithoutArguments(db)
        do {
            try body()
            try statements(commit, db).executeWithoutArguments(db)
        } catch {
            if db.isInsideTransaction { try? statements(rollback, db).executeWithoutArguments(db) }
            throw error
        }
    }

    /// Applies events another process appended since this one last wrote.
    private func catchUp(_ w: inout Writer, _ db: Database) throws -> Bool {
        let last = try EventStore.lastSeq(db)
        let erasures = try Ledger.erasures(db)
        guard last != w.state.seq || erasures != w.erasures else { return false }
        // A log cut back, or a user erased by another connection (the state in memory still holds
        // the values, and projection rows written from it would bring them back): load it again.
        if last < w.state.seq || erasures != w.erasures {
            (w.state, w.lastLink) = try Ledger.loadState(db, upTo: .max, cache: pageCache, chain: chain)
            w.erasures = erasures
            return true
        }
        try LogReplay.advance(&w.state, db)
        w.lastLink = try EventStore.lastLink(db)
        return true
    }
}

/// One append, in two steps. ``decide(_:at:into:_:mutated:keep:)`` runs the rules on each input
/// event and turns what is stored into frames, chain links, sealed blocks and snapshots, spooled,
/// writing nothing; ``write(_:_:)`` then stores all of it. Between them the caller holds the
/// write lock, so a refusal at any input event leaves nothing to undo.
struct AppendSession {
    private let configuration: LedgerConfiguration
    private let cache: SnapshotPageCache
    private let spool = Spool()
    private var blocks: EventStore.BlockWriter
    private var snapshots: [Snapshots.Pending] = []
    private var spooledPages: Set<[UInt8]> = []
    private var changes: [Projector.OwnedChange] = []
    /// Whether the ledger was empty when the append began: every projection row is then new,
    /// and the tables are written in bulk from the state reached and `history`.
    private let bulk: Bool
    private let chain: HashChain
    private var history = Projector.HistoryCollector()
    private var dirty = Projector.Dirty()
    private var stored = 0, ignored = 0, anomalies = 0, appendedByLedger = 0
    private var firstSeq: Int64?

    /// `storedTail`: the rows of the log's open tail, when the caller knows them. `emptyLedger`:
    /// whether the ledger holds no event yet.
    init(
        _ db: Database, configuration: LedgerConfiguration, chain: HashChain, lastLink: [UInt8], storedTail: Int?,
        emptyLedger: Bool, cache: SnapshotPageCache
    ) throws {
        self.configuration = configuration
        self.cache = cache
        self.chain = chain
        bulk = emptyLedger
        blocks = try EventStore.BlockWriter(
            db, blockSize: configuration.blockSize, codec: configuration.blockCodec, layout: configuration.blockLayout, chain: chain,
            lastLink: lastLink, storedTail: storedTail)
    }

    /// Runs the rules on one input event (and on what the ledger appends before it), advancing
    /// the writer's state, seq and chain link. Throws the refusal placed at the input's position.
    mutating func decide(
        _ given: Event, at position: LedgerError.Position, into w: inout Ledger.Writer, _ db: Database, mutated: inout Bool,
        keep: ((RecordedEvent) -> Void)?
    ) throws {
        let input = given.normalizingIDs()
        // The state is taken out of the writer for the rules, and put back whatever happens.
        var state = LedgerState()
        swap(&state, &w.state)
        defer { swap(&state, &w.state) }
        try Reducer.take(input, at: position, &state) { event, outcome, state, byLedger in
            mutated = true
            try store(event, outcome, &state, byLedger: byLedger, &w.personal, db, keep: keep)
        }
    }

    /// Stores an event the ledger records itself, outside the rules (an erasure), as the next
    /// event of the log.
    mutating func record(_ event: Event, into w: inout Ledger.Writer, _ db: Database) throws {
        var state = LedgerState()
        swap(&state, &w.state)
        defer { swap(&state, &w.state) }
        let outcome = try Reducer.reduce(&state, event)
        try store(event, outcome, &state, byLedger: true, &w.personal, db, keep: nil)
    }

    /// Turns one decided event into its frame (personal values as refs), its projection changes
    /// and, at the interval, a snapshot; counts it.
    private mutating func store(
        _ event: Event, _ outcome: Outcome, _ state: inout LedgerState, byLedger: Bool, _ personal: inout PersonalEncoder, _ db: Database,
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
        // Personal values as refs into `personal_values` (docs/storage.md, "Erasure").
        var payload = BinaryWriter()
        if !configuration.writesPersonalValuesInline, try personal.prepare(event.body, in: state, db) {
            PayloadCodec.encode(event.body, into: &payload, personal: personal)
            personal.writeIntroductions(&payload)
        } else {
            PayloadCodec.encode(event.body, into: &payload)
        }
        // Linked into the chain by the block writer, off this thread.
        try blocks.add(EventStore.Frame(recorded, payload: payload.bytes), db)
        if let change = Projector.ownedChange(recorded, outcome: outcome, state: state) {
            if bulk { history.apply(change) } else { changes.append(change) }
        }
        // A bulk write builds every row from the final state: no need to track what changed.
        if !bulk { dirty.touch(event, state: state) }
        stored += 1
        if firstSeq == nil { firstSeq = seq }
        if recorded.anomaly != nil { anomalies += 1 }
        if recorded.appendedByLedger { appendedByLedger += 1 }
        keep?(recorded)
        if configuration.snapshotInterval > 0, seq % Int64(configuration.snapshotInterval) == 0 {
            // At exact multiples of the interval, whatever the batch sizes.
            let snapshot: Snapshots.Pending
            (state, snapshot) = try Snapshots.encode(
                state, db, overlay: configuration.snapshotOverlay, spooled: &spooledPages, spool: spool,
                personalRefs: configuration.writesPersonalValuesInline ? nil : personal.assignedRefs)
            snapshots.append(snapshot)
        }
    }

    /// Stores everything decided: the log's blocks and tail rows, the snapshots, the owned-content
    /// history in order, and the projection rows of what changed, at the state `w` reached; and,
    /// when `markProjections`, that the projections are in step with the log. Returns the rows
    /// the log's open tail then holds, or nil when nothing was stored.
    mutating func write(_ w: inout Ledger.Writer, _ db: Database, markProjections: Bool) throws -> Int? {
        guard stored > 0 else { return nil }
        let tail: Int
        (w.lastLink, tail) = try blocks.write(db, w.statements)
        try w.personal.write(db)
        try Snapshots.write(snapshots, keep: configuration.maxSnapshots, spool: spool, chain: chain, db)
        if bulk {
            try Projector.writeAll(state: w.state, history: history, db)
        } else {
            var copied: [String: String] = [:]
            for change in changes {
                try Projector.apply(change, copied: &copied, db, w.statements)
            }
            try Projector.flush(dirty, state: w.state, db, w.statements)
            if markProjections { try Projector.markInStep(db) }
        }
        // Measured against the whole file: the projection rows are written by now.
        if !snapshots.isEmpty { try Snapshots.keepWithin(share: configuration.maxSnapshotShare, db) }
        // The state now continues from the last snapshot's pages: keep them for later time
        // travel. Not those of every snapshot of a long import: a page superseded by a later
        // snapshot of the same append is rarely read again, and 1,000,000 events held 32 MB of
        // them (ledger-bench import-once: peak RSS 219 against 187 MB).
        if !snapshots.isEmpty { cache.remember(w.state) }
        return tail
    }

    func summary(lastSeq: Int64) -> ImportSummary {
        ImportSummary(
            stored: stored, firstSeq: firstSeq, lastSeq: lastSeq, ignored: ignored, anomalies: anomalies,
            appendedByLedger: appendedByLedger, skippedLedgerAppended: 0)
    }
}
