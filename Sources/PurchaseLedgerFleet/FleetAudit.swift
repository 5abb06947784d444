import PostgresNIO
public import PurchaseLedger

/// What ``FleetStore/audit(progress:problem:)`` checked, and how many problems it found.
public struct FleetAudit: Sendable, Hashable {
    /// Ledgers audited.
    public var ledgers = 0
    /// Events read (every stored event of every ledger).
    public var events = 0
    /// Ledgers whose chain was recomputed from their first event to their last.
    public var chainsRecomputed = 0
    /// Ledgers whose links do not recompute from the first event as a plain chain: a keyed
    /// (HMAC) chain, which needs its key, or a first event altered. Their signed head is still
    /// checked against their last stored link.
    public var chainsNotRecomputable = 0
    /// Ledgers shipped before heads were signed (no key, no head): nothing vouches for them.
    public var unsignedLedgers = 0
    /// Ledgers whose projection rows were compared with a replay of their stored events (every
    /// ledger whose events run whole from seq 1 to its head).
    public var projectionsCompared = 0
    /// Apple's records (statements and notifications) whose JWS verified as Apple's with the
    /// roots and whose columns are what it states.
    public var appleRecords = 0
    /// Problems found (each reported through `problem`).
    public var problems = 0
    /// Each ledger's head as the store holds it (in ledger-id order): what to keep as the next
    /// audit's witness.
    public var heads: [FleetWitness.Head] = []
    /// The store's identity for a witness: a SHA-256 of its own secret (migration 0007), which
    /// only the owner can read; nil on a store without one.
    public var store: String?
}

/// One problem the audit found in one ledger of the store.
public struct FleetAuditProblem: Sendable, Hashable, CustomStringConvertible {
    /// The ledger it is in; empty for a problem of the store itself (a table shadowed or
    /// filtered for some roles).
    public var ledgerID: String
    /// The first seq concerned, when one is.
    public var seq: Int64?
    /// What is wrong.
    public var message: String

    public var description: String {
        ledgerID.isEmpty ? "the store: \(message)" : "ledger \(ledgerID)\(seq.map { ", seq \($0)" } ?? ""): \(message)"
    }
}

extension FleetStore {
    /// Audits every ledger of the store from what it holds (`purchase-ledger verify
    /// postgres://...`): the head each ledger last shipped, signed by its identity key, verifies
    /// with the key the store holds and names the store's seq and link; a key-derived id is its
    /// key's; the ledger's events run from seq 1 to that head, none missing and none past it (an
    /// event the shipping credential planted); the hash chain recomputed from the first event gives
    /// every stored link and the head's (for a plain chain; a keyed one needs its key); each
    /// ledger's projection rows equal those a replay of its events up to its head gives
    /// (``DetachedReplay``), table by table and column by column; and no projection row holds a
    /// user id the store erased. Problems go to `problem` as they are found: those of the heads
    /// and events one ledger after another in ledger-id order, then those of the rows.
    /// `progress` counts the ledgers, then the tables, against their sum.
    ///
    /// What it does not check: the personal values in the rows (the events hold them as refs
    /// and salted commitments whose salts stay on the device): each personal column is compared
    /// only as set or empty, and `transactions.user_id` only by which transactions share a user,
    /// so a user id renamed in every row of that user passes; and anything about a ledger no
    /// device ever shipped.
    ///
    /// ```swift
    /// let audit = try await fleet.audit { problem in print(problem) }
    /// print(audit.ledgers, "ledgers,", audit.problems, "problems")
    /// ```
    ///
    /// `witness`: the heads an earlier audit saw (``FleetWitness``): a ledger it names that is
    /// gone, whose head is behind it, or whose event at its seq has another link is a problem.
    /// The heads this audit saw are in the result's ``FleetAudit/heads``, to keep for the next.
    ///
    /// It reads one snapshot of the store (a read-only repeatable-read transaction), so a writer
    /// that changes rows while it runs, and changes them back, is seen before or after, never
    /// halfway; a table locked for over a minute ends it with an error rather than a hang.
    public func audit(
        witness: FleetWitness? = nil, appleVerifier: AppleSignatureVerifier = AppleSignatureVerifier(),
        progress: (@Sendable (_ done: Int, _ total: Int) -> Void)? = nil, problem: @escaping @Sendable (FleetAuditProblem) -> Void
    ) async throws -> FleetAudit {
        try await run {
            try await transaction {
                try await connection.query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", logger: logger)
                try await connection.query("SET LOCAL lock_timeout = '60s'", logger: logger)
                return try await auditSnapshot(witness: witness, appleVerifier: appleVerifier, progress: progress, problem: problem)
            }
        }
    }

