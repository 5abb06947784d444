/// The download state machine as data: for each download event, the phases a download may be in
/// when it arrives and the state it leaves the download in. ``Reducer`` looks every download
/// transition up here, and docs/rules.md prints the same table.
///
/// | event | from | to |
/// |---|---|---|
/// | `downloadStarted` | not started, failed, cancelled | waiting |
/// | `downloadPaused` | waiting, active | paused |
/// | `downloadResumed` | paused | waiting |
/// | `downloadCancelled` | waiting, active, paused | cancelled |
/// | `downloadProgressed` | waiting, active | active |
/// | `downloadFinished` | waiting, active | finished |
/// | `downloadFailed` | waiting, active | failed |
///
/// Any other phase breaks `illegalDownloadTransition`: a command (start, pause, resume, cancel) is
/// refused, an observation (progress, finish, failure) is stored as an anomaly.
enum DownloadMachine {
    /// Where a download is: its status, or not started yet (a download the purchase announced,
    /// never started, waits in no queue).
    enum Phase: Hashable, CaseIterable, Sendable {
        case notStarted, waiting, active, paused, finished, failed, cancelled

        init(_ d: DownloadRecord) {
            guard d.started else { self = .notStarted; return }
            switch d.state {
            case .waiting: self = .waiting
            case .active: self = .active
            case .paused: self = .paused
            case .finished: self = .finished
            case .failed: self = .failed
            case .cancelled: self = .cancelled
            }
        }

        var name: String {
            switch self {
            case .notStarted: "not started"
            case .waiting: "waiting"
            case .active: "active"
            case .paused: "paused"
            case .finished: "finished"
            case .failed: "failed"
            case .cancelled: "cancelled"
            }
        }
    }

    /// One row of the table.
    struct Transition: Sendable {
        var from: Set<Phase>
        var to: DownloadStatus
        /// What the download must be, for the refusal's message: "only a paused download can resume".
        var requirement: String
    }

    /// The row for a download event; nil for events that are not download transitions.
    static func transition(_ type: EventType) -> Transition? {
        switch type {
        case .downloadStarted:
            Transition(from: [.notStarted, .failed, .cancelled], to: .waiting, requirement: "only a download never started, failed or cancelled can start")
        case .downloadPaused:
            Transition(from: [.waiting, .active], to: .paused, requirement: "only a waiting (started) or active download can pause")
        case .downloadResumed:
            Transition(from: [.paused], to: .waiting, requirement: "only a paused download can resume")
        case .downloadCancelled:
            Transition(from: [.waiting, .active, .paused], to: .cancelled, requirement: "only a started, active or paused download can be cancelled")
        case .downloadProgressed:
            Transition(from: [.waiting, .active], to: .active, requirement: "only a started or active download makes progress")
        case .downloadFinished:
            Transition(from: [.waiting, .active], to: .finished, requirement: "only a started or active download can finish")
        case .downloadFailed:
            Transition(from: [.waiting, .active], to: .failed, requirement: "only a started or active download can fail")
        case .productRegistered, .contentVersionPublished, .paymentQueued, .transactionDeferred, .transactionPurchased,
            .transactionFailed, .transactionRestored, .transactionRevoked, .transactionFinished, .contentCopiedOut,
            .contentDeleted, .restoreStarted, .restoreCompleted, .restoreFailed, .contentRegistered:
            nil
        }
    }
}
