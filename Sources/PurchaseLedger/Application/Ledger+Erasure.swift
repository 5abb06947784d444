import Foundation
import GRDB

/// What ``Ledger/forget(user:)`` erased.
public struct ErasureSummary: Sendable, Hashable {
    /// Personal values erased: the user id and every value recorded under it (store and
    /// original transaction ids, URLs, destinations, error messages, revocation reasons).
    public var values: Int
    /// The seq of the `personalDataErased` event that records the erasure.
    public var seq: Int64
    /// Projection rows rewritten with the erased markers.
    public var rowsRewritten: Int
    /// Snapshots replaced because they could hold erased values: each taken again at its seq from
    /// a replay without the values (and one more at the end of the log).
    public var snapshotsDropped: Int
    /// Whether the write-ahead log was checkpointed and truncated. False when another connection
    /// was reading the ledger throughout, or held its write lock past the busy timeout after the
    /// erasure committed: the new pages then wait in the `-wal` file and the main
    /// file still holds the erased values, until a later ``Ledger/checkpoint()`` succeeds, a
    /// writable open or another `forget` finishes the erasure, or the last connection closes.
    public var walTruncated: Bool
    /// Whether this call finished an erasure a kill had interrupted after its commit (its values
    /// were still in the main file, which only the checkpoint overwrites). A `forget` of a user
    /// the ledger no longer holds succeeds when it finishes one, with `values` 0.
    public var finishedUnfinishedErasure = false
}

extension Ledger {
    /// Erases a user (contract 5.3, GDPR article 17): every personal value recorded under user id
    /// `user` is deleted from the ledger, which records that an erasure happened (a
    /// `personalDataErased` event naming only internal numbers) and never whom.
    ///
    /// The log itself is not rewritten: its events hold personal values as numbers (refs) into
    /// `personal_values`, and each value's salted commitment, so the chain still verifies once the
    /// values and their salts are gone. Afterwards the user's records read everywhere (state,
    /// projections, reports, export, timeline) with `[erased N]` in place of each value; amounts,
    /// products, times and states stay, so every report still totals. The projection rows and
    /// snapshots that held the values are rewritten (SQLite `secure_delete` zeroes what they
    /// held) and the write-ahead log is checkpointed and truncated. A user who comes back later
    /// is a new subject with new refs. docs/storage.md ("Erasure") says what this covers and what
    /// it does not (copies of the file, backups, values recorded under no user).
    ///
    /// ```swift
    /// let erased = try ledger.forget(user: "u-04217")
    /// print("erased \(erased.values) personal values, recorded at seq \(erased.seq)")
    /// ```
    ///
    /// Throws ``LedgerError/Code/unknownUser`` when the ledger holds no value of `user` (never
    /// recorded, or already erased), and ``LedgerError/Code/notErasable`` for a ledger whose
    /// events before migration 0007 hold personal values inside the chain.
    @discardableResult
    public func forget(user: String) throws -> ErasureSummary {
        let user = Identifier.normalize(user)
        return try forget("erasing a user") { db in try self.userRefs(user, db) }
    }

    /// Erases the personal values of no user that download `download`'s events recorded: the URL
    /// a standalone download (`contentRegistered`, Kollus) was registered with, and its content
    /// URLs, destinations and error messages when no transaction of a user holds it. What a user's
    /// download recorded is the user's, erased by ``forget(user:)``. Otherwise as ``forget(user:)``:
    /// a `personalDataErased` event, projections and snapshots rewritten, the WAL truncated.
    ///
    /// ```swift
    /// try ledger.forget(download: "kollus-7f3a")
    /// ```
    ///
    /// Throws ``LedgerError/Code/malformedInput`` when the download recorded no value of no user
    /// (never recorded, already erased, or a user's: the message says which).
    @discardableResult
    public func forget(download: String) throws -> ErasureSummary {
        let download = Identifier.normalize(download)
        return try forget("erasing a download's values") { db in try self.downloadRefs(download, db) }
    }

    /// Runs an erasure of the refs `select` gives, inside the write transaction, then finishes it.
    private func forget(_ what: String, _ select: @escaping (Database) throws -> [Int64]) throws -> ErasureSummary {
        guard !configuration.readOnly else { throw LedgerError(.io, "the ledger was opened read-only") }
        var summary: ErasureSummary!
        do {
            // The writer's state is not loaded for this: the erasure replays the whole log anyway,
            // and leaves the writer with the state it replayed.
            try writer.withLock { current in
                current?.lastCommit = nil
                var erased: Writer?
                try writeQueue().writeWithoutTransaction { db in
                    // An erasure a kill interrupted is finished first (LedgerFile.finishErasure), by
                    // this ledger's open or here.
                    let onOpen = file.erasureFinishedOnOpen.withLock { seq in
                        defer { seq = nil }
                        return seq
                    }
                    let finished = try LedgerFile.finishErasure(db) ?? onOpen
                    do {
                        try LedgerFile.immediateTransaction(db, PreparedStatements()) {
                            (summary, erased) = try erase(refs: try select(db), db)
                        }
                    } catch let error as LedgerError where (error.code == .unknownUser || error.code == .malformedInput) && finished != nil {
                        // What this call names is gone: erased by the interrupted call.
                        summary = ErasureSummary(
                            values: 0, seq: finished!, rowsRewritten: 0, snapshotsDropped: 0, walTruncated: true, finishedUnfinishedErasure: true)
                        return
                    }
                    summary.finishedUnfinishedErasure = finished != nil
                    PersonalValues.invalidate(db)
                    pageCache.clear()
                    configuration.afterErasureCommit?()
                    // The erased bytes may still be in WAL frames: copy everything into the
                    // file and cut the WAL to zero bytes; then the erasure is finished.
                    // Committed: a lock another process holds past the timeout leaves the WAL as
                    // it is (walTruncated false), for a later checkpoint, forget or open to finish.
                    summary.walTruncated = (try? LedgerFile.finishErasure(db)) != nil
                }
                if let erased { current = erased }
            }
        } catch {
            throw LedgerFile.wrap(error, what)
        }
        noteCommit()
        return summary
    }

