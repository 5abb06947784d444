import Crypto

/// What an ingest service does with an upload (docs/ingest.md), on the events a fleet store holds
/// of the ledger: the checks that decide whether it is taken, and the shipment it stores then,
/// through the same path as `ship`.
package enum Ingest {
    /// What the store holds of a ledger before the upload.
    package struct Held: Sendable {
        /// Its events, seq 1 to the head, in order (with their full links).
        package var frames: [UploadedFrame]
        /// Its personal values (an erased user's are gone).
        package var values: [PersonalValueRow]
        /// Its signed transactions' headers.
        package var signingHeaders: [String]
        /// Whether its links recompute as a plain SHA-256 chain (nil: no event held yet).
        package var plainChain: Bool?
        /// Refs of user ids the store erased from this ledger.
        package var erasedUsers: Set<Int64>

        package init(frames: [UploadedFrame], values: [PersonalValueRow], signingHeaders: [String], plainChain: Bool?, erasedUsers: Set<Int64>) {
            self.frames = frames
            self.values = values
            self.signingHeaders = signingHeaders
            self.plainChain = plainChain
            self.erasedUsers = erasedUsers
        }

        package var seq: Int64 { frames.last?.seq ?? 0 }
    }

    /// What to store: the shipment (events after the held head, projections and evidence after
    /// them, the personal values new to the store, the refs the upload's erasure events remove,
    /// the signing headers), and whether the chain recomputes as a plain one.
    package struct Plan: Sendable {
        package var shipment: Shipment
        package var plainChain: Bool
    }

    /// Why an upload is refused: the HTTP status a service answers with, and the message.
    package struct Refusal: Error, Sendable {
        package enum Kind: Sendable {
            /// The upload forks from the held history (an event at a seq it holds differs).
            case fork
            /// The upload starts past the held head: events are missing between.
            case gap
            /// The events themselves are refused: a broken chain, the rules, a personal value
            /// that is not what its event committed to, a payload that does not decode.
            case refused
        }
        package var kind: Kind
        package var message: String
        package var seq: Int64?
    }

    /// Whether an upload that starts at seq 1 chains as a plain SHA-256 chain (from the ledger
    /// id's genesis, or zeros); nil when it starts later (the held row says).
    package static func startsPlainChain(_ upload: LedgerUpload) -> Bool? {
        guard let first = upload.frames.first, first.seq == 1 else { return nil }
        return isPlainChainStart(first, ledgerID: upload.ledgerID)
    }

    /// Whether `first` (event 1) hashes to its link as a plain chain from the ledger id's
    /// genesis, or from zeros (ledgers made before ids were bound): else its chain is keyed.
    package static func isPlainChainStart(_ first: UploadedFrame, ledgerID: String) -> Bool {
        var frame = BinaryWriter(capacity: 256)
        first.canonical(into: &frame)
        let chain = HashChain(key: nil)
        return chain.link(after: HashChain.genesis(ledgerID: ledgerID), frame: frame.bytes) == first.link
            || chain.link(after: HashChain.genesis, frame: frame.bytes) == first.link
    }

    /// Checks `upload` against `held` and gives what to store, or nil when every event it carries
    /// is held already (a resend: nothing changes). The head's signature and key are the caller's
    /// to check; this checks that the events continue the held history, chain to the head the
    /// upload states, pass the rules as recorded, and carry the values their events committed to.
    package static func plan(_ upload: LedgerUpload, held: Held, bundleID: String? = nil) throws(Refusal) -> Plan? {
        let head = held.seq
        // A resent range: every event the store holds must be the one it holds.
        var fresh = upload.frames[...]
        while let f = fresh.first, f.seq <= head {
            guard f.seq >= 1, held.frames[Int(f.seq) - 1].link == f.link else {
                throw Refusal(
                    kind: .fork,
                    message: "event \(f.seq) is not the event the store holds at that seq: this history forks from the one uploaded before",
                    seq: f.seq)
            }
            fresh = fresh.dropFirst()
        }
        guard let first = fresh.first else {
            if upload.head.seq > head {
                throw Refusal(kind: .refused, message: "the head names seq \(upload.head.seq), past the last event carried", seq: upload.head.seq)
            }
            return nil
        }
        guard first.seq == head + 1 else {
            throw Refusal(kind: .gap, message: "the upload starts at seq \(first.seq), but the store holds the ledger up to seq \(head)", seq: head + 1)
        }
        for (previous, next) in zip(fresh, fresh.dropFirst()) where next.seq != previous.seq + 1 {
            throw Refusal(kind: .refused, message: "the events jump from seq \(previous.seq) to \(next.seq)", seq: next.seq)
        }
        guard let last = fresh.last, upload.head.seq == last.seq, upload.head.link == last.link else {
            throw Refusal(
                kind: .refused, message: "the signed head (seq \(upload.head.seq)) is not the last event carried (seq \(fresh.last?.seq ?? 0)) and its link",
                seq: upload.head.seq)
        }
        // The chain: a plain one recomputes from the held link (or the genesis); a keyed one (an
        // HMAC whose key stays on the device) cannot be, and its head's signature vouches for it.
        var plain = held.plainChain
        let chain = HashChain(key: nil)
        var frame = BinaryWriter(capacity: 256)
        var previous = held.frames.last?.link ?? HashChain.genesis(ledgerID: upload.ledgerID)
        if plain == nil {
            first.canonical(into: &frame)
            if chain.link(after: previous, frame: frame.bytes) == first.link {
                plain = true
            } else if chain.link(after: HashChain.genesis, frame: frame.bytes) == first.link {
                plain = true
                previous = HashChain.genesis
            } else {
                plain = false
            }
        }
        if plain == true {
            for f in fresh {
                f.canonical(into: &frame)
                let link = chain.link(after: previous, frame: frame.bytes)
                guard link == f.link else {
                    throw Refusal(kind: .refused, message: HashChain.breakMessage(at: f.seq), seq: f.seq)
                }
                previous = link
            }
        }
        // The personal values: every one the new events introduce, unless its owner was erased
        // (on the device, whose later erasure event is still to come, or in the store), must be
        // what its event committed to, with its owner's salt.
        var stored: [Int64: PersonalValueRow] = [:]
        for row in held.values { stored[row.ref] = row }
        var offered: [Int64: PersonalValueRow] = [:]
        for row in upload.values { offered[row.ref] = row }
        var added: [Int64: PersonalValueRow] = [:]
        func salt(of owner: Int64, forValue ref: Int64) -> [UInt8]? {
            let key = owner == 0 ? ref : owner
            return (added[key] ?? stored[key] ?? offered[key])?.salt
        }
        func erasedHere(_ row: PersonalValueRow) -> Bool {
            held.erasedUsers.contains(row.ref) || (row.owner != 0 && held.erasedUsers.contains(row.owner))
        }
        for f in fresh {
            for (ref, commitment) in PayloadCodec.introductions(in: f.payload) {
                if stored[ref] != nil || added[ref] != nil {
                    throw Refusal(kind: .refused, message: "event \(f.seq) introduces personal value \(ref), which an earlier event introduced", seq: f.seq)
                }
                guard let row = offered[ref] else { continue }  // erased on the device, or withheld: read as erased
                guard row.owner == 0 || row.owner == ref || row.owner < ref else {
                    throw Refusal(kind: .refused, message: "personal value \(ref) of event \(f.seq) names owner \(row.owner), a later value", seq: f.seq)
                }
                if row.owner == ref || row.owner == 0 { added[ref] = row }
                guard let salt = row.owner == ref ? row.salt : salt(of: row.owner, forValue: ref), row.matches(commitment, salt: salt) else {
                    throw Refusal(
                        kind: .refused, message: "personal value \(ref) is not the value event \(f.seq) committed to (or its owner's salt is not)", seq: f.seq)
                }
                added[ref] = row
            }
        }
        // Rows sent along that no new event introduces must be ones the store holds already
        // (an owner's row, for its salt), as it holds them.
        for row in upload.values where added[row.ref] == nil {
            if let held = stored[row.ref] {
                guard held == row else {
                    throw Refusal(kind: .refused, message: "personal value \(row.ref) is not the one uploaded before", seq: nil)
                }
            } else if !held.erasedUsers.contains(row.ref) {
                throw Refusal(kind: .refused, message: "personal value \(row.ref) was sent but no event introduces it", seq: nil)
            }
        }
        // Headers: the store's and the upload's, each under its own digest.
        var headers: [[UInt8]: String] = [:]
        for header in held.signingHeaders + upload.signingHeaders { headers[SignedParts.digest(ofHeader: header[...])] = header }
        // The replay: the held events, then the new ones through the rules as recorded.
        // The values as the device holds them at the upload's last event: none its erasure
        // events removed (the state, the projections and the store then read them as erased).
        var erasedByEvents = Set<Int64>()
        var highest: Int64 = 0
        for part in [held.frames[...], fresh] {
            for f in part {
                for (ref, _) in PayloadCodec.introductions(in: f.payload) { highest = max(highest, ref) }
                if f.type == .personalDataErased,
                    case .personalDataErased(let refs)? = try? EventStore.decodePayload(f.type, f.payload, seq: f.seq, personal: .allErased)
                {
                    erasedByEvents.formUnion(refs)
                }
            }
        }
        let kept = added.values.filter { !erasedHere($0) }
        let live = (held.values + kept).filter { !erasedByEvents.contains($0.ref) && !erasedByEvents.contains($0.owner) }
        let personal = PersonalValues(rows: live, assigned: highest, headers: headers)
        var state = LedgerState()
        var history = Projector.HistoryCollector()
        var checks: [EvidenceRows.Check] = []
        var erasedSignatures: [String] = []
        var events: [ChainedEvent] = []
        var erasedRefs: [Int64] = []
        let context = EvidenceRows.Context(secret: [], bundleID: bundleID)
        for f in [held.frames[...], fresh].joined() {
            let e: RecordedEvent
            do {
                let body = try EventStore.decodePayload(f.type, f.payload, seq: f.seq, personal: personal)
                e = RecordedEvent(
                    seq: f.seq, version: f.version, event: Event(at: Timestamp(nanosecondsSinceEpoch: f.at), body),
                    recordedAt: Timestamp(nanosecondsSinceEpoch: f.recorded), anomaly: f.anomaly, appendedByLedger: f.appendedByLedger)
            } catch {
                throw Refusal(kind: .refused, message: "event \(f.seq) does not decode: \((error as? LedgerError)?.message ?? "\(error)")", seq: f.seq)
            }
            let isNew = f.seq > head
            // LogReplay.step, keeping the version the log gives the event in its stream.
            let replayed = Reducer.replay(&state, e.event)
            state.seq = f.seq
            let version = state.recordStreamEvent(e.event.body)
            if isNew, version != e.version {
                throw Refusal(kind: .refused, message: "event \(f.seq) is numbered \(e.version) in its stream, where the log numbers it \(version)", seq: f.seq)
            }
            if case .outcome(let outcome) = replayed {
                if let change = Projector.ownedChange(e, outcome: outcome, state: state) { history.apply(change) }
                if e.event.body.signedTransaction != nil {
                    switch EvidenceRows.pending(e, outcome: outcome, state: state, secret: context) {
                    case .none: break
                    case .erased(let t): erasedSignatures.append(t)
                    case .check(let check): checks.append(check)
                    }
                }
            }
            guard isNew else { continue }
            if !RecordedDecision.agrees(e, replayed, state: state), let found = RecordedDecision.problems(e, replayed, state: state).first {
                throw Refusal(kind: .refused, message: "event \(f.seq) does not pass the rules as recorded (\(found.message))", seq: f.seq)
            }
            if case .personalDataErased(let refs) = e.event.body { erasedRefs += refs }
            events.append(ChainedEvent(event: e, payload: f.payload, link: f.link))
        }
        // The store's erased users' rows are masked as a ship masks them.
        var markers: [String: String] = [:]
        for ref in held.erasedUsers { markers[PersonalValues.erased(UInt64(ref))] = PersonalValues.erased(UInt64(ref)) }
        var shipment = Shipment(
            events: events, lastSeq: last.seq, lastLink: last.link, state: state, history: history, erasedUsers: markers, checks: checks,
            erasedSignatures: erasedSignatures, headers: headers)
        let erased = Set(erasedRefs)
        shipment.values = kept.filter { !erased.contains($0.ref) && !erased.contains($0.owner) }.sorted { $0.ref < $1.ref }
        shipment.erasedValueRefs = erasedRefs.sorted()
        for (digest, header) in headers { shipment.signingHeaders[digest] = header }
        return Plan(shipment: shipment, plainChain: plain ?? true)
    }
}
