/// Receives a recorded ledger the way an app's payment-queue observer receives the store's
/// callbacks, so a user's ledger can be replayed into the app's own observer code in a unit test.
///
/// Every method has a default that does nothing: implement the ones your observer has. Each call
/// carries the values as they were right after that event, and the ``ReplayStep`` it came from.
public protocol PaymentQueueReplayObserver: AnyObject {
    /// `paymentQueue(_:updatedTransactions:)`: a transaction was queued, deferred, purchased,
    /// failed, restored, revoked, or redelivered.
    func updatedTransactions(_ transactions: [TransactionRecord], step: ReplayStep)
    /// `paymentQueue(_:updatedDownloads:)`: a download started, progressed, paused, resumed,
    /// finished, failed or was cancelled (including the ledger's automatic cancellations).
    func updatedDownloads(_ downloads: [DownloadRecord], step: ReplayStep)
    /// `paymentQueue(_:removedTransactions:)`: the app finished the transaction.
    func removedTransactions(_ transactions: [TransactionRecord], step: ReplayStep)
    /// `paymentQueueRestoreCompletedTransactionsFinished(_:)`.
    func restoreCompletedTransactionsFinished(step: ReplayStep)
    /// `paymentQueue(_:restoreCompletedTransactionsFailedWithError:)`.
    func restoreCompletedTransactionsFailed(error: StoreError, step: ReplayStep)
}

extension PaymentQueueReplayObserver {
    /// Does nothing; implement it to receive transaction updates.
    public func updatedTransactions(_ transactions: [TransactionRecord], step: ReplayStep) {}
    /// Does nothing; implement it to receive download updates.
    public func updatedDownloads(_ downloads: [DownloadRecord], step: ReplayStep) {}
    /// Does nothing; implement it to receive finished transactions.
    public func removedTransactions(_ transactions: [TransactionRecord], step: ReplayStep) {}
    /// Does nothing; implement it to receive completed restores.
    public func restoreCompletedTransactionsFinished(step: ReplayStep) {}
    /// Does nothing; implement it to receive failed restores.
    public func restoreCompletedTransactionsFailed(error: StoreError, step: ReplayStep) {}
}

/// Where a replay is: the stored event behind a callback, and the whole state right after it.
public struct ReplayStep: Sendable {
    /// The stored event behind the callback, with its seq.
    public var event: RecordedEvent
    /// The whole state right after that event.
    public var state: LedgerState
}

extension Ledger {
    /// Feeds the stored events, one by one through `last`, to `observer` as payment-queue
    /// callbacks, with the reconstructed transaction and download values at each step.
    ///
    /// ```swift
    /// final class Recorder: PaymentQueueReplayObserver {
    ///     var finishedEarly: [String] = []
    ///     func removedTransactions(_ transactions: [TransactionRecord], step: ReplayStep) {
    ///         for t in transactions where t.downloads.contains(where: { step.state.downloads[$0]?.lost == true }) {
    ///             finishedEarly.append(t.transaction)
    ///         }
    ///     }
    /// }
    /// let recorder = Recorder()
    /// try Ledger(path: "user.ledger").replay(into: recorder)
    /// ```
    public func replay(into observer: some PaymentQueueReplayObserver, through last: Int64 = .max) throws {
        var replay = LogReplay()
        try read { db in
            try replay.run(db, through: last) { replayed, _, state in
                let e = replayed.event
                let step = ReplayStep(event: e, state: state)
                let body = e.event.body
                switch body {
                case .transactionFinished(let t, _):
                    if let record = state.transactions[t] { observer.removedTransactions([record], step: step) }
                case .restoreCompleted:
                    observer.restoreCompletedTransactionsFinished(step: step)
                case .restoreFailed(let error):
                    observer.restoreCompletedTransactionsFailed(error: error, step: step)
                case .paymentQueued, .transactionDeferred, .transactionPurchased, .transactionFailed, .transactionRestored, .transactionRevoked:
                    if let t = body.transactionID, let record = state.transactions[t] { observer.updatedTransactions([record], step: step) }
                case .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished, .downloadFailed:
                    if let d = body.downloadID, let record = state.downloads[d] { observer.updatedDownloads([record], step: step) }
                case .productRegistered, .contentVersionPublished, .contentCopiedOut, .contentDeleted, .restoreStarted, .contentRegistered,
                    .assetPackPublished, .assetPackBegan, .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackFailed,
                    .assetPackRemoved, .assetPackOpened, .storePaymentPromoted, .personalDataErased, .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted,
                    .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
                    // Not the payment queue's: asset packs are Background Assets', a promoted
                    // purchase reaches the queue as its own paymentQueued, and a store product
                    // view is its delegate's.
                    break
                }
                return true
            }
        }
    }
}