    /// The refs of user `user`'s values: its user id's row and every row it owns.
    private func userRefs(_ user: String, _ db: Database) throws -> [Int64] {
        // Events before `since` were written by a version that kept personal values inline,
        // inside the chain: erasing a user is possible only if none of them is that user's.
        let since = try Int64.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'personal_values_since'") ?? 1
        if since > 1 {
            var inline: Int64?
            var replay = LogReplay()
            try replay.run(db, through: since - 1) { step, _, state in
                let body = step.event.event.body
                var holdsValues = false
                PersonalData.forEachValue(in: body) { _, _ in holdsValues = true }
                guard holdsValues, PersonalData.owner(of: body, in: state) == user else { return true }
                inline = step.event.seq
                return false
            }
            if let inline {
                throw LedgerError(
                    .notErasable,
                    "event \(inline), written by a version that kept personal values inside the hash chain (before migration 0007), "
                        + "holds this user's personal data, which cannot be erased without breaking the chain; export the ledger, "
                        + "import it into a new ledger (a new chain) and forget the user there")
            }
        }
        guard let subject = try PersonalValues.userRef(user, db) else {
            throw LedgerError(.unknownUser, "this ledger holds no personal data of that user (never recorded, or already erased)")
        }
        let rows = try Int64.fetchAll(db, sql: "SELECT ref FROM personal_values WHERE owner = ? ORDER BY ref", arguments: [subject])
        return (rows + (try PersonalValueBlocks.owners(db).filter { $0.owner == subject }.map(\.ref))).sorted()
    }

    /// The refs of the values of no user that download `download`'s events introduced.
    private func downloadRefs(_ download: String, _ db: Database) throws -> [Int64] {
        let stream = "download:" + download
        var introduced: [Int64] = []
        var seen = false
        try EventStore.scan(db, integrity: true) { entry in
            if entry.event.stream == stream {
                seen = true
                introduced += PayloadCodec.introductions(in: entry.payload).map(\.0)
            }
            return true
        }
        guard seen else { throw LedgerError.make(.malformedInput, "download \(download) is not in this ledger") }
        // Rows and sealed values alike, with their owners.
        let list = introduced.map(String.init).joined(separator: ",")
        let owners =
            try Row.fetchAll(db, sql: "SELECT ref, owner FROM personal_values WHERE ref IN (\(list))").map { (ref: $0[0] as Int64, owner: $0[1] as Int64) }
            + PersonalValueBlocks.owners(among: Set(introduced), db)
        let held = owners.filter { $0.owner == 0 }.map(\.ref).sorted()
        guard !held.isEmpty else {
            throw LedgerError.make(
                .malformedInput,
                owners.isEmpty
                    ? "download \(download) holds no personal value of no user (none recorded, or already erased)"
                    : "download \(download)'s personal values are its user's: forget --user erases them")
        }
        return held
    }

