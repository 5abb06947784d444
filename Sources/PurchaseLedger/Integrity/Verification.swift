import Foundation
import GRDB

/// One problem `verify` found.
public struct VerificationProblem: Sendable, Hashable, CustomStringConvertible {
    /// What part of the ledger the problem is in; the raw value is the `kind` of `verify --json`.
    public enum Kind: String, Sendable, Hashable {
        /// SQLite's own `integrity_check` failed.
        case sqliteIntegrity
        /// Stored bytes do not decode.
        case corruptData
        /// A seq is missing, repeated or out of order.
        case sequence
        /// The hash chain does not match: an event was edited, removed, inserted or moved.
        case chain
        /// The event does not pass the rules the way it was recorded.
        case rules
        /// The projection tables differ from a fresh rebuild.
        case projections
        /// A snapshot does not decode, or differs from the log replayed to its seq: time travel
        /// from it would give a wrong state.
        case snapshot
        /// The ledger id is key-derived, but not from the file's own identity key: copied from
        /// another ledger.
        case identity
        /// A personal value (`personal_values`) differs from the commitment its event stored,
        /// was added, or is missing without an erasure that recorded it.
        case personalValues
        /// A transaction's stored evidence (`transaction_evidence`) is not what its signed
        /// transaction says when checked again: the signature, or the row, was edited.
        case signatures
        /// The schema was changed beside the ledger so that queries may read something other
        /// than the rows `verify` compares: a view of the projections that is not the one the
        /// migrations made, a table of the ledger replaced by a view or made case-blind
        /// (`COLLATE`), or a trigger (the ledger makes none).
        case schema
    }

    /// What part of the ledger the problem is in.
    public var kind: Kind
    /// The first seq concerned, when the problem has one.
    public var seq: Int64?
    /// For a ``Kind/rules`` problem, the rule concerned.
    public var rule: Rule?
    /// What is wrong, in a sentence.
    public var message: String

    /// `seq N: kind: rule: message`, leaving out what the problem does not have.
    public var description: String {
        (seq.map { "seq \($0): " } ?? "") + "\(kind.rawValue): " + (rule.map { "\($0.name): " } ?? "") + message
    }
}

/// What `verify` found: problems (a ledger with any is broken) and anomalies (observations the
/// app recorded in a state where they made no sense: normal, but worth a look).
public struct VerificationReport: Sendable {
    /// What is broken, in the order found; only the first unless `verify` was asked for all (or
    /// two: a personal value edited, then what the edit changed, which showed first).
    public var problems: [VerificationProblem] = []
    /// The stored anomalies, in order.
    public var anomalies: [(seq: Int64, rule: Rule)] = []
    /// Events read from the log and checked.
    public var eventsChecked: Int64 = 0
    /// Snapshots compared with the log replayed to their seq.
    public var snapshotsChecked = 0
    /// Whether no problem was found (anomalies do not count).
    public var isValid: Bool { problems.isEmpty }
}

extension Ledger {
    /// Checks everything: SQLite's integrity, that every stored byte decodes, the hash chain, that
    /// every event passes the rules as recorded (re-running the same reducer), that the newest
    /// snapshot this version reads (or with `everySnapshot`, each of them) equals the log replayed
    /// to its seq, and that the projection tables equal a fresh rebuild. Stops at the first
    /// problem unless `all`. Comparing a snapshot compares every record of the state: about 0.1 s
    /// each on a 1,000,000-event ledger.
    public func verify(all: Bool = false, everySnapshot: Bool = false, progress: ((Int64, Int64) -> Void)? = nil) throws -> VerificationReport {
        try read { db in
            var verifier = Verifier(chain: chain, all: all, everySnapshot: everySnapshot, progress: progress)
            let report = try verifier.run(db)
            // A personal value edited beside its commitment first shows as what it changed: a
            // rule that no longer fits, a snapshot or projection that differs. The first problem
            // named should be the cause: checked on (only when the ledger already failed).
            guard !all, let first = report.problems.first, [.rules, .snapshot, .projections].contains(first.kind) else { return report }
            var whole = Verifier(chain: chain, all: true, everySnapshot: everySnapshot, progress: nil)
            // A value its event introduced at or before the problem (a later one did not cause it).
            // (Its own error, on a file whose schema was changed, leaves the report as it is.)
            guard
                let cause = (try? whole.run(db))?.problems.first(where: {
                    $0.kind == .personalValues && ($0.seq ?? .min) <= (first.seq ?? .max)
                })
            else { return report }
            var named = report
            named.problems = [cause, first]
            return named
        }
    }
}

