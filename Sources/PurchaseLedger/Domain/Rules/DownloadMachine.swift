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
    enum Phase: CaseIterable, Sendable {
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

        fileprivate var bit: UInt8 {
            switch self {
            case .notStarted: 0
            case .waiting: 1
            case .active: 2
            case .paused: 3
            case .finished: 4
            case .failed: 5
            case .cancelled: 6
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

    /// A set of phases, as bits: the reducer asks it once per download event.
    struct Phases: OptionSet, Sendable {
        let rawValue: UInt8

        init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        init(_ phases: Phase...) {
            rawValue = phases.reduce(0) { $0 | 1 << $1.bit }
        }

        func contains(_ phase: Phase) -> Bool { rawValue & 1 << phase.bit != 0 }
    }

    /// One row of the table.
    struct Transition: Sendable {
        var from: Phases
        var to: DownloadStatus
        /// What the download must be, for the refusal's message: "only a paused download can resume".
        var requirement: StaticString
    }

    static let start = Transition(from: Phases(.notStarted, .failed, .cancelled), to: .waiting, requirement: "only a download never started, failed or cancelled can start")
    static let pause = Transition(from: Phases(.waiting, .active), to: .paused, requirement: "only a waiting (started) or active download can pause")
    static let resume = Transition(from: Phases(.paused), to: .waiting, requirement: "only a paused download can resume")
    static let cancel = Transition(from: Phases(.waiting, .active, .paused), to: .cancelled, requirement: "only a started, active or paused download can be cancelled")
    static let progress = Transition(from: Phases(.waiting, .active), to: .active, requirement: "only a started or active download makes progress")
    static let finish = Transition(from: Phases(.waiting, .active), to: .finished, requirement: "only a started or active download can finish")
    static let fail = Transition(from: Phases(.waiting, .active), to: .failed, requirement: "only a started or active download can fail")

    /// The row for a download event; nil for events that are not download transitions.
    static func transition(_ type: EventType) -> Transition? {
        switch type {
        case .downloadStarted: start
        case .downloadPaused: pause
        case .downloadResumed: resume
        case .downloadCancelled: cancel
        case .downloadProgressed: progress
        case .downloadFinished: finish
        case .downloadFailed: fail
        case .productRegistered, .contentVersionPublished, .paymentQueued, .transactionDeferred, .transactionPurchased,
            .transactionFailed, .transactionRestored, .transactionRevoked, .transactionFinished, .contentCopiedOut,
            .contentDeleted, .restoreStarted, .restoreCompleted, .restoreFailed, .contentRegistered, .assetPackPublished, .assetPackBegan,
            .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackFailed, .assetPackRemoved, .assetPackOpened,
            .storePaymentPromoted, .personalDataErased, .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted,
            .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            nil
        }
    }
}