    private func auditSnapshot(
        witness: FleetWitness?, appleVerifier: AppleSignatureVerifier, progress: (@Sendable (_ done: Int, _ total: Int) -> Void)?,
        problem: @escaping @Sendable (FleetAuditProblem) -> Void
    ) async throws -> FleetAudit {
        struct Head {
            var id: String
            var lastSeq: Int64
            var lastLink: [UInt8]
            var key: [UInt8]?
            var statement: String?
            /// The chain's mode as the ledger shipped it: true plain, false keyed, nil not recorded.
            var plainChain: Bool?
            /// `ledgers.rows_version`: this version's ships write ``FleetStore/rowsVersion``.
            var rowsVersion: Int
        }
        let heads = try await fetchRows(
            "SELECT ledger_id::text AS id, last_seq, last_link, public_key, head_statement, chain, rows_version FROM ledgers ORDER BY ledger_id"
        ).map { row in
            Head(
                id: row.string("id") ?? "", lastSeq: Int64(row.int("last_seq") ?? 0), lastLink: row.bytes("last_link") ?? [],
                key: row.bytes("public_key"), statement: row.string("head_statement"),
                plainChain: row.string("chain").map { $0 == "sha256" }, rowsVersion: row.int("rows_version") ?? -1)
        }
        let tables = try await run {
            let types = try await columnTypes(of: Projector.Table.all.map(\.name))
            return try Projector.Table.all.map { try AuditTable($0, types: types[$0.name] ?? [:]) }
        }
        var audit = FleetAudit()
        audit.ledgers = heads.count
        audit.heads = heads.map { FleetWitness.Head(ledger: $0.id, seq: $0.lastSeq, link: Hex.encode($0.lastLink)) }
        audit.store = try await fetchRows(
            "SELECT encode(sha256('purchase-ledger fleet witness v1'::bytea || secret), 'hex') AS store FROM public.fleet_secret WHERE id = 1"
        ).first?.string("store")
        let report = { (p: FleetAuditProblem) in
            audit.problems += 1
            problem(p)
        }
        // Every role must read the tables this audit reads: no rule or trigger on them, each an
        // ordinary table in `public`, and no relation named like one in another schema (a schema
        // named after a role comes first in PostgreSQL's default path; another session's
        // temporary schema reaches no one else). Row-level security is the owner's to set
        // (docs/fleet.md scopes the reporting role with it): a role sees what its policies allow,
        // which the audit does not judge; forced on the owner, it would hide rows from this
        // audit too, and the rows comparison would say which.
        for row in try await fetchRows(
            """
            SELECT c.relname::text AS name, n.nspname::text AS schema, c.relkind::text AS kind,
                (SELECT count(*) FROM pg_rewrite r WHERE r.ev_class = c.oid AND r.rulename <> '_RETURN') AS rules,
                (SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = c.oid AND NOT t.tgisinternal) AS triggers
            FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relname::text = ANY(\(FleetStore.fleetTables)::text[])
                AND n.nspname NOT IN ('pg_catalog', 'information_schema')
                AND n.nspname !~ '^pg_(toast_)?temp_'
            ORDER BY 2, 1
            """)
        {
            let name = row.string("name") ?? "", schema = row.string("schema") ?? "", kind = row.string("kind") ?? "?"
            let rules = row.int("rules") ?? 0, triggers = row.int("triggers") ?? 0
            var found: [String] = []
            if schema != "public" {
                found.append("a relation named like the fleet's \(name) in schema \(schema): a role whose search path reaches it first reads it instead")
            } else {
                if kind != "r" && kind != "p" { found.append("public.\(name) is not an ordinary table (relkind \(kind))") }
                if rules > 0 { found.append("public.\(name) has \(rules) rewrite rule(s): a read or write of it does something else") }
                if triggers > 0 { found.append("public.\(name) has \(triggers) trigger(s), which the fleet never makes") }
            }
            for message in found { report(FleetAuditProblem(ledgerID: "", seq: nil, message: message)) }
        }
        // The ledgers' rows, and whether each vouches for its head.
        for head in heads {
            guard let keyBytes = head.key else {
                audit.unsignedLedgers += 1
                if LedgerIdentity.hasDerivedForm(head.id) {
                    report(FleetAuditProblem(ledgerID: head.id, seq: nil, message: "a key-derived id held with no key: its key was removed from the store"))
                } else if head.lastSeq > 0 {
                    // Its events and rows may agree with each other and still be made up: a row
                    // and a log written with the shipping credential look just like this.
                    report(
                        FleetAuditProblem(
                            ledgerID: head.id, seq: nil,
                            message:
                                "no signature vouches for it (no identity key, no signed head): shipped before heads were signed, or written with the shipping credential; ship it again from its device, which signs its head"
                        ))
                }
                continue
            }
            guard let key = try? CheckpointPublicKey(rawRepresentation: keyBytes) else {
                report(FleetAuditProblem(ledgerID: head.id, seq: nil, message: "the identity key the store holds is not an Ed25519 public key"))
                continue
            }
            if LedgerIdentity.hasDerivedForm(head.id) && LedgerIdentity.id(derivedFrom: key) != head.id {
                report(
                    FleetAuditProblem(
                        ledgerID: head.id, seq: nil,
                        message: "held under a key that does not derive its id: registered by someone who is not that ledger (an id squatted with the shipping credential?)"))
            }
            guard let text = head.statement else {
                report(FleetAuditProblem(ledgerID: head.id, seq: nil, message: "no signed head, though the store holds the ledger's key: the head statement was removed"))
                continue
            }
            guard let statement = try? Checkpoint(json: text), statement.isSigned(by: key), statement.ledgerID == head.id else {
                report(FleetAuditProblem(ledgerID: head.id, seq: nil, message: "the signed head does not verify with the ledger's key: altered in the store"))
                continue
            }
            if statement.seq != head.lastSeq || statement.link != head.lastLink {
                report(
                    FleetAuditProblem(
                        ledgerID: head.id, seq: head.lastSeq,
                        message: "the store's head (seq \(head.lastSeq)) is not the one the ledger signed (seq \(statement.seq)): altered in the store"))
            }
        }
        // Every event, in ledger and seq order, in one pass: continuity, nothing past the head,
        // and the chain recomputed.
        let byID = Dictionary(heads.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        /// One ledger's walk through its events.
        struct Walk {
            var id: String
            var expected: Int64 = 1
            var previous: [UInt8]?
            /// The chain is no longer followed (a problem reported, or not recomputable).
            var stopped = false
            var past: Int64 = 0
            var firstPast: Int64?
            var lastLink: [UInt8] = []
            /// Its events are replayed up to its head (none missing or undecodable so far).
            var replaying = true
        }
        var current: Walk?
        // The witness's heads still to be found among the events (ledger -> seq, link).
        var witnessed: [String: (seq: Int64, link: String)] = [:]
        var witness = witness
        if let other = witness?.store, other != audit.store {
            report(FleetAuditProblem(ledgerID: "", seq: nil, message: "the witness is of another fleet store (its store digest differs): nothing was compared with it"))
            witness = nil
        }
        for head in witness?.heads ?? [] {
            guard let held = byID[head.ledger] else {
                report(
                    FleetAuditProblem(
                        ledgerID: head.ledger, seq: nil,
                        message: "the witness of \(witness!.at) saw it at seq \(head.seq); the store no longer holds it: deleted"))
                continue
            }
            if held.lastSeq < head.seq {
                report(
                    FleetAuditProblem(
                        ledgerID: head.ledger, seq: held.lastSeq,
                        message: "its head went back: seq \(held.lastSeq) in the store, seq \(head.seq) when the witness of \(witness!.at) saw it (an earlier state put back)"))
            } else if head.seq > 0 {
                witnessed[head.ledger] = (head.seq, head.link)
            }
        }
        /// The current ledger's replay. Not in `Walk`, which is copied per event: a state shared
        /// with a copy is copied whole at its next change.
        var replay = DetachedReplay()
        var done = 0
        var withEvents = Set<String>()
        /// Per ledger, the digest of each table's rows (in `tables`' order) a replay gives.
        var expectedRows: [String: [[UInt8]]] = [:]
        // The users the store erased, by ledger: their rows must hold exactly their markers.
        var erasedRefs: [String: Set<Int64>] = [:]
        for row in try await fetchRows("SELECT ledger_id::text AS id, user_ref FROM erased_users") {
            if let id = row.string("id"), let ref = row.int("user_ref") { erasedRefs[id, default: []].insert(Int64(ref)) }
        }
        func digests(_ replay: DetachedReplay, erased: Set<Int64> = []) -> [[UInt8]] {
            let projections = replay.rows()
            return tables.map { table in
                var rows = projections.first { $0.table.name == table.table.name }?.rows ?? []
                if table.table.name == Projector.Table.transactions.name { rows = FleetStore.withCatalog(rows, of: projections) }
                return AuditTable.digest(rows.map { table.canonical(replayed: $0, erased: erased) })
            }
        }
        let nothing = digests(DetachedReplay())
        func finish() {
            guard let c = current, let head = byID[c.id] else { return }
            if c.replaying, replay.seq == head.lastSeq { expectedRows[c.id] = digests(replay, erased: erasedRefs[c.id] ?? []) }
            if c.expected - 1 < head.lastSeq {
                report(FleetAuditProblem(ledgerID: c.id, seq: c.expected, message: "events \(c.expected)...\(head.lastSeq) of its shipped head are missing"))
            }
            if c.past > 0 {
                // Planted with the shipping credential, or the ledger's own after its head was moved
                // back: only the ledger can tell (its next ship keeps its own and names the rest).
                report(
                    FleetAuditProblem(
                        ledgerID: c.id, seq: c.firstPast,
                        message:
                            "\(c.past) event\(c.past == 1 ? "" : "s") past the signed head (seq \(head.lastSeq)), which no signature covers: planted, or the head was moved back; the ledger's next ship keeps its own and names the others"
                    ))
            }
            // The last stored link is the signed head's, whatever the chain's mode.
            if head.lastSeq > 0, c.expected - 1 == head.lastSeq, c.lastLink != head.lastLink {
                report(FleetAuditProblem(ledgerID: c.id, seq: head.lastSeq, message: "the last stored link is not the head's link"))
            }
            if c.previous != nil && !c.stopped { audit.chainsRecomputed += 1 }
            done += 1
            progress?(done, heads.count + tables.count)
        }
        let plain = HashChain(key: nil)
        /// One stored event of ledger `id`: continuity, the head, the witness, the replay and the chain.
        func visit(_ e: UploadedFrame, of id: String) {
            let seq = e.seq
            audit.events += 1
            guard var c = current, let head = byID[id] else { return }
            defer { current = c }
            if seq > head.lastSeq {
                c.past += 1
                if c.firstPast == nil { c.firstPast = seq }
                return
            }
            let stored = e.link
            c.lastLink = stored
            if let seen = witnessed[id], seen.seq == seq {
                if Hex.encode(stored) != seen.link {
                    report(
                        FleetAuditProblem(
                            ledgerID: id, seq: seq,
                            message: "its event \(seq) is not the one the witness of \(witness!.at) saw (another link): its history was rewritten"))
                }
                witnessed[id] = nil
            }
            if seq != c.expected {
                report(FleetAuditProblem(ledgerID: id, seq: c.expected, message: "the events jump from seq \(c.expected - 1) to \(seq)"))
                c.stopped = true
                c.replaying = false
            }
            c.expected = seq + 1
            guard c.replaying || !c.stopped else { return }
            if c.replaying {
                do {
                    try replay.apply(
                        seq: seq, type: e.type, at: e.at, recordedAt: e.recorded, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger,
                        version: e.version, payload: e.payload)
                } catch let error as LedgerError {
                    report(FleetAuditProblem(ledgerID: id, seq: seq, message: error.message))
                    c.replaying = false
                } catch {
                    report(FleetAuditProblem(ledgerID: id, seq: seq, message: "\(error)"))
                    c.replaying = false
                }
            }
            guard !c.stopped else { return }
            func linkAfter(_ previous: [UInt8]) -> [UInt8] {
                plain.link(
                    after: previous, seq: seq, type: e.type, anomaly: e.anomaly, appendedByLedger: e.appendedByLedger, at: e.at, recorded: e.recorded,
                    version: e.version, payload: e.payload)
            }
            if seq == 1 {
                // The chain starts from the ledger id, or (ledgers made before ids were bound) from zeros.
                let bound = linkAfter(HashChain.genesis(ledgerID: id))
                let zeros = linkAfter(HashChain.genesis)
                if bound == stored || zeros == stored {
                    c.previous = stored
                } else if head.plainChain == true {
                    // The ledger shipped as a plain chain: event 1 was altered in the store.
                    report(FleetAuditProblem(ledgerID: id, seq: 1, message: "the event does not hash to its stored link: altered in the store"))
                    c.stopped = true
                } else {
                    // A keyed chain (its key is not the store's), or (a ledger shipped before
                    // the store kept the chain's mode) event 1 altered.
                    audit.chainsNotRecomputable += 1
                    c.stopped = true
                }
                return
            }
            guard let previous = c.previous else { return }
            if linkAfter(previous) != stored {
                report(
                    FleetAuditProblem(
                        ledgerID: id, seq: seq, message: "the event does not hash to its stored link: altered in the store (its payload or its fields)"))
                c.stopped = true
            }
            c.previous = stored
        }
        try await run {
            try await forEachBlock("SELECT \(unescaped: StoredBlock.columns) FROM event_blocks e ORDER BY 1, 2") { block in
                let id = block.ledger
                if current?.id != id {
                    finish()
                    current = Walk(id: id)
                    replay = DetachedReplay()
                    withEvents.insert(id)
                    if byID[id] == nil {
                        // Events with no row: the ledger's row was deleted (the shipping role may
                        // delete rows), so nothing says how far it shipped or under which key.
                        report(FleetAuditProblem(ledgerID: id, seq: block.firstSeq, message: "the store holds events of this ledger but no row for it: its row was deleted"))
                    }
                }
                guard block.lastSeq < Int64.max - Int64(FleetBlock.maxEvents) else {
                    report(
                        FleetAuditProblem(
                            ledgerID: id, seq: block.firstSeq, message: "a block of events \(block.firstSeq)...\(block.lastSeq), past any seq a ledger reaches: planted"))
                    return
                }
                if let c = current, block.firstSeq < c.expected, c.expected > 1 {
                    // Events held twice: ship never writes a block inside another.
                    report(
                        FleetAuditProblem(
                            ledgerID: id, seq: block.firstSeq,
                            message:
                                "the block of events \(block.firstSeq)...\(block.lastSeq) overlaps the events before it (held twice: one of the blocks was planted; the ledger's next ship names the ones that are not its own)"
                        ))
                    return
                }
                let events: [UploadedFrame]
                do throws(LedgerError) {
                    events = try block.events()
                } catch {
                    // A block that does not decode: its events are counted as present (a gap is
                    // not reported twice), but nothing past it is replayed or chained.
                    let count = max(0, min(block.lastSeq - block.firstSeq + 1, Int64(FleetBlock.maxEvents)))
                    audit.events += Int(count)
                    guard var c = current, let head = byID[id] else { return }
                    if block.firstSeq > head.lastSeq {
                        c.past += count
                        if c.firstPast == nil { c.firstPast = block.firstSeq }
                        current = c
                        return
                    }
                    if c.replaying || !c.stopped {
                        report(FleetAuditProblem(ledgerID: id, seq: block.firstSeq, message: "\(error.message): altered in the store"))
                    }
                    if block.firstSeq != c.expected && !c.stopped {
                        report(FleetAuditProblem(ledgerID: id, seq: c.expected, message: "the events jump from seq \(c.expected - 1) to \(block.firstSeq)"))
                    }
                    c.stopped = true
                    c.replaying = false
                    c.expected = block.lastSeq + 1
                    // Its last link as stored (compared with the signed head's at the end).
                    if block.links.count >= FleetBlock.linkSize { c.lastLink = Array(block.links.suffix(FleetBlock.linkSize)) }
                    current = c
                    return
                }
                for e in events { visit(e, of: id) }
            }
        }
        finish()
        // Ledgers with a head and no event at all.
        for head in heads where !withEvents.contains(head.id) {
            if head.lastSeq > 0 {
                report(FleetAuditProblem(ledgerID: head.id, seq: 1, message: "its shipped head is seq \(head.lastSeq), and the store holds none of its events"))
            } else {
                expectedRows[head.id] = nothing
            }
        }
        // Rows of another layout: migration 0003's approximations (1), or a value no version
        // writes. Their rows are compared all the same, below.
        for head in heads where head.rowsVersion != Int(FleetStore.rowsVersion) {
            let why = head.rowsVersion == 1 ? "migration 0003's approximations" : "a layout no version of the shipper writes"
            report(
                FleetAuditProblem(
                    ledgerID: head.id, seq: nil,
                    message: "ledgers.rows_version is \(head.rowsVersion), not \(FleetStore.rowsVersion) (\(why)): ship it again from its device"))
        }
        // Each table's rows, ledger by ledger, against the replays' digests.
        audit.projectionsCompared = expectedRows.count
        var differing: [(ledger: String, table: Int)] = []
        var unknown = Set<String>()
        for (t, table) in tables.enumerated() {
            var seen = Set<String>()
            var groupID: String?
            var groupErased: Set<Int64> = []
            var rows: [AuditTable.Row] = []
            func close() {
                guard let id = groupID else { return }
                seen.insert(id)
                if let expected = expectedRows[id], AuditTable.digest(rows) != expected[t] { differing.append((id, t)) }
                if byID[id] == nil, unknown.insert(id).inserted {
                    report(FleetAuditProblem(ledgerID: id, seq: nil, message: "the store holds \(table.table.name) rows of this ledger but no row for it in ledgers"))
                }
                rows.removeAll(keepingCapacity: true)
            }
            try await run {
                for try await row in try await connection.query(PostgresQuery(unsafeSQL: table.selectAll), logger: logger) {
                    let id = try row.first.map { try $0.decode(String.self) } ?? ""
                    if groupID != id {
                        close()
                        groupID = id
                        groupErased = erasedRefs[id] ?? []
                    }
                    rows.append(table.canonical(stored: row, erased: groupErased))
                }
            }
            close()
            progress?(heads.count + t + 1, heads.count + tables.count)
            for (id, expected) in expectedRows where !seen.contains(id) && expected[t] != nothing[t] { differing.append((id, t)) }
        }
        differing.sort { ($0.ledger, $0.table) < ($1.ledger, $1.table) }
        for (n, (ledger, t)) in differing.enumerated() {
            let message =
                n < 100
                ? try await run {
                    try await projectionDifference(ledger: ledger, head: byID[ledger]?.lastSeq ?? 0, table: tables[t], erased: erasedRefs[ledger] ?? [])
                }
                : "\(tables[t].table.name) rows differ from a replay of the ledger's events: altered in the store"
            report(FleetAuditProblem(ledgerID: ledger, seq: nil, message: message))
        }
        // No projection row holds a user id the store erased (the owner's rights: the digests).
        let unerased = try await fetchRows(
            """
            SELECT t.ledger_id::text AS id, count(*) AS n FROM transactions t
            WHERE t.user_id IS NOT NULL AND erased_subject_digest(t.user_id) IN (SELECT digest FROM erased_subjects)
            GROUP BY 1 ORDER BY 1
            """)
        for row in unerased {
            report(
                FleetAuditProblem(
                    ledgerID: row.string("id") ?? "", seq: nil,
                    message: "\(row.int("n") ?? 0) transaction row(s) hold a user id the store erased: shipped by a client that does not mask; run forget again"))
        }
        for (id, seen) in witnessed.sorted(by: { $0.key < $1.key }) {
            report(FleetAuditProblem(ledgerID: id, seq: seen.seq, message: "its event \(seen.seq), which the witness of \(witness!.at) saw, is missing"))
        }
        // Apple's record: each row is the JWS it keeps, Apple's, and its columns are what it states.
        audit.appleRecords = try await auditAppleRecords(verifier: appleVerifier) { report($0) }
        return audit
    }
}
