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

/// What an append stored.
public struct AppendResult: Sendable {
    /// The stored events, in order, with their seq (including automatic cancellations).
    public var events: [RecordedEvent]
    /// Input events accepted without storing anything (identical repeats of a command).
    public var ignored: Int
    /// The last seq of the ledger after the append.
    public var lastSeq: Int64
}

/// How far a streaming import has got.
public struct ImportProgress: Sendable, Hashable {
    /// Input events decided so far.
    public var events: Int
    /// Input bytes read so far.
    public var bytesRead: Int
    /// The input's size in bytes when it is a regular file or bytes in memory; nil for a pipe.
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
        try append(contentsOf: events, progress: progress, refusingErasedUsers: true)
    }

    /// ``append(contentsOf:progress:)``; `refusingErasedUsers` false for events that come from a
    /// ledger (an export's JSON Lines, an extract), which may name erased users.
    func append(contentsOf events: [Event], progress: ((Int, Int) -> Void)?, refusingErasedUsers: Bool) throws -> AppendResult {
        var index = 0
        var stored: [RecordedEvent] = []
        let summary = try appendSession(keepEvents: { stored.append($0) }) {
            guard index < events.count else { return nil }
            defer { index += 1 }
            if let progress, index % 10_000 == 0, index > 0 { progress(index, events.count) }
            do {
                if configuration.checksInput { try InputLimits.check(events[index], refusingErasedUsers: refusingErasedUsers) }
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
        var first: Event?
        var summary: ImportSummary
        do {
            summary = try withWriterCache(LedgerFile.bulkCacheKiB) {
                try appendSession(keepEvents: nil) {
                    guard let item = try ahead.next() else { return nil }
                    decided += 1
                    if first == nil { first = item.event }
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
            throw reimported(error, first: first)
        }
        // The reading thread gave its last line, so this returns at once.
        ahead.stop()
        summary.skippedLedgerAppended = reader.skippedLedgerAppended
        return summary
    }

    /// `error`, saying so when a refused input starts with this ledger's own first event (an
    /// export imported again, which the rules refuse somewhere past its start).
    private func reimported(_ error: any Error, first: Event?) -> any Error {
        guard let error = error as? LedgerError, error.code == .ruleViolation, let first,
            let stored = try? events(limit: 1).first, stored.event == first.normalizingIDs()
        else { return error }
        return error.adding(
            hint: " (the input's first event is already this ledger's first: an export of it imported again? Import it into a new ledger file)")
    }

    /// Checks events against the rules without writing anything: throws the error `append` would
    /// throw (with ``LedgerError/batchIndex``), or returns the outcomes it would have.
    public func check(_ events: [Event]) throws -> [Outcome] {
        try check(events, refusingErasedUsers: true)
    }

    /// ``check(_:)``; `refusingErasedUsers` as for ``append(contentsOf:progress:refusingErasedUsers:)``.
    func check(_ events: [Event], refusingErasedUsers: Bool) throws -> [Outcome] {
        var state = try withWriter { $0.state }
        var outcomes: [Outcome] = []
        for (index, input) in events.enumerated() {
            do {
                if configuration.checksInput { try InputLimits.check(input, refusingErasedUsers: refusingErasedUsers) }
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
                var tail: Int?
                let (summary, version) = try file.transaction(w.statements) { db in
                    // Nothing committed to the file since this writer's last commit: its state
                    // and the tail it left are the file's, and the projections are marked.
                    let known = lastCommit.flatMap { $0.dataVersion == EventStore.dataVersion(db) ? $0 : nil }
                    if known == nil {
                        // Another connection may have changed projection_texts (sqlite3, then a
                        // rebuild here): the codes this writer knew are read again.
                        w.statements.forgetTexts()
                        mutated = try catchUp(&w, db)
                        // Another connection may have recorded personal values: start from the table.
                        try w.personal.sync(db, rowsPerBlock: configuration.personalValuesPerBlock)
                    }
                    let batch = try AppendBatch(
                        db, configuration: configuration, chain: chain, lastLink: w.lastLink, storedTail: known?.tail,
                        emptyLedger: w.state.seq == 0, cache: pageCache)
                    var session = AppendSession(batch, configuration: configuration)
                    while let (event, position) = try next() {
                        try session.decide(event, at: position, into: &w, mutated: &mutated, keep: keepEvents)
                    }
                    tail = try session.commit(&w, markProjections: known == nil) ?? known?.tail
                    return session.summary(lastSeq: w.state.seq)
                }
                if let version, let tail {
                    w.lastCommit = LastCommit(dataVersion: version, tail: tail)
                }
                return summary
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
                throw LedgerFile.wrap(error, "appending")
            }
        }
        if summary.stored > 0 {
            noteCommit()
        }
        return summary
    }

    /// Applies events another process appended since this one last wrote.
    private func catchUp(_ w: inout Writer, _ db: Database) throws -> Bool {
        let last = try EventStore.lastSeq(db)
        let erasures = try LedgerFile.erasures(db)
        guard last != w.state.seq || erasures != w.erasures else { return false }
        // A log cut back, or a user erased by another connection (the state in memory still holds
        // the values, and projection rows written from it would bring them back): load it again.
        if last < w.state.seq || erasures != w.erasures {
            let loaded = try file.load(db, upTo: .max)
            (w.state, w.lastLink) = (loaded.state, loaded.lastLink)
            w.erasures = erasures
            return true
        }
        try LogReplay.advance(&w.state, db)
        w.lastLink = try EventStore.lastLink(db)
        return true
    }
}
