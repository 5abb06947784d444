import Foundation
import GRDB

/// One stored event as a fleet store receives it: the event, its binary payload (binary payload
/// v1, docs/format.md) and its full hash chain link.
package struct ChainedEvent: Sendable {
    package var event: RecordedEvent
    package var payload: [UInt8]
    package var link: [UInt8]
}

/// What a ledger sends to a fleet store: the events after what the store already holds, and the
/// projection rows of the state after the last of them, from the same reducer and row layout as
/// the ledger's own projection tables.
package struct Shipment: Sendable {
    package var events: [ChainedEvent]
    package var lastSeq: Int64
    package var lastLink: [UInt8]
    package var projections: [(table: Projector.Table, rows: [[ColumnValue]])]
    /// What each signed transaction's signature says, checked here from the signed data itself
    /// (the file's own `transaction_evidence` is never read: a device's claim is not trusted),
    /// with the headers of their chains; and the transactions whose signature `forget` erased on
    /// the device (the store keeps the row it holds for them).
    package var evidence: [EvidenceRow] = []
    package var signingHeaders: [[UInt8]: String] = [:]
    package var erasedSignatures: [String] = []
    /// The personal values the events introduce (all of the ledger's when ``replacesValues``),
    /// but those of users the store erased; and the refs the events' erasures remove.
    package var values: [PersonalValueRow] = []
    package var replacesValues = false
    package var erasedValueRefs: [Int64] = []

    /// The chain link before the first event: what a store holds for a ledger it has no event of.
    package static var genesis: [UInt8] { HashChain.genesis }
}

extension Shipment {
    /// Leaves out its first `count` events, which the store holds already (the ledger's own,
    /// past a head that was moved back), and the personal values they introduce, which the store
    /// holds with them (unless this shipment replaces all of the ledger's values).
    package mutating func dropHeldEvents(_ count: Int) {
        guard count > 0 else { return }
        if !replacesValues {
            var held = Set<Int64>()
            for chained in events.prefix(count) {
                for (ref, _) in PayloadCodec.introductions(in: chained.payload) { held.insert(ref) }
            }
            values.removeAll { held.contains($0.ref) }
        }
        events.removeFirst(count)
    }

    /// The shipment of `events`, ending at `lastSeq` / `lastLink`, whose replay left `state` and
    /// `history`: the projection rows of that state, those of the transactions of `erasedUsers`
    /// (user id -> its erased marker) masked, and each signed transaction's evidence from its
    /// latest signed event's check (signatures checked on every core), with its chain's header.
    init(
        events: [ChainedEvent], lastSeq: Int64, lastLink: [UInt8], state: LedgerState, history: Projector.HistoryCollector,
        erasedUsers users: [String: String], checks: [EvidenceRows.Check], erasedSignatures: [String], headers: [[UInt8]: String]
    ) {
        var projections = Projector.rows(state: state, history: history)
        if !users.isEmpty {
            var transactions = Set<String>()
            var downloads = Set<String>()
            state.transactions.forEachUnordered { id, record in
                guard let user = record.user, users[user] != nil else { return }
                transactions.insert(id)
                downloads.formUnion(record.downloads)
            }
            projections = projections.map { table, rows in
                (table, ErasedRows.mask(rows, of: table, users: users, transactions: transactions, downloads: downloads))
            }
        }
        self.init(events: events, lastSeq: lastSeq, lastLink: lastLink, projections: projections)
        var latest: [String: EvidenceRow] = [:]
        var collector = EvidenceRows.Collector()
        for row in EvidenceRows.rows(checks) { collector.add(.row(row)) }
        for case (let t, .row(var row)) in collector.found {
            row.key = nil  // the store keeps no digest of an Apple transaction id
            latest[t] = row
        }
        evidence = latest.keys.sorted().map { latest[$0]! }
        self.erasedSignatures = Set(erasedSignatures).subtracting(latest.keys).sorted()
        for row in evidence { if let digest = row.header, let header = headers[digest] { signingHeaders[digest] = header } }
    }
}

