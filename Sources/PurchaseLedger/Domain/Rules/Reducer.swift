/// What the reducer made of one event.
public enum Outcome: Sendable, Hashable {
    /// The event changed the state; it is stored.
    case applied
    /// A redelivered observation, equal to what is recorded: stored, changes nothing.
    case unchanged
    /// An observation that makes no sense in the current state: stored, flagged with the rule,
    /// changes nothing but the anomaly count.
    case anomaly(Rule)
    /// An identical repeat of a command: accepted, and nothing is stored.
    case ignored
    /// An observation applied as the store reported it, and flagged with the rule: it contradicts
    /// Apple's signed statement it carries (``Rule/signedFieldsDiffer``). Counted as an anomaly.
    case flagged(Rule)

    var isStored: Bool { self != .ignored }
    var anomaly: Rule? {
        switch self {
        case .anomaly(let rule), .flagged(let rule): rule
        case .applied, .unchanged, .ignored: nil
        }
    }
    /// Whether the event changed the state (``applied`` or ``flagged(_:)``).
    var changedState: Bool {
        switch self {
        case .applied, .flagged: true
        case .unchanged, .anomaly, .ignored: false
        }
    }
}

/// The rules of the ledger, as one pure function over the state.
///
/// No I/O, no clock, no randomness: live appends, replays, `verify` and rebuilds all call
/// ``reduce(_:_:)``, so a replay reproduces exactly what the app saw.
///
/// ```swift
/// var state = LedgerState()
/// for event in events {
///     for expanded in Reducer.plan(state, event) {   // adds the early-finish cancellations
///         _ = try Reducer.reduce(&state, expanded)
///     }
/// }
/// ```
public enum Reducer {
    /// Bumped whenever a rule or the state's shape changes: snapshots and projections written by
    /// another version are rebuilt from the log instead of trusted.
    public static let version: Int = 2

    /// The events to store for `event`: the event itself, preceded, for a finish that is accepted
    /// while some of its downloads are started, active or paused, by one `downloadCancelled`
    /// (reason `transactionFinished`) per such download, at the finish's time.
    public static func plan(_ state: LedgerState, _ event: Event) -> [Event] {
        cancellations(state, event) + [event]
    }

    /// The cancellations ``plan(_:_:)`` puts before `event`: none (an empty array, nothing
    /// allocated) for any event but an accepted finish with downloads in flight.
    static func cancellations(_ state: LedgerState, _ event: Event) -> [Event] {
        guard case .transactionFinished(let t, let discard) = event.body,
            let transaction = state.transactions[t],
            (try? checkFinish(state, transaction, discard: discard, event)) != nil
        else { return [] }
        return transaction.downloads.compactMap { id -> Event? in
            guard state.downloads[id]?.inFlight == true else { return nil }
            return Event(at: event.at, .downloadCancelled(download: id, reason: .transactionFinished))
        }
    }

    /// One input event through the rules, the way an append and its dry run (``Ledger/check(_:)``)
    /// both take it: the events ``plan(_:_:)`` gives for it (an early finish's cancellations, then
    /// the event), each reduced in turn and handed to `body` with its outcome, the state after it
    /// and whether the ledger appended it (a cancellation) rather than the caller. A refusal is
    /// thrown placed at `line`; what the plan applied before it stays in `state`, which the
    /// caller drops (an append rolls back and reloads).
    @inline(__always)
    static func take(
        _ input: Event, at position: LedgerError.Position, _ state: inout LedgerState,
        _ body: (Event, Outcome, inout LedgerState, _ appendedByLedger: Bool) throws -> Void
    ) throws {
        func one(_ event: Event, appendedByLedger: Bool) throws {
            let outcome: Outcome
            do {
                outcome = try reduce(&state, event)
            } catch {
                throw error.at(position)
            }
            try body(event, outcome, &state, appendedByLedger)
        }
        if case .personalDataErased = input.body {
            throw LedgerError.malformed("personalDataErased is recorded by the ledger's forget, never appended").at(position)
        }
        for cancellation in cancellations(state, input) { try one(cancellation, appendedByLedger: true) }
        try one(input, appendedByLedger: false)
    }

    /// Applies one event. Throws, leaving `state` untouched, when a command breaks a rule or the
    /// event is malformed (it names an unknown transaction or download).
    ///
    /// The rules themselves do not ask what kind of event broke them: each throws
    /// ``LedgerError/Code/ruleViolation`` before changing anything, and this is the one place that
    /// decides what a broken rule means. A command (``EventType/isCommand``) is the app's decision,
    /// so it is refused; an observation is what the store reported and is never lost, so it is
    /// stored as an anomaly flagged with the rule.
    public static func reduce(_ state: inout LedgerState, _ event: Event) throws(LedgerError) -> Outcome {
        do {
            let outcome = try decide(&state, event)
            if case .flagged = outcome { state.anomalies += 1 }
            return outcome
        } catch  where error.code == .ruleViolation && !event.type.isCommand {
            state.anomalies += 1
            return .anomaly(error.rule!)
        }
    }

