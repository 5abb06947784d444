/// Folds events as a fleet store holds them (one row each: its fields and its binary payload v1)
/// into the projection rows a ship writes, with no ledger file at hand: the fleet audit's
/// replay. The same step and the same row builders as every other replay (``LogReplay``).
///
/// The store holds no personal value, so each personal field reads as its erased marker
/// (``PersonalValues/allErased``): a user id as `[erased <ref>]` (one ref per user id) and any
/// other value as its commitment's marker. The rules compare markers as they compare the values:
/// equal values of one user share a salt and so a commitment. The only comparisons that can tell
/// two markers apart where the values were equal (two store transaction ids of a restore with no
/// user) choose between an unchanged restore and a refused one, and neither changes the state,
/// so the rows are the ledger's own, personal columns aside.
package struct DetachedReplay {
    private var state = LedgerState()
    private var history = Projector.HistoryCollector()

    package init() {}

    /// The seq of the last event folded in (0 before any).
    package var seq: Int64 { state.seq }

    /// Decodes one stored event and folds it in. Throws ``LedgerError/Code/corruptData`` naming
    /// the seq when its payload does not decode.
    package mutating func apply(
        seq: Int64, type: EventType, at: Int64, recordedAt: Int64, anomaly: Rule?, appendedByLedger: Bool, version: Int64, payload: [UInt8]
    ) throws {
        let body = try EventStore.decodePayload(type, payload, seq: seq, personal: .allErased)
        let e = RecordedEvent(
            seq: seq, version: version, event: Event(at: Timestamp(nanosecondsSinceEpoch: at), body),
            recordedAt: Timestamp(nanosecondsSinceEpoch: recordedAt), anomaly: anomaly, appendedByLedger: appendedByLedger)
        let replayed = LogReplay.step(&state, e.event, seq: seq)
        if case .outcome(let outcome) = replayed, let change = Projector.ownedChange(e, outcome: outcome, state: state) {
            history.apply(change)
        }
    }

    /// The projection rows of the state after the last event, table by table, as
    /// ``Projector/rows(state:history:)`` gives them to a ship.
    package func rows() -> [(table: Projector.Table, rows: [[ColumnValue]])] {
        Projector.rows(state: state, history: history)
    }
}