extension Ledger {
    /// The user ids this ledger holds, by their refs: what a fleet store asks about before a ship
    /// (which of them it erased). Values of ledgers written before migration 0007 are inside
    /// their payloads, not here.
    package func userIDs() throws -> [Int64: String] {
        try read { db in
            guard try db.tableExists("personal_values") else { return [:] }
            var users: [Int64: String] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT ref, value FROM personal_values WHERE owner = ref") {
                users[row[0]] = String(decoding: row[1] as Data, as: UTF8.self)
            }
            return users
        }
    }

    /// Reads the whole log once, recomputing the hash chain from the first event and checking it
    /// against every stored link, and replays it with the reducer. Returns the events after
    /// `shipped` and the projection rows at the end.
    ///
    /// Throws ``LedgerError/Code/corruptData`` naming the seq of a block that does not decode or
    /// of the first event whose stored link differs from the recomputed one (a tampered file), and
    /// ``LedgerError/Code/chainMismatch`` when the store already holds `shipped` events with a
    /// different link after the last of them (this file's history was rewritten since it was
    /// shipped) or more events than this file has.
    ///
    /// `erasedUsers`: refs of user ids the fleet store erased from this ledger's rows (its
    /// `erased_users`); their rows are shipped with markers in place of their personal values,
    /// so a device that still holds the user does not bring it back.
    ///
    /// `allValues`: carry every personal value of the ledger (for a store that holds none of
    /// them yet), not only those of the events after `shipped`.
    package func shipment(after shipped: Int64, link shippedLink: [UInt8]?, erasedUsers: Set<Int64> = [], allValues: Bool = false) throws -> Shipment {
        try read { db in
            var replay = LogReplay(collectingHistory: true)
            var previous = try HashChain.genesis(db)
            var events: [ChainedEvent] = []
            var expected: Int64 = 1
            var frame = BinaryWriter(capacity: 256)
            var checks: [EvidenceRows.Check] = []
            var erasedSignatures: [String] = []
            let secret = try EvidenceRows.secret(db)
            try replay.run(
                db, integrity: true,
                before: { step, _ in
                    let e = step.event
                    guard e.seq == expected else {
                        throw LedgerError.corrupt("the log jumps from seq \(expected - 1) to \(e.seq)", seq: min(e.seq, expected))
                    }
                    expected += 1
                    FrameCodec.canonical(e, payload: step.payload, into: &frame)
                    let link = chain.link(after: previous, frame: frame.bytes)
                    guard step.link?.matches(link) == true else {
                        throw LedgerError.corrupt(HashChain.breakMessage(at: step), seq: e.seq)
                    }
                    previous = link
                    if e.seq == shipped, let shippedLink, shippedLink != link {
                        throw LedgerError(
                            .chainMismatch,
                            "the fleet store holds a different event \(e.seq) under this ledger id: this file's history was rewritten after it was shipped (or another copy of this file, which holds its identity key, shipped a different history first)",
                            seq: e.seq)
                    }
                    if e.seq > shipped {
                        events.append(ChainedEvent(event: e, payload: step.payload, link: link))
                    }
                    return true
                },
                after: { step, replayed, state in
                    // What verify refuses on the rules, the store never takes (the rest of a
                    // batch ships): an edited file whose links were recomputed passes the chain.
                    if !RecordedDecision.agrees(step.event, replayed, state: state), let found = RecordedDecision.problems(step.event, replayed, state: state).first {
                        throw LedgerError.corrupt(
                            "event \(step.event.seq) does not pass the rules as recorded (\(found.message)): the file was edited; `verify` reports it",
                            seq: step.event.seq)
                    }
                    if step.event.event.body.signedTransaction != nil, case .outcome(let outcome) = replayed {
                        switch EvidenceRows.pending(step.event, outcome: outcome, state: state, secret: secret) {
                        case .none: break
                        case .erased(let t): erasedSignatures.append(t)
                        case .check(let check): checks.append(check)
                        }
                    }
                    return true
                })
            let last = expected - 1
            if last < shipped {
                throw LedgerError(
                    .chainMismatch,
                    "the fleet store holds \(shipped) events under this ledger id, but the file has \(last): its history was cut or rolled back after it was shipped (an older copy of the file put back, or events removed)",
                    seq: last + 1)
            }
            // The user ids this file still holds for the refs the store erased.
            var users: [String: String] = [:]
            if !erasedUsers.isEmpty {
                let refs = erasedUsers.sorted()
                for row in try Row.fetchAll(
                    db, sql: "SELECT ref, value FROM personal_values WHERE owner = ref AND ref IN (\(refs.map(String.init).joined(separator: ", ")))")
                {
                    let ref: Int64 = row[0]
                    users[String(decoding: row[1] as Data, as: UTF8.self)] = PersonalValues.erased(UInt64(ref))
                }
            }
            let headers = try SigningHeaders.read(db).byDigest
            var shipment = Shipment(
                events: events, lastSeq: last, lastLink: previous, state: replay.state, history: replay.history!, erasedUsers: users, checks: checks,
                erasedSignatures: erasedSignatures, headers: headers)
            var refs = Set<Int64>()
            for chained in events {
                for (ref, _) in PayloadCodec.introductions(in: chained.payload) { refs.insert(ref) }
                if case .personalDataErased(let erased) = chained.event.event.body { shipment.erasedValueRefs += erased }
            }
            shipment.values = try PersonalValueRow.read(db, introducedBy: allValues ? nil : refs, excluding: erasedUsers)
            shipment.replacesValues = allValues
            // Every chain's header, for a store that rebuilds the file (pull).
            for (digest, header) in headers { shipment.signingHeaders[digest] = header }
            return shipment
        }
    }
}

