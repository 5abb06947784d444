/// The transaction transitions as data: for each event that moves a transaction the ledger already
/// knows, the states it may be in when the event arrives and where the event leaves it.
/// ``Reducer`` looks every such transition up here, and docs/rules.md prints the same table.
///
/// | event | from | to |
/// |---|---|---|
/// | `transactionDeferred` | purchasing | deferred |
/// | `transactionPurchased` | purchasing, deferred | purchased |
/// | `transactionFailed` | purchasing, deferred | failed |
/// | `transactionRevoked` | purchased, restored | revoked |
///
/// An event that finds the transaction already where it leads is a redelivery (the store repeats
/// itself at every launch): stored, changing nothing, when it matches what is recorded (the same
/// store id and downloads, the same error, the same reason). A redelivery that does not match, and
/// an event from any other state, is `illegalTransactionTransition` (`duplicateTransaction` for a
/// purchase with another store id or downloads). All four are observations: the event is stored
/// and flagged. `paymentQueued` and `transactionRestored` create transactions, and
/// `transactionFinished` has rules of its own (``Reducer/checkFinish(_:_:discard:_:)``).
enum TransactionMachine {
    /// A set of transaction states, as bits.
    struct States: OptionSet, Sendable {
        let rawValue: UInt8

        init(rawValue: UInt8) {
            self.rawValue = rawValue
        }

        init(_ states: TransactionStatus...) {
            rawValue = states.reduce(0) { $0 | 1 << Self.bit($1) }
        }

        func contains(_ state: TransactionStatus) -> Bool { rawValue & 1 << Self.bit(state) != 0 }

        private static func bit(_ state: TransactionStatus) -> UInt8 {
            switch state {
            case .purchasing: 0
            case .deferred: 1
            case .purchased: 2
            case .failed: 3
            case .restored: 4
            }
        }
    }

    /// Where an event leaves a transaction: a state, or revoked (a flag: the state stays).
    enum Destination: Sendable, Equatable {
        case state(TransactionStatus)
        case revoked

        var name: String {
            switch self {
            case .state(let state): state.rawValue
            case .revoked: "revoked"
            }
        }
    }

    /// One row of the table.
    struct Transition: Sendable {
        var from: States
        var to: Destination
        /// What the transaction must be, for the anomaly's message.
        var requirement: StaticString

        /// What this event does to `record`.
        func verdict(_ record: TransactionRecord) -> Verdict {
            let arrived =
                switch to {
                case .state(let state): record.state == state
                case .revoked: record.revoked
                }
            if arrived { return .redelivery }
            return from.contains(record.state) ? .apply : .illegal
        }
    }

    /// Apply the event; compare it with what is recorded (a redelivery); or flag it.
    enum Verdict: Sendable, Equatable {
        case apply, redelivery, illegal
    }

    static let deferral = Transition(from: States(.purchasing), to: .state(.deferred), requirement: "only a purchasing transaction can be deferred")
    static let purchase = Transition(
        from: States(.purchasing, .deferred), to: .state(.purchased), requirement: "only a purchasing or deferred transaction can be purchased")
    static let failure = Transition(from: States(.purchasing, .deferred), to: .state(.failed), requirement: "only a purchasing or deferred transaction can fail")
    static let revocation = Transition(from: States(.purchased, .restored), to: .revoked, requirement: "only a purchased or restored transaction can be revoked")

    /// The row for an event; nil for events that are not transitions of a known transaction.
    static func transition(_ type: EventType) -> Transition? {
        switch type {
        case .transactionDeferred: deferral
        case .transactionPurchased: purchase
        case .transactionFailed: failure
        case .transactionRevoked: revocation
        case .productRegistered, .contentVersionPublished, .paymentQueued, .transactionRestored, .transactionFinished, .downloadStarted,
            .downloadPaused, .downloadResumed, .downloadCancelled, .downloadProgressed, .downloadFinished, .downloadFailed, .contentCopiedOut,
            .contentDeleted, .restoreStarted, .restoreCompleted, .restoreFailed, .contentRegistered, .assetPackPublished, .assetPackBegan,
            .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackFailed, .assetPackRemoved, .assetPackOpened,
            .storePaymentPromoted, .personalDataErased, .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted,
            .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            nil
        }
    }
}
