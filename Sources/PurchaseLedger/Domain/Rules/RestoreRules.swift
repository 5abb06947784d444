// The rules of one aggregate; ``Reducer/decide(_:_:)`` dispatches each event to its function.

/// Restores: one at a time, each ended by a completion or a failure.
extension Reducer {
    /// `restoreStarted`.
    static func startRestore(_ s: inout LedgerState, _ e: Event) throws(LedgerError) -> Outcome {
        if s.restoreInProgress {
            throw .violation(.restoreInProgress, "a restore is already running; wait for restoreCompleted or restoreFailed", e)
        }
        s.restoreInProgress = true
        if case .restoreStarted(let user) = e.body { s.restoreUser = user }  // (kept after it ends: see restoreUser)
        return .applied
    }

    /// `restoreCompleted` (and the events that end a restore).
    static func endRestore(_ s: inout LedgerState, _ e: Event) throws(LedgerError) -> Outcome {
        guard s.restoreInProgress else {
            throw .violation(.noRestoreInProgress, "no restore is running (restoreStarted was not recorded)", e)
        }
        s.restoreInProgress = false
        return .applied
    }
}