/// A user's personal values in projection rows (the fleet's copies of the ledger's tables),
/// replaced by markers: by `forget` in a fleet store, and by every later ship of a device that
/// still holds the user.
package enum ErasedRows {
    /// The personal columns of each projection table. Not `downloads.url`: a registered download
    /// belongs to no user.
    package static let personalColumns: [String: [String]] = [
        "transactions": ["user_id", "revocation_reason", "original_transaction", "store_transaction_id", "error_message"],
        "downloads": ["content_url", "destination", "error_message"],
        "owned_content": ["destination"],
        "owned_content_history": ["destination"],
    ]

    /// What an erased value other than the user id reads as in a fleet store.
    package static let valueMarker = "[erased]"

    /// `rows` of `table` with the personal columns of the erased users' rows replaced: a
    /// transaction whose user is a key of `users` (its value: the user id's marker), and the
    /// downloads, owned content and history of those transactions.
    static func mask(
        _ rows: [[ColumnValue]], of table: Projector.Table, users: [String: String], transactions: Set<String>, downloads: Set<String>
    ) -> [[ColumnValue]] {
        guard let personal = personalColumns[table.name], !transactions.isEmpty else { return rows }
        let key: (String, Set<String>) =
            switch table.name {
            case "transactions", "owned_content": ("transaction_id", transactions)
            default: ("download_id", downloads)
            }
        guard let keyIndex = table.columns.firstIndex(of: key.0) else { return rows }
        let indexes = personal.compactMap { table.columns.firstIndex(of: $0) }
        let userIndex = table.columns.firstIndex(of: "user_id")
        return rows.map { row in
            guard let id = row[keyIndex].string, key.1.contains(id) else { return row }
            var masked = row
            for i in indexes where !row[i].isNull {
                if i == userIndex, let user = row[i].string {
                    masked[i] = (users[user] ?? valueMarker).columnValue
                } else {
                    masked[i] = valueMarker.columnValue
                }
            }
            return masked
        }
    }
}

/// Where a payload holds its user id, for an erasure in a fleet store.
package enum PayloadUser: Equatable {
    /// The ref of the user id in the ledger's personal_values.
    case ref(Int64)
    /// The user id itself, inside the chained payload (written before migration 0007).
    case inline
    /// No user id.
    case none

    /// The user field of a stored payload of `type` (``PayloadField``).
    package init(type: EventType, payload: [UInt8]) {
        let field: UInt64
        switch type {
        case .paymentQueued: field = PayloadField.Queued.user
        case .transactionPurchased, .transactionRestored: field = PayloadField.Purchase.user
        case .restoreStarted: field = PayloadField.RestoreStarted.user
        default:
            self = .none
            return
        }
        var found = PayloadUser.none
        payload.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            do throws(BinaryReader.Failure) {
                while !r.isAtEnd {
                    let (number, wire) = try r.key()
                    if number == field && wire == 0 {
                        found = .ref(Int64(truncatingIfNeeded: try r.varint()))
                    } else if number == field && wire == 2 {
                        found = .inline
                        try r.skip(wire: wire)
                    } else {
                        try r.skip(wire: wire)
                    }
                }
            } catch {}
        }
        self = found
    }
}