    /// Applies a stored event during a replay; never fails, whatever the log holds. A stored
    /// command that the rules now reject (a ledger written by an older, laxer app) comes back as an
    /// anomaly, and a stored event that does not even fit the state (a damaged or edited log) as
    /// `refused`; both leave the state unchanged. `verify` reports them. The log's own
    /// bookkeeping (the seq, the stream versions) is ``LogReplay/step(_:_:seq:)``'s.
    @discardableResult
    static func replay(_ state: inout LedgerState, _ event: Event) -> Replayed {
        let result: Replayed
        do {
            result = .outcome(try reduce(&state, event))
        } catch  where error.code == .ruleViolation {
            state.anomalies += 1
            result = .outcome(.anomaly(error.rule!))
        } catch {
            result = .refused(error)
        }
        return result
    }

    enum Replayed {
        case outcome(Outcome)
        case refused(LedgerError)

        var outcome: Outcome? { if case .outcome(let o) = self { o } else { nil } }
    }

    // MARK: - The rules

    /// The rules of every event, dispatched to the aggregate it concerns (`Rules/*Rules.swift`).
    static func decide(_ s: inout LedgerState, _ e: Event) throws(LedgerError) -> Outcome {
        switch e.body {
        case .productRegistered(let registration): return try registerProduct(&s, registration, e)
        case .contentVersionPublished(let product, let content, let version): return try publishContentVersion(&s, product, content, version, e)
        case .paymentQueued(let t, let product, let quantity, let user): return try queuePayment(&s, t, product, quantity, user, e)
        case .transactionDeferred(let t): return try deferTransaction(&s, t, e)
        case .transactionPurchased(let t, let product, let user, let storeID, let specs, let terms): return try purchase(&s, t, product, user, storeID, specs, terms, e)
        case .transactionFailed(let t, let error): return try fail(&s, t, error, e)
        case .transactionRestored(let t, let original, let product, let user, let storeID, let specs, let terms):
            return try restore(&s, t, original, product, user, storeID, specs, terms, e)
        case .transactionRevoked(let t, let reason, let jws): return try revoke(&s, t, reason, jws, e)
        case .transactionFinished(let t, let discard): return try finish(&s, t, discard: discard, e)
        case .downloadStarted(let d): return try startDownload(&s, d, e)
        case .downloadPaused(let d), .downloadResumed(let d):
            return try move(&s, d, e, e.type == .downloadPaused ? DownloadMachine.pause : DownloadMachine.resume) { _ in }
        case .downloadCancelled(let d, let reason):
            return try move(&s, d, e, DownloadMachine.cancel) { $0.cancelReason = reason }
        case .downloadProgressed(let d, let progress, let bytes, let remaining): return try progressDownload(&s, d, progress, bytes, remaining, e)
        case .downloadFinished(let d, let url):
            return try move(&s, d, e, DownloadMachine.finish) { next in
                next.progress = 1
                next.timeRemaining = nil
                next.contentURL = url
                next.finishedAt = e.at
            }
        case .downloadFailed(let d, let error):
            return try move(&s, d, e, DownloadMachine.fail) { next in
                next.error = error
                next.timeRemaining = nil
            }
        case .contentCopiedOut(let d, let destination, _, let bytes): return try copyOut(&s, d, destination, bytes, e)
        case .contentDeleted(let product): return try deleteContent(&s, product, e)
        case .restoreStarted: return try startRestore(&s, e)
        case .restoreCompleted, .restoreFailed: return try endRestore(&s, e)
        case .contentRegistered(let url, let d, let length): return try registerContent(&s, url, d, length, e)
        case .assetPackPublished(let pack, let version, let unlockedBy): return try publishPack(&s, pack, version, unlockedBy, e)
        case .assetPackBegan(let pack, let version): return try beginPack(&s, pack, version, e)
        case .assetPackProgressed(let pack, let version, let progress): return try progressPack(&s, pack, version, progress, e)
        case .assetPackPaused(let pack, let version): return try pausePack(&s, pack, version, e)
        case .assetPackFinished(let pack, let version): return try finishPack(&s, pack, version, e)
        case .assetPackFailed(let pack, let version, let error): return try failPack(&s, pack, version, error, e)
        case .assetPackRemoved(let pack): return try removePack(&s, pack, e)
        case .assetPackOpened(let pack, let version): return try openPack(&s, pack, version, e)
        case .storePaymentPromoted(let product, _): return try promotePayment(&s, product, e)
        case .personalDataErased:
            // The values are already gone from what a replay reads: nothing to change.
            return .applied
        case .storeProductViewPresented(let view, let item, let style, let affiliate, let campaign, let provider):
            return try presentProductView(&s, view, item, style, (affiliate, campaign, provider), e)
        case .storeProductViewLoaded(let view), .storeProductViewDismissed(let view): return try moveProductView(&s, view, e)
        case .storeProductViewFailed(let view, let error): return try moveProductView(&s, view, e, error: error)
        case .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted:
            // Apple's record changes none of the device's: it is compared with it (``Reconciliation``).
            return .applied
        }
    }
}