    /// The erasure of `refs`, inside the write transaction: their rows deleted, the erasure
    /// recorded, snapshots dropped and projections rewritten. Returns what it did and the writer.
    private func erase(refs: [Int64], _ db: Database) throws -> (ErasureSummary, Writer) {
        // The user ids among them, listed: snapshots taken again below are followed by events
        // that name them, which a state loaded from one must read as erased (PersonalValues.since).
        let userIDs = try Int64.fetchAll(
            db, sql: "SELECT ref FROM personal_values WHERE owner = ref AND ref IN (\(refs.map(String.init).joined(separator: ",")))")
        if !userIDs.isEmpty {
            let listed = try PersonalValues.erasedUserIDs(db) + userIDs
            try db.execute(
                sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('erased_user_refs', ?)",
                arguments: [listed.map(String.init).joined(separator: ",")])
        }
        // Their commitments first: an event sealed with its commitments elided (docs/format.md)
        // reads them from there once the values and salts are gone.
        if try db.tableExists("erased_commitments") {
            let keep = try db.cachedStatement(sql: "INSERT OR REPLACE INTO erased_commitments (ref, commitment) VALUES (?, ?)")
            for (ref, commitment) in try CommitmentSource.beforeErasing(Set(refs), db) {
                try keep.execute(arguments: [ref, Data(commitment)])
            }
        }
        try db.execute(sql: "DELETE FROM personal_values WHERE ref IN (\(refs.map(String.init).joined(separator: ",")))")
        try PersonalValueBlocks.erase(Set(refs), db)

        try db.execute(
            sql: """
                INSERT INTO ledger_info (key, value) VALUES ('personal_erasures', 1)
                ON CONFLICT (key) DO UPDATE SET value = value + 1
                """)

        // Every snapshot may hold the values (in its records): drop them all, and their pages,
        // and take them again at the same seqs from the replay without the values, so time
        // travel stays as fast as before (with only one snapshot, at the end, a state at a
        // random seq of a 1,000,000-event ledger took 307 ms instead of 68, up to 1.1 s).
        // The projection tables as stored are read on a read connection while the log replays
        // here without the values (the write lock is held and this transaction has not touched
        // them, so both see the same rows).
        let previous = try Row.fetchAll(db, sql: "SELECT seq, personal_refs FROM snapshots ORDER BY seq").map { ($0[0] as Int64, $0[1] as Int64?) }
        try db.execute(sql: "DELETE FROM snapshots")
        try db.execute(sql: "DELETE FROM snapshot_pages")
        let pool = self.pool
        let storedRows = Pipeline([{ @Sendable in try? pool.read { db in try Projector.Table.all.map { try Projector.storedRowHashes($0, db) } } }])
        var evidence = EvidenceRows.Collector()
        let overlay = configuration.snapshotOverlay
        // Encoded on another thread while the replay goes on (the file holds no page now).
        let spool = Spool()
        let encoder = SnapshotEncoder(overlay: overlay, spool: spool)
        var due = previous[...]
        var (replayed, history) = try Ledger.replayForProjections(db, evidence: &evidence) { state in
            while let (seq, _) = due.first, seq < state.seq { due = due.dropFirst() }
            guard let (seq, refs) = due.first, seq == state.seq else { return }
            due = due.dropFirst()
            try encoder.snapshot(&state, personalRefs: refs)
        }
        try Snapshots.write(try encoder.finish(carrying: &replayed), keep: configuration.maxSnapshots, spool: spool, chain: chain, db)
        // The erased signatures' evidence stands, without the keyed digest of their Apple
        // transaction ids (the file's secret would confirm a guess of one).
        let erasedSignatures = evidence.found.compactMap { t, found -> String? in if case .erased = found { t } else { nil } }
        if !erasedSignatures.isEmpty, try db.tableExists("transaction_evidence") {
            for t in erasedSignatures {
                try db.execute(sql: "UPDATE transaction_evidence SET signed_key = NULL WHERE transaction_id = ?", arguments: [t])
            }
        }

        // The erasure event, after the log as replayed.
        var w = Writer(state: replayed, lastLink: try EventStore.lastLink(db))
        w.erasures = try LedgerFile.erasures(db)
        let batch = try AppendBatch(
            db, configuration: configuration, chain: chain, lastLink: w.lastLink, storedTail: nil, emptyLedger: false, cache: pageCache)
        var session = AppendSession(batch, configuration: configuration)
        try session.record(Event(at: configuration.clock(), .personalDataErased(refs: refs)), into: &w)
        _ = try session.commit(&w, markProjections: true)
        let seq = w.state.seq
        // Unfinished until the WAL holding the new pages is copied over the old ones in the main
        // file and truncated: a kill before that is finished by the next writable open.
        try db.execute(sql: "INSERT OR REPLACE INTO ledger_info (key, value) VALUES ('erasure_unfinished', ?)", arguments: [seq])

        // The projection rows that held the values, and a snapshot of the state without them
        // (encoded on another thread while the rows are written), sharing the pages of those
        // just taken again (a whole new one cost 0.3 s of the 1,000,000-event ledger's erasure).
        let state = w.state
        // The pages the snapshots taken again still hold (writing them may have thinned some).
        let written = Set(try Data.fetchAll(db, sql: "SELECT hash FROM snapshot_pages").map { [UInt8]($0) })
        let snapshot =
            configuration.snapshotInterval > 0
            ? Pipeline([{ @Sendable in try? SnapshotCodec.encode(state, overlay: overlay) { written.contains($0) } }]) : nil
        let rebuilt = try Projector.reconcile(state: state, history: history, stored: storedRows.take(0), db)
        releaseInBackground(consume history)
        if let snapshot {
            guard let encoded = snapshot.take(0) else { throw LedgerError(.storage, "the snapshot after the erasure could not be encoded") }
            let spool = Spool()
            try Snapshots.write(
                [try Snapshots.pending(encoded, seq: seq, spool: spool, personalRefs: try PersonalValues.assignedRefs(db))],
                keep: configuration.maxSnapshots, spool: spool, chain: chain, db)
        }
        let summary = ErasureSummary(
            values: refs.count, seq: seq, rowsRewritten: rebuilt.rowsWritten + rebuilt.rowsDeleted, snapshotsDropped: previous.count,
            walTruncated: false)
        return (summary, w)
    }
}