private struct StopVerification: Error {}

private struct Verifier {
    let chain: HashChain
    let all: Bool
    let everySnapshot: Bool
    let progress: ((Int64, Int64) -> Void)?
    var report = VerificationReport()
    /// False when a view the projections are read through is missing (``findSchemaChanges(_:)``).
    var schemaComplete = true
    /// What ``findSchemaChanges(_:)`` found, reported last (``reportSchema()``).
    var schemaChanges: [String] = []
    /// Refs the log introduced: the commitment and the event that stored it, and whether the
    /// commitment was made again from the value (its block keeps it elided: the chain's check of
    /// the event's link is then the check of the value).
    var introduced: [Int64: (commitment: [UInt8], seq: Int64, madeAgain: Bool)] = [:]
    /// Refs an erasure event recorded, with its seq.
    var erased: [Int64: Int64] = [:]
    /// Whom each introduced value belongs to, as its event says (the user id the writer owned it
    /// by, from the state the event left), with the event's seq.
    var owners: [Int64: (owner: ExpectedOwner, seq: Int64)] = [:]
    /// The values as the log's replay reads them (for the owners above).
    var personal = PersonalValues.empty

    enum ExpectedOwner {
        /// A user id: its own row.
        case user
        /// A value of this user id (nil: of no user).
        case value(of: String?)
    }
    /// The evidence rows the log's signed events give, and the secret their keys are made with.
    var evidence = EvidenceRows.Collector()
    var evidenceSecret = EvidenceRows.Context(secret: [], bundleID: nil)

    init(chain: HashChain, all: Bool, everySnapshot: Bool, progress: ((Int64, Int64) -> Void)?) {
        self.chain = chain
        self.all = all
        self.everySnapshot = everySnapshot
        self.progress = progress
    }

    mutating func problem(_ kind: VerificationProblem.Kind, _ seq: Int64?, _ message: String, rule: Rule? = nil) throws {
        report.problems.append(VerificationProblem(kind: kind, seq: seq, rule: rule, message: message))
        if !all { throw StopVerification() }
    }

    mutating func run(_ db: Database) throws -> VerificationReport {
        do {
            try checkIntegrity(db)
            try findSchemaChanges(db)
            evidenceSecret = try EvidenceRows.secret(db)
            try checkIdentity(db)
            try checkUnfinishedErasure(db)
            let (state, history, trusted) = try checkLog(db)
            // The headers' rows hash to their keys or not, whatever the log says: an edited one
            // is named even when the events that use it no longer decode.
            try checkSigningHeaders(db)
            if trusted { try checkPersonalValues(db) }
            if trusted { try checkProjections(db, state: state, history: history) }
            if trusted { try checkEvidence(db) }
            try reportSchema()
        } catch is StopVerification {}
        return report
    }

    /// An erasure that committed but was killed before the WAL was checkpointed over the main
    /// file: the values are gone from every table, but old page images may still hold them.
    private mutating func checkUnfinishedErasure(_ db: Database) throws {
        guard let seq = try Int64.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'erasure_unfinished'") else { return }
        try problem(
            .personalValues, seq,
            "the erasure recorded at seq \(seq) was interrupted after its commit: the main file may still hold the erased values until it is finished (open the ledger for writing, or run forget again)"
        )
    }

    private mutating func checkIntegrity(_ db: Database) throws {
        let lines = try String.fetchAll(db, sql: "PRAGMA integrity_check")
        if lines != ["ok"] {
            try problem(.sqliteIntegrity, nil, lines.prefix(5).joined(separator: "; "))
        }
    }

    /// Every row of `personal_values` must be the value its introducing event committed to, and
    /// every value the log introduced must be there unless an erasure event recorded its removal.
    private mutating func checkSigningHeaders(_ db: Database) throws {
        for digest in try SigningHeaders.edited(db) {
            try problem(
                .personalValues, nil,
                "signing header \(Hex.encode(Array(digest.prefix(8)))) no longer hashes to its digest: it was edited in signing_headers")
        }
    }

