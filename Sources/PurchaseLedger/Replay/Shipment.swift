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
    package var projections: [(table: Projector.Table, rows: [[DatabaseValue]])]

    /// The chain link before the first event: what a store holds for a ledger it has no event of.
    package static var genesis: [UInt8] { HashChain.genesis }
}

extension Ledger {
    /// Reads the whole log once, recomputing the hash chain from the first event and checking it
    /// against every stored link, and replays it with the reducer. Returns the events after
    /// `shipped` and the projection rows at the end.
    ///
    /// Throws ``LedgerError/Code/corruptData`` naming the seq of a block that does not decode or
    /// of the first event whose stored link differs from the recomputed one (a tampered file), and
    /// ``LedgerError/Code/chainMismatch`` when the store already holds `shipped` events with a
    /// different link after the last of them (this file's history was rewritten since it was
    /// shipped) or more events than this file has.
    package func shipment(after shipped: Int64, link shippedLink: [UInt8]?) throws -> Shipment {
        try read { db in
            var replay = LogReplay(collectingHistory: true)
            var previous = try HashChain.genesis(db)
            var events: [ChainedEvent] = []
            var expected: Int64 = 1
            var frame = BinaryWriter(capacity: 256)
            try replay.run(
                db, integrity: true,
                before: { step, _ in
                    let (e, entry) = (step.event, step.entry)
                    guard e.seq == expected else {
                        throw LedgerError.corrupt("the log jumps from seq \(expected - 1) to \(e.seq)", seq: min(e.seq, expected))
                    }
                    expected += 1
                    FrameCodec.canonical(e, payload: entry.payload, into: &frame)
                    let link = chain.link(after: previous, frame: frame.bytes)
                    guard entry.link?.matches(link) == true else {
                        throw LedgerError.corrupt(HashChain.breakMessage(at: e.seq), seq: e.seq)
                    }
                    previous = link
                    if e.seq == shipped, let shippedLink, shippedLink != link {
                        throw LedgerError(
                            .chainMismatch,
                            "the fleet store holds a different event \(e.seq) under this ledger id: this file's history was rewritten after it was shipped (or another copy of this file, which holds its identity key, shipped a different history first)",
                            seq: e.seq)
                    }
                    if e.seq > shipped {
                        events.append(ChainedEvent(event: e, payload: entry.payload, link: link))
                    }
                    return true
                }, after: { _, _, _ in true })
            let last = expected - 1
            if last < shipped {
                throw LedgerError(
                    .chainMismatch,
                    "the fleet store holds \(shipped) events under this ledger id, but the file has \(last): its history was cut or rolled back after it was shipped (an older copy of the file put back, or events removed)",
                    seq: last + 1)
            }
            return Shipment(
                events: events, lastSeq: last, lastLink: previous,
                projections: Projector.rows(state: replay.state, history: replay.history!))
        }
    }
}
