// The rules of one aggregate; ``Reducer/decide(_:_:)`` dispatches each event to its function.

/// Downloads: the hosted-content downloads of a purchase (`SKDownload`) and standalone ones (the
/// Kollus two-step download), each transition looked up in ``DownloadMachine``; copying the
/// content out, and no content URL after the transaction's finish.
extension Reducer {
    /// `downloadStarted`.
    static func startDownload(_ s: inout LedgerState, _ d: String, _ e: Event) throws(LedgerError) -> Outcome {
        let (download, owner, to) = try downloadForTransition(s, d, e, DownloadMachine.start)
        if let owner, !owner.grantsOwnership {
            throw .violation(
                .illegalDownloadTransition,
                "download \(d) belongs to transaction \(owner.transaction), which is \(owner.revoked ? "revoked" : owner.state.rawValue), not purchased or restored", e)
        }
        _ = consume download
        s.downloads.update(d) { next in
            next.started = true
            next.state = to
            next.progress = 0
            next.bytesWritten = nil
            next.timeRemaining = nil
            next.contentURL = nil
            next.error = nil
            next.cancelReason = nil
            next.attempts += 1
            next.startedAt = e.at
            next.lastActivityAt = e.at
        }
        return .applied
    }

    /// `downloadProgressed`.
    static func progressDownload(_ s: inout LedgerState, _ d: String, _ progress: Double, _ bytes: Int64?, _ remaining: Double?, _ e: Event) throws(LedgerError) -> Outcome {
        let (download, _, to) = try downloadForTransition(s, d, e, DownloadMachine.progress)
        if download.state == .active, download.progress == progress, download.bytesWritten == bytes,
            download.timeRemaining == remaining
        {
            return .unchanged
        }
        _ = consume download
        s.downloads.update(d) { next in
            next.state = to
            next.progress = progress
            next.bytesWritten = bytes
            next.timeRemaining = remaining
            next.lastActivityAt = e.at
        }
        return .applied
    }

    /// `contentCopiedOut`.
    static func copyOut(_ s: inout LedgerState, _ d: String, _ destination: String, _ bytes: Int64?, _ e: Event) throws(LedgerError) -> Outcome {
        let download = try downloadRecord(s, d, e)
        if download.transaction == nil && AssetPacks.isReserved(d) {
            throw .violation(.illegalDownloadTransition, "download \(d) is an asset pack's: the system keeps its files, nothing is copied out", e)
        }
        if finishedOwner(s, download) {
            throw .violation(
                .contentURLAfterFinish,
                "transaction \(download.transaction!) is finished, so the content URL of download \(d) is gone; content must be copied out before the finish", e)
        }
        guard download.state == .finished else {
            throw .violation(.copyOutBeforeFinished, "download \(d) is \(describe(download)); content can be copied out only once the download has finished", e)
        }
        let (owner, content, version) = (download.transaction, download.content, download.contentVersion)
        _ = consume download
        s.downloads.update(d) { next in
            next.copiedOut = true
            next.destination = destination
            next.bytesCopied = bytes
            next.copiedOutAt = e.at
        }
        if let t = owner, let product = s.transactions[t]?.product, let content, let version {
            s.copiedContent[ContentKey(product: product, content: content)] = OwnedContent(
                product: product, content: content, contentVersion: version, destination: destination,
                transaction: t, download: d, copiedAt: e.at)
        }
        return .applied
    }

    /// `contentRegistered`.
    static func registerContent(_ s: inout LedgerState, _ url: String, _ d: String, _ length: Int64?, _ e: Event) throws(LedgerError) -> Outcome {
        if AssetPacks.isReserved(d) { throw .malformed("download ids starting with \(AssetPacks.prefix) are reserved for asset packs", event: e) }
        if let existing = s.registeredURLs[url] {
            if existing == d { return .ignored }
            throw .violation(.contentKeyMismatch, "this URL is already registered as download \(existing), not \(d)", e)
        }
        if s.downloads[d] != nil {
            throw .violation(.duplicateDownload, "download id \(d) is already in the ledger", e)
        }
        s.registeredURLs[url] = d
        s.downloads[d] = DownloadRecord(download: d, transaction: nil, url: url, contentLength: length)
        return .applied
    }

    static func downloadRecord(_ s: LedgerState, _ d: String, _ e: Event) throws(LedgerError) -> DownloadRecord {
        guard let record = s.downloads[d] else {
            throw .malformed("download \(d) is unknown to this ledger", event: e)
        }
        return record
    }

    /// One of the transitions of ``DownloadMachine`` applied to download `d` (checked by
    /// ``downloadForTransition(_:_:_:_:)``): its new state, `change`, its last activity.
    @inline(__always)
    static func move(
        _ s: inout LedgerState, _ d: String, _ e: Event, _ transition: DownloadMachine.Transition, _ change: (inout DownloadRecord) -> Void
    ) throws(LedgerError) -> Outcome {
        let (download, _, to) = try downloadForTransition(s, d, e, transition)
        _ = consume download
        s.downloads.update(d) { next in
            next.state = to
            change(&next)
            next.lastActivityAt = e.at
        }
        return .applied
    }

    /// A download for one of the transitions of ``DownloadMachine``: it must exist, its
    /// transaction must not be finished (which breaks `downloadAfterFinish`, or for a finish
    /// `contentURLAfterFinish`, before the state rules), and its phase must be one the table
    /// allows for the event (else `illegalDownloadTransition`).
    static func downloadForTransition(
        _ s: LedgerState, _ d: String, _ e: Event, _ transition: DownloadMachine.Transition
    ) throws(LedgerError) -> (DownloadRecord, TransactionRecord?, to: DownloadStatus) {
        let download = try downloadRecord(s, d, e)
        // Only a standalone download can be an asset pack's: a purchase's never pays for the check.
        if download.transaction == nil && AssetPacks.isReserved(d) {
            throw .violation(.illegalDownloadTransition, "download \(d) is an asset pack's: it changes only through assetPack events", e)
        }
        let owner = download.transaction.flatMap { s.transactions[$0] }
        if let owner, owner.finished {
            if e.type == .downloadFinished {
                throw .violation(.contentURLAfterFinish, "transaction \(owner.transaction) of download \(d) is finished, so the content URL this finish reports is already gone", e)
            }
            throw .violation(
                .downloadAfterFinish,
                "transaction \(owner.transaction) of download \(d) is finished; its downloads can no longer be started, paused, resumed, cancelled or make progress", e)
        }
        let phase = DownloadMachine.Phase(download)
        guard transition.from.contains(phase) else {
            throw .violation(.illegalDownloadTransition, "download \(d) is \(phase.name); \(transition.requirement)", e)
        }
        return (download, owner, transition.to)
    }

    static func finishedOwner(_ s: LedgerState, _ download: DownloadRecord) -> Bool {
        guard let t = download.transaction else { return false }
        return s.transactions[t]?.finished == true
    }

    static func describe(_ d: DownloadRecord) -> String {
        if !d.started { return "not started" }
        return d.state.rawValue
    }
}