    private mutating func checkPersonalValues(_ db: Database) throws {
        guard try Migrations.applied("0007_personal_values", db) else { return }
        // A copy pulled from a fleet store lacks the values of the users the store erased
        // (`forget` there), which no event of the log records: the copy lists their refs.
        if let refs = try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'fleet_erased_refs'") {
            // Only a pulled copy holds such a list (docs/fleet.md): in any other file it would
            // pass values deleted with sqlite3 off as erased by a fleet store. (Marking the file
            // a pulled copy too makes it read-only for good: no app writes to it again.)
            if try Data.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'pulled_from'") == nil {
                try problem(
                    .personalValues, nil,
                    "ledger_info.fleet_erased_refs lists values erased by a fleet store, but this file is not a copy pulled from one: it was edited")
            }
            for ref in refs.split(separator: ",").compactMap({ Int64($0) }) where erased[ref] == nil { erased[ref] = 0 }
        }
        var seen = Set<Int64>()
        // The salts: on user ids' rows (for every value they own) and values of no user.
        var salts: [Int64: [UInt8]] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT ref, CAST(salt AS BLOB) FROM personal_values WHERE salt IS NOT NULL") {
            salts[row[0]] = [UInt8](row[1] as Data)
        }
        // The user ids' rows, by ref (owners of the other values).
        var userIDs: [Int64: String] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT ref, CAST(value AS BLOB) FROM personal_values WHERE owner = ref") {
            userIDs[row[0]] = String(decoding: (row[1] as Data?) ?? Data(), as: UTF8.self)
        }
        // One value, from a row or a sealed block (`where` names it; `ownSalt`: a salt of its own).
        func check(_ ref: Int64, owner: Int64, ownSalt: [UInt8]?, stored: UnsafeRawBufferPointer, where place: String, inBlock: Bool) throws {
            // Whom it belongs to, against its event: an owner edited (a user's value made one of
            // no user, a user id made a value) would keep it, and its salt, out of the user's erasure.
            if let (expected, seq) = owners[ref] {
                let held = owner == 0 ? "as a value of no user" : owner == ref ? "as a user id" : "as a value of the user id \(owner)"
                switch expected {
                case .user where owner != ref || inBlock:
                    try problem(
                        .personalValues, seq,
                        "personal value \(ref), a user id in event \(seq), is held \(held) in \(place): it was edited, so that forget would not find it")
                case .value(let user) where owner == ref || (owner == 0 ? user != nil : userIDs[owner].map { $0 != user } ?? false):
                    try problem(
                        .personalValues, seq,
                        "personal value \(ref) is held \(held) in \(place), not as event \(seq) recorded it: its owner was edited, so that forget would not erase it with its user")
                default:
                    break
                }
            }
            if owner != 0 && owner != ref && ownSalt != nil {
                try problem(.personalValues, nil, "personal value \(ref) in \(place) holds a salt of its own, which only a value of no user has: it was edited")
            }
            guard seen.insert(ref).inserted else {
                try problem(.personalValues, nil, "personal value \(ref) is held twice (\(place) holds it again): a row or block added")
                return
            }
            guard let introduced = introduced[ref] else {
                try problem(.personalValues, nil, "personal value \(ref) was never introduced by an event: added to \(place)")
                return
            }
            let salt = owner == 0 ? (ownSalt ?? salts[ref] ?? []) : (salts[owner] ?? [])
            // A packed value (a signed transaction's body) is committed to as its text. A
            // commitment made again from this value was checked by the chain, through its event.
            let value = introduced.madeAgain ? "" : try? SignedParts.text(ofStored: stored)
            if !introduced.madeAgain && (value == nil || PersonalValues.commitment(salt: salt, value: value!) != introduced.commitment) {
                try problem(
                    .personalValues, introduced.seq,
                    "personal value \(ref) is not the value event \(introduced.seq) committed to: it (or its salt) was edited in \(place)")
            }
            if let erasure = erased[ref] {
                try problem(
                    .personalValues, erasure > 0 ? erasure : nil,
                    erasure > 0
                        ? "personal value \(ref) is still held, although event \(erasure) recorded its erasure"
                        : "personal value \(ref) is held, although ledger_info lists it as erased by the fleet store this copy was pulled from")
            }
        }
        // Each cell as stored, whatever its type (an edit may have made a value a number).
        let rows = try Row.fetchCursor(db, sql: "SELECT ref, coalesce(CAST(owner AS INTEGER), -1), CAST(value AS BLOB), CAST(salt AS BLOB) FROM personal_values ORDER BY ref")
        while let row = try rows.next() {
            let stored = [UInt8]((row[2] as Data?) ?? Data())
            let ownSalt = (row[3] as Data?).map { [UInt8]($0) }
            try stored.withUnsafeBytes { try check(row[0], owner: row[1], ownSalt: ownSalt, stored: $0, where: "personal_values", inBlock: false) }
        }
        // The user ids an erasure listed for time travel must be ones an erasure event recorded.
        for ref in try PersonalValues.erasedUserIDs(db) where erased[ref] == nil {
            try problem(.personalValues, nil, "ledger_info.erased_user_refs lists personal value \(ref), which no erasure event recorded: it was edited")
        }
        // The sealed values (migration 0010): a block that does not decode is reported, and the
        // values it held then count as missing.
        for block in try PersonalValueBlocks.blocks(db) {
            do {
                let raw = try PersonalValueBlocks.decompress(block)
                try raw.withUnsafeBytes { raw in
                    try PersonalValueBlocks.forEachRecord(raw, of: block) { ref, owner, salt, value in
                        try check(
                            ref, owner: owner, ownSalt: salt.map { Array(raw[$0]) }, stored: UnsafeRawBufferPointer(rebasing: raw[value]),
                            where: "personal_value_blocks (\(block.first)...\(block.last))", inBlock: true)
                    }
                }
            } catch let error as LedgerError {
                try problem(.personalValues, nil, error.message)
            }
        }
        for (ref, introduced) in introduced.sorted(by: { $0.key < $1.key }) where !seen.contains(ref) && erased[ref] == nil {
            try problem(
                .personalValues, introduced.seq,
                "personal value \(ref), introduced by event \(introduced.seq), is missing and no erasure recorded its removal: deleted from personal_values or personal_value_blocks"
            )
        }
        // The commitments `forget` kept (migration 0011): only of values an erasure event of this
        // ledger removed. One of a value still held, or of one no event erased (added with the
        // value deleted, to pass the deletion off as an erasure), is an edit.
        for ref in try PersonalValues.erasedCommitments(db).keys.sorted() {
            if seen.contains(ref) {
                try problem(.personalValues, nil, "erased_commitments keeps a commitment of personal value \(ref), which is still held: it was edited")
            } else if (erased[ref] ?? 0) <= 0 {
                try problem(
                    .personalValues, nil,
                    "erased_commitments keeps a commitment of personal value \(ref), which no erasure event of this ledger recorded: it was added")
            }
        }
    }

    /// A key-derived ledger id must be derived from this file's own identity key: one that is not
    /// was copied from another ledger (whose chain and events this file cannot have).
    private mutating func checkIdentity(_ db: Database) throws {
        guard let identity = try LedgerIdentity.read(db), identity.contradictsItsKey else { return }
        try problem(
            .identity, nil,
            "the ledger id \(identity.id) is not derived from this file's identity key"
                + (identity.publicKey == nil ? " (the file has none: it was deleted)" : "")
                + ": the id (or the key) in ledger_info was replaced, to pass this file off as another ledger")
    }

    /// Notes whom each value `e` introduces belongs to: a user id itself, or the user id the
    /// writer owned the event's values by (``PersonalData/owner(of:in:)`` in the state it left).
    /// A text given both as a user id and as another value of the event is left out (which of
    /// its two refs is which cannot be told from the text).
    mutating func noteOwners(_ e: RecordedEvent, payload: [UInt8], state: LedgerState) {
        let refs = PayloadCodec.introductions(in: payload)
        guard !refs.isEmpty else { return }
        // (An event holds a few values: arrays, not sets.)
        var users: [String] = [], others: [String] = []
        PersonalData.forEachValue(in: e.event.body) { value, isUser in
            if isUser { users.append(value) } else { others.append(value) }
        }
        let owner = PersonalData.owner(of: e.event.body, in: state)
        for (ref, _) in refs {
            // Erased (or not readable): nothing held to compare.
            guard let text = try? personal.value(UInt64(ref)) else { continue }
            let isUser = users.contains(text), isOther = others.contains(text)
            guard isUser != isOther else { continue }
            owners[ref] = (isUser ? .user : .value(of: owner), e.seq)
        }
    }

    /// Walks the log once: decoding, sequence, chain and rules. Returns the replayed state and
    /// whether it can be trusted for the projection check (no event was lost on the way).
    private mutating func checkLog(_ db: Database) throws -> (LedgerState, Projector.HistoryCollector, Bool) {
        var replay = LogReplay(collectingHistory: true)
        var expected: Int64 = 1
        var previous: [UInt8]? = try HashChain.genesis(db)
        var chainReported = false
        var lost = false
        let total = try EventStore.lastSeq(db)
        // The snapshots time travel would load, oldest first, each checked when the replay
        // reaches its seq: every one bound to the chain's link there (cheap: the link is known by
        // then), and the newest (every one with `everySnapshot`) decoded and compared with the
        // replayed state. Pages shared between snapshots are read and decoded once.
        let bound = try Migrations.applied("0006_snapshot_binding", db)
        let rows = try Row.fetchAll(
            db,
            sql: "SELECT seq, manifest, \(bound ? "binding" : "NULL") FROM snapshots WHERE reducer_version = ? AND format IN \(SnapshotCodec.readableFormatsSQL) ORDER BY seq",
            arguments: [Reducer.version])
        var snapshots = rows.enumerated().map { i, row in
            (
                seq: row[0] as Int64, manifest: [UInt8](row[1] as Data), binding: (row[2] as Data?).map { [UInt8]($0) },
                decode: everySnapshot || i == rows.count - 1
            )
        }[...]
        let pages = SnapshotPageCache()
        let page = try db.cachedStatement(sql: "SELECT data FROM snapshot_pages WHERE hash = ?")
        personal = try PersonalValues.current(db)
        var me = self
        defer { self = me }
        try replay.run(
            db, integrity: true,
            onCorrupt: { error in
                lost = true
                previous = nil
                try me.problem(.corruptData, error.seq, error.message)
            },
            before: { step, state in
                let e = step.event
                if e.seq != expected {
                    lost = true
                    let message =
                        e.seq > expected
                        ? EventStore.missing(expected, e.seq - 1)
                        : "event \(e.seq) appears again or out of order after \(expected - 1)"
                    try me.problem(.sequence, min(e.seq, expected), message)
                    if e.seq < expected { return false }
                }
                expected = e.seq + 1
                me.report.eventsChecked += 1

                // The chain: recompute from the canonical frame, compare with what is stored.
                let frame = FrameCodec.canonical(e, payload: step.payload)
                let stored: [UInt8]?
                switch step.link {
                case .full(let link): stored = link
                case .prefix(_, let blockLast): stored = blockLast
                case nil: stored = nil
                }
                if let prev = previous {
                    let link = chain.link(after: prev, frame: frame)
                    let matches = step.link?.matches(link) ?? true
                    if !matches && !chainReported {
                        chainReported = true
                        try me.problem(.chain, e.seq, HashChain.breakMessage(at: step))
                    }
                    previous = matches ? link : stored
                } else {
                    previous = stored
                }
                if stored != nil { chainReported = false }
                if let progress = me.progress, e.seq % 50_000 == 0 { progress(e.seq, total) }

                // Personal values the event introduces (their commitments), or erased.
                for (ref, commitment) in PayloadCodec.introductions(in: step.payload) {
                    me.introduced[ref] = (commitment, e.seq, step.commitmentsMadeAgain)
                }
                if case .personalDataErased(let refs) = e.event.body {
                    for ref in refs { me.erased[ref] = e.seq }
                }

                // Values the importer would refuse (NaN, a negative length...): only an edited file has them.
                if let wrong = InputLimits.storedValueProblem(e.event.body) {
                    try me.problem(.corruptData, e.seq, "a stored value the importer would refuse: \(wrong); the file was edited")
                }

                // The rules: the same reducer, and the outcome must be what was recorded. Once an
                // event is lost, the state after it is unknown: the rules are not checked any more.
                guard !lost else { return false }
                try me.checkBefore(e, state: state)
                return true
            },
            after: { step, replayed, state in
                try me.checkAfter(step.event, replayed, state: state)
                me.noteOwners(step.event, payload: step.payload, state: state)
                if case .outcome(let outcome) = replayed, step.event.event.body.signedTransaction != nil {
                    me.evidence.add(EvidenceRows.found(step.event, outcome: outcome, state: state, secret: me.evidenceSecret))
                }
                while let next = snapshots.first, next.seq <= step.event.seq {
                    snapshots.removeFirst()
                    guard next.seq == step.event.seq, !lost else { continue }
                    if bound, let link = previous, !chainReported {
                        guard next.binding == Snapshots.binding(link: link, manifest: next.manifest, chain: me.chain) else {
                            try me.problem(
                                .snapshot, next.seq,
                                "the snapshot at seq \(next.seq) is not bound to this ledger's chain at that seq: it was copied from another ledger or another point of this one (the file was altered); time travel does not use it"
                            )
                            continue
                        }
                    }
                    if next.decode { try me.checkSnapshot((next.seq, next.manifest), state: state, pages, page) }
                }
                return true
            })
        return (replay.state, replay.history!, !lost)
    }

    /// Every signed transaction checked again (its signature, time, markers and fields), against
    /// the evidence stored for its transaction.
    private mutating func checkEvidence(_ db: Database) throws {
        for found in EvidenceRows.differences(evidence, stored: try EvidenceRows.stored(db)) {
            try problem(.signatures, found.seq, found.message)
        }
    }

    /// What the rules say of an event before it is applied.
    private mutating func checkBefore(_ e: RecordedEvent, state: LedgerState) throws {
        if e.appendedByLedger, case .downloadCancelled(_, .transactionFinished) = e.event.body {
        } else if e.appendedByLedger, case .personalDataErased = e.event.body {
        } else if e.appendedByLedger {
            try problem(.rules, e.seq, "marked as appended by the ledger, but is not an automatic cancellation or an erasure")
        } else if case .personalDataErased = e.event.body {
            try problem(.rules, e.seq, "an erasure not marked as appended by the ledger: only forget records one")
        }
        if case .transactionFinished = e.event.body, Reducer.plan(state, e.event).count > 1 {
            try problem(.rules, e.seq, "this finish left downloads running without the cancellations the ledger appends", rule: nil)
        }
    }

    /// What the reducer made of an event, against what was recorded.
    private mutating func checkAfter(_ e: RecordedEvent, _ replayed: Reducer.Replayed, state: LedgerState) throws {
        for found in RecordedDecision.problems(e, replayed, state: state) { try problem(.rules, e.seq, found.message, rule: found.rule) }
        if case .outcome(let outcome) = replayed, let rule = outcome.anomaly, !e.event.type.isCommand { report.anomalies.append((e.seq, rule)) }
    }

    /// A snapshot against the state the log gives at its seq.
    private mutating func checkSnapshot(
        _ snapshot: (seq: Int64, manifest: [UInt8]), state: LedgerState, _ cache: SnapshotPageCache, _ page: Statement
    ) throws {
        report.snapshotsChecked += 1
        let decoded: LedgerState
        do {
            decoded = try SnapshotCodec.decode(manifest: snapshot.manifest, cache: cache) { address in try page.fetchBlob(key: address) }
        } catch {
            try problem(.snapshot, snapshot.seq, "the snapshot at seq \(snapshot.seq) does not load (\(error)); time travel replays the log instead")
            return
        }
        if decoded != state {
            try problem(
                .snapshot, snapshot.seq,
                "the snapshot at seq \(snapshot.seq) differs from the log replayed to it, though bound to its chain: the file was altered by someone who could recompute the binding (a plain chain: anyone), or this is a bug (please report it); time travel from it gives a wrong state"
            )
        }
    }

    private func rows(_ n: Int) -> String { n == 1 ? "1 row" : "\(n) rows" }

    /// What of the schema could make queries read something other than the rows compared below,
    /// found before the log is read and reported after it (``reportSchema()``), so a problem of
    /// the log still comes first: a view of the projections that is not the one migration 0012
    /// made (one that knows `verify`'s connection from a report's could show each something
    /// else), a table of the ledger's that is now a view or another object, a table whose SQL
    /// holds `COLLATE` or `GENERATED` (a column made case-blind merges two products or two users
    /// in a report, every value left as it was; no migration writes either), and any trigger (the
    /// ledger makes none; one can change what is written, or keep an erased value elsewhere).
    /// Not flagged: a table or index that is missing or laid out as an earlier version of a
    /// migration made it (some were changed before they shipped, and the code reads both), and
    /// an index or view an analyst added, which changes no result. Sets ``schemaComplete``.
    private mutating func findSchemaChanges(_ db: Database) throws {
        let applied = try Set(String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
        let (expected, expectedColumns) = try DatabaseQueue().write { memory in
            for migration in embeddedMigrations where applied.contains(migration.name) { try memory.execute(sql: migration.sql) }
            return (try Self.schema(memory), try Self.columns(memory))
        }
        let found = try Self.schema(db)
        let foundColumns = try Self.columns(db)
        // Declared types (a column's affinity: how its values compare) and generated columns, as
        // SQLite itself reads them, for the columns a table has in both.
        for (table, columns) in foundColumns.sorted(by: { $0.key < $1.key }) {
            guard let made = expectedColumns[table] else { continue }
            for (name, column) in columns.sorted(by: { $0.key < $1.key }) where made[name] != nil && made[name] != column {
                schemaChanges.append(
                    "the table \(table) declares its column \(name) otherwise than the migrations made it (\(column.type)\(column.hidden == 0 ? "" : ", generated")): changed with sqlite3, so queries may compare or read its values otherwise than verify does"
                )
            }
        }
        for object in found.values.sorted(by: { $0.name < $1.name }) {
            if object.type == "trigger" {
                schemaChanges.append(
                    "the file holds a trigger, \(object.name), which the ledger never makes: it was added with sqlite3 and can change what is written (DROP TRIGGER \(object.name))"
                )
            } else if object.type == "table", let sql = object.sql?.uppercased(), sql.contains("COLLATE") || sql.contains("GENERATED") {
                // Anywhere in its text, comments and literals too: no migration writes either word,
                // and SQLite reads the SQL, not the comments a text comparison would drop.
                schemaChanges.append(
                    "the table \(object.name) declares a collation or a generated column, which no migration makes: changed with sqlite3, so queries may compare or read its values otherwise than verify does"
                )
            }
        }
        for (key, object) in expected.sorted(by: { $0.key.name < $1.key.name }) {
            switch object.type {
            case "table":
                if found[key] == nil, let other = found.values.first(where: { $0.name == object.name && $0.type != "table" }) {
                    schemaChanges.append(
                        "\(object.name) is a \(other.type), where the migrations made a table: changed with sqlite3, so what queries read of it may not be what verify compares")
                }
            case "view" where applied.contains("0012_compact_projections"):
                guard let stored = found[key] else {
                    schemaChanges.append("the view \(object.name), which the migrations make, is missing: dropped with sqlite3 (run rebuild to make it again)")
                    schemaComplete = false
                    continue
                }
                if stored != object {
                    schemaChanges.append(
                        "the view \(object.name) is not the one the migrations made: changed with sqlite3, so what queries and reports read through it may not be what verify compares (run rebuild to make it again)"
                    )
                }
            default: break
            }
        }
    }

    /// The schema changes found, as problems.
    private mutating func reportSchema() throws {
        for message in schemaChanges { try problem(.schema, nil, message) }
    }

    /// Every schema object of `db` but SQLite's own, by type and name, with its SQL exactly as
    /// stored (a view is compared byte for byte with the statement that made it: a text made
    /// comparable by dropping comments let `"--"/*` hide a rewritten view from the check).
    private static func schema(_ db: Database) throws -> [SchemaKey: SchemaObject] {
        var objects: [SchemaKey: SchemaObject] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\'") {
            let object = SchemaObject(type: row["type"], name: row["name"], sql: row["sql"])
            objects[SchemaKey(type: object.type, name: object.name)] = object
        }
        return objects
    }

    /// Each table's columns as SQLite reads them (`PRAGMA table_xinfo`): the declared type, in
    /// capitals, and whether it is generated.
    private static func columns(_ db: Database) throws -> [String: [String: ColumnDeclaration]] {
        var tables: [String: [String: ColumnDeclaration]] = [:]
        for table in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\'") {
            for row in try Row.fetchAll(db, sql: "SELECT name, type, hidden FROM pragma_table_xinfo(?)", arguments: [table]) {
                tables[table, default: [:]][row["name"]] = ColumnDeclaration(type: (row["type"] as String? ?? "").uppercased(), hidden: row["hidden"])
            }
        }
        return tables
    }

    private struct ColumnDeclaration: Equatable {
        var type: String
        var hidden: Int
    }

    private struct SchemaKey: Hashable {
        var type: String
        var name: String
    }

    private struct SchemaObject: Equatable {
        var type: String
        var name: String
        var sql: String?
    }

    /// No row of a compact table holds a code above every code `projection_texts` has: the view
    /// shows such a column as NULL, as it shows an absent value, so the rows compare equal, but
    /// the next text a write makes takes that code and would show in the row.
    private mutating func checkCodes(_ db: Database) throws {
        // With the schema changed, the tables may not even read (reported with the schema).
        guard try Migrations.applied("0012_compact_projections", db), schemaChanges.isEmpty else { return }
        let texts = try Int64.fetchOne(db, sql: "SELECT coalesce(max(code), 0) FROM projection_texts") ?? 0
        for table in Projector.Table.all {
            guard let compact = table.compact else { continue }
            let columns = compact.coded.map { "coalesce(CAST(\(table.columns[$0]) AS INTEGER), 0)" }.joined(separator: ", ")
            let highest = try Int64.fetchOne(db, sql: "SELECT coalesce(max(max(\(columns))), 0) FROM \(table.stored)") ?? 0
            if highest > texts {
                try problem(
                    .projections, nil,
                    "table \(table.stored) holds the code \(highest), which no text of projection_texts has (edited with sqlite3): the text a later write makes would take that code and show in its row"
                )
            }
        }
    }

    /// Builds each table's rows afresh from the replayed state and compares them with the
    /// stored ones, value by value, table by table.
    private mutating func checkProjections(_ db: Database, state: LedgerState, history: Projector.HistoryCollector) throws {
        let (projectedSeq, current) = try Projector.status(db)
        if !current {
            try problem(
                .projections, nil,
                "the projections were written by another version (\(try String.fetchOne(db, sql: "SELECT value FROM ledger_info WHERE key = 'projection_stamp'") ?? "none")); run rebuild"
            )
            // Another version's tables may lack columns this one writes: nothing to compare.
            return
        }
        if projectedSeq != state.seq {
            try problem(.projections, projectedSeq, "the projections reflect seq \(projectedSeq), the log ends at \(state.seq); run rebuild")
        }
        // Without a view, the rows it gives cannot be compared.
        guard schemaComplete else { return }
        try checkCodes(db)
        let omitted = try Migrations.applied("0004_history_destination", db)
        for builder in Projector.rowBuilders(state: state, history: history, ordered: false, latestDestinationOmitted: omitted) {
            let table = builder.table, expected = builder.build()
            let stored: Int, keys: [[ColumnValue]]
            do {
                (stored, keys) = try Projector.differences(table, expected: expected, db)
            } catch  where !schemaChanges.isEmpty {
                // An object put in with sqlite3 may not even read (a view calling a function
                // the connection does not trust): named, not a stop of the whole check.
                try problem(.projections, nil, "table \(table.name) could not be read (\(LedgerFile.wrap(error, "reading it").message)); its schema was changed: below")
                continue
            }
            if let first = keys.first {
                let key = first.map(\.description).joined(separator: ", ")
                try problem(
                    .projections, nil,
                    "table \(table.name) differs from a fresh rebuild (\(rows(stored)) stored, \(expected.count) expected, \(keys.count) differing; first difference at \(key)); run rebuild"
                )
            }
        }
    }
}

/// What the reducer made of a stored event against what was recorded of it: the rules' half of
/// `verify`, which `ship` applies too, so a store never takes a ledger `verify` refuses.
enum RecordedDecision {
    /// Each way `e` (stored) disagrees with the rules replayed over the state before it; none for
    /// an event the rules decide as recorded (an anomaly recorded as that anomaly included).
    /// Whether `e` disagrees with the rules in any way ``problems(_:_:state:)`` names: no message
    /// built, nothing allocated, for the common case of an event decided as recorded (`ship`).
    static func agrees(_ e: RecordedEvent, _ replayed: Reducer.Replayed, state: LedgerState) -> Bool {
        guard case .outcome(let outcome) = replayed, state.streamVersion(of: e.event.body) == e.version else { return false }
        switch outcome {
        case .ignored: return false
        case .anomaly(let rule), .flagged(let rule): return !e.event.type.isCommand && e.anomaly == rule
        case .applied, .unchanged: return e.anomaly == nil || flagStandsErased(e)
        }
    }

    /// Whether `e` was recorded `signedFieldsDiffer` and its signed transaction has since been
    /// erased with its user: the rules can no longer compare what it stated, and the flag
    /// recorded when they could stands.
    static func flagStandsErased(_ e: RecordedEvent) -> Bool {
        guard e.anomaly == .signedFieldsDiffer, let jws = e.event.body.signedTransaction else { return false }
        return SignedTransaction.isErasedMarker(jws)
    }

    static func problems(_ e: RecordedEvent, _ replayed: Reducer.Replayed, state: LedgerState) -> [(message: String, rule: Rule?)] {
        var found: [(message: String, rule: Rule?)] = []
        let version = state.streamVersion(of: e.event.body)
        if version != e.version {
            found.append(("stored as version \(e.version) of stream \(e.stream), but it is version \(version)", nil))
        }
        guard case .outcome(let outcome) = replayed else {
            if case .refused(let error) = replayed { found.append(("this event does not fit the ledger: \(error.message)", nil)) }
            return found
        }
        switch outcome {
        case .ignored:
            found.append(("an identical repeat of a command was stored; repeats store nothing", nil))
        case .anomaly(let rule) where e.event.type.isCommand:
            found.append(("this \(e.event.type.name) breaks \(rule.name) and would be rejected today (written by an older app?)", rule))
        case .anomaly(let rule), .flagged(let rule):
            if e.anomaly != rule {
                found.append(("recorded \(e.anomaly.map { "as anomaly \($0.name)" } ?? "as valid"), but the rules flag it \(rule.name)", rule))
            }
        case .applied, .unchanged:
            if let recorded = e.anomaly, !flagStandsErased(e) {
                found.append(("recorded as anomaly \(recorded.name), but the rules accept it", recorded))
            }
        }
        return found
    }
}
