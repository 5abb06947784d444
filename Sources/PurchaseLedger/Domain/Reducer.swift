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

    var isStored: Bool { self != .ignored }
    var anomaly: Rule? { if case .anomaly(let rule) = self { rule } else { nil } }
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
            return try decide(&state, event)
        } catch  where error.code == .ruleViolation && !event.type.isCommand {
            state.anomalies += 1
            return .anomaly(error.rule!)
        }
    }

    /// Applies a stored event during a replay; never fails, whatever the log holds. A stored
    /// command that the rules now reject (a ledger written by an older, laxer app) comes back as an
    /// anomaly, and a stored event that does not even fit the state (a damaged or edited log) as
    /// `refused`; both leave the state unchanged. `verify` reports them.
    @discardableResult
    static func replay(_ state: inout LedgerState, _ event: Event, seq: Int64) -> Replayed {
        let result: Replayed
        do {
            result = .outcome(try reduce(&state, event))
        } catch  where error.code == .ruleViolation {
            state.anomalies += 1
            result = .outcome(.anomaly(error.rule!))
        } catch {
            result = .refused(error)
        }
        state.seq = seq
        _ = state.recordStreamEvent(event.body)
        return result
    }

    enum Replayed {
        case outcome(Outcome)
        case refused(LedgerError)

        var outcome: Outcome? { if case .outcome(let o) = self { o } else { nil } }
    }

    // MARK: - The rules

    static func decide(_ s: inout LedgerState, _ e: Event) throws(LedgerError) -> Outcome {
        switch e.body {
        case .productRegistered(let registration):
            let previous = s.products[registration.product]
            publish(&s, registration.product, registration.contents.map { ($0.content, $0.contentVersion) })
            if previous?.registration == registration { return .unchanged }
            s.products[registration.product] = ProductRecord(registration: registration, registeredAt: e.at)
            return .applied

        case .contentVersionPublished(let product, let content, let version):
            guard s.products[product] != nil else {
                throw .violation(.unknownProduct, "product \(product) was never registered", e)
            }
            let key = ContentKey(product: product, content: content)
            if let latest = s.publishedVersions[key], !version.isNewer(than: latest) { return .unchanged }
            s.publishedVersions[key] = version
            return .applied

        case .paymentQueued(let t, let product, let quantity, let user):
            if let existing = s.transactions[t] {
                if existing.queuedAt != nil, existing.product == product, existing.quantity == quantity, existing.user == user {
                    return .ignored
                }
                throw .violation(.duplicateTransaction, "transaction \(t) already exists; a new payment needs a new transaction id", e)
            }
            guard let product = registered(product, s) else {
                throw .violation(.unknownProduct, "product \(product) was never registered", e)
            }
            var record = TransactionRecord(transaction: t, product: product, user: user, quantity: quantity, state: .purchasing)
            record.queuedAt = e.at
            s.transactions[t] = record
            return .applied

        case .transactionDeferred(let t):
            switch try verdict(TransactionMachine.deferral, transaction(s, t, e), e) {
            case .apply:
                s.transactions.update(t) { record in
                    record.state = .deferred
                    record.wasDeferred = true
                }
                return .applied
            case .redelivery: return .unchanged
            }

        case .transactionPurchased(let t, let product, let user, let storeID, let specs, let terms):
            if let why = terms.unverified {
                throw .violation(.unverifiedTransaction, "transaction \(t)'s store signature did not verify (\(why)): kept, never applied", e)
            }
            guard let record = s.transactions[t] else {
                guard let product else {
                    throw .malformed("transaction \(t) is unknown; a purchase the ledger has not seen queued must carry its product", event: e)
                }
                return try arrive(&s, t, product, user, storeID, specs, terms, as: .purchased, original: nil, e)
            }
            if let product, product != record.product {
                throw .violation(.duplicateTransaction, "transaction \(t) is for product \(record.product), not \(product)", e)
            }
            if let user, let recorded = record.user, user != recorded {
                throw .violation(.duplicateTransaction, "transaction \(t) is user \(recorded)'s, not \(user)'s", e)
            }
            switch try verdict(TransactionMachine.purchase, record, e) {
            case .apply:
                try checkNewDownloads(s, specs, e)
                let (owned, revoked) = (record.product, record.revoked)
                _ = consume record  // so the record below is changed in place, not copied
                let fixed = paid(terms, owned, s)
                s.transactions.update(t) { record in
                    record.state = .purchased
                    record.storeTransactionId = storeID
                    record.purchasedAt = e.at
                    record.paid = fixed
                    if record.user == nil { record.user = user }
                }
                deliver(&s, t, specs ?? [])
                if !revoked { s.owners[owned, default: 0] += 1 }
                return .applied
            case .redelivery:
                guard storeID == record.storeTransactionId, delivered(s, record) == (specs ?? []), !record.paid.contradicts(terms) else {
                    throw .violation(
                        .duplicateTransaction, "transaction \(t) was already purchased with another store id, other downloads or other terms", e)
                }
                return .unchanged
            }

        case .transactionFailed(let t, let error):
            let record = try transaction(s, t, e)
            switch try verdict(TransactionMachine.failure, record, e) {
            case .apply:
                _ = consume record
                s.transactions.update(t) { record in
                    record.state = .failed
                    record.error = error
                    record.failedAt = e.at
                }
                return .applied
            case .redelivery:
                guard record.error == error else {
                    throw .violation(.illegalTransactionTransition, "transaction \(t) already failed with another error", e)
                }
                return .unchanged
            }

        case .transactionRestored(let t, let original, let product, let user, let storeID, let specs, let terms):
            if let why = terms.unverified {
                throw .violation(.unverifiedTransaction, "transaction \(t)'s store signature did not verify (\(why)): kept, never applied", e)
            }
            if let record = s.transactions[t] {
                var same = record.state == .restored && record.originalTransaction == original && record.product == product
                same = same && (user == nil || user == record.user) && storeID == record.storeTransactionId
                same = same && delivered(s, record) == (specs ?? []) && !record.paid.contradicts(terms)
                guard same else {
                    throw .violation(.duplicateTransaction, "transaction \(t) is already in the ledger, and not as this restore", e)
                }
                return .unchanged
            }
            return try arrive(&s, t, product, user, storeID, specs, terms, as: .restored, original: original, e)

        case .transactionRevoked(let t, let reason):
            let record = try transaction(s, t, e)
            if try verdict(TransactionMachine.revocation, record, e) == .redelivery {
                guard record.revocationReason == reason else {
                    throw .violation(.illegalTransactionTransition, "transaction \(t) was already revoked for another reason", e)
                }
                return .unchanged
            }
            let product = record.product
            _ = consume record
            s.transactions.update(t) { record in
                record.revoked = true
                record.revocationReason = reason
                record.revokedAt = e.at
            }
            s.owners[product, default: 0] -= 1
            return .applied

        case .transactionFinished(let t, let discard):
            let record = try transaction(s, t, e)
            try checkFinish(s, record, discard: discard, e)
            let downloads = record.downloads
            _ = consume record
            var discarded = false
            for id in downloads {
                s.downloads.update(id) { download in
                    if download.inFlight {
                        // Normally already cancelled by the events `plan` stored before this finish.
                        download.state = .cancelled
                        download.cancelReason = .transactionFinished
                        download.lastActivityAt = e.at
                    } else if download.state == .finished && !download.copiedOut && discard {
                        download.discarded = true
                    }
                    download.contentURL = nil
                    discarded = discarded || download.discarded
                }
            }
            s.transactions.update(t) { record in
                record.finished = true
                record.finishedAt = e.at
                if discard && discarded { record.discardedContent = true }
            }
            return .applied

        case .downloadStarted(let d):
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

        case .downloadPaused(let d), .downloadResumed(let d):
            return try move(&s, d, e, e.type == .downloadPaused ? DownloadMachine.pause : DownloadMachine.resume) { _ in }

        case .downloadCancelled(let d, let reason):
            return try move(&s, d, e, DownloadMachine.cancel) { $0.cancelReason = reason }

        case .downloadProgressed(let d, let progress, let bytes, let remaining):
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

        case .contentCopiedOut(let d, let destination, _, let bytes):
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

        case .contentDeleted(let product):
            guard s.products[product] != nil else {
                throw .violation(.unknownProduct, "product \(product) was never registered", e)
            }
            for key in s.copiedContent.keys where key.product == product {
                s.copiedContent[key] = nil
            }
            return .applied

        case .restoreStarted:
            if s.restoreInProgress {
                throw .violation(.restoreInProgress, "a restore is already running; wait for restoreCompleted or restoreFailed", e)
            }
            s.restoreInProgress = true
            return .applied

        case .restoreCompleted, .restoreFailed:
            guard s.restoreInProgress else {
                throw .violation(.noRestoreInProgress, "no restore is running (restoreStarted was not recorded)", e)
            }
            s.restoreInProgress = false
            return .applied

        case .contentRegistered(let url, let d, let length):
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

        case .assetPackPublished(let pack, let version, let unlockedBy):
            for product in unlockedBy where s.products[product] == nil {
                throw .violation(.unknownProduct, "product \(product), which unlocks asset pack \(pack), was never registered", e)
            }
            let content = AssetPacks.contentID(pack: pack), published = ContentVersion(version)
            // Every product that unlocks the pack, named now or before, lists its newest version.
            let earlier = s.unlockingProducts(ofPack: pack)
            var changed = false
            for product in Set([""] + unlockedBy + earlier).sorted() {
                let key = ContentKey(product: product, content: content)
                if let latest = s.publishedVersions[key], !published.isNewer(than: latest) { continue }
                s.publishedVersions[key] = published
                changed = true
            }
            return changed ? .applied : .unchanged

        case .assetPackBegan(let pack, let version):
            try checkPackVersion(s, pack, version, e)
            let id = AssetPacks.downloadID(pack: pack, version: version)
            let phase = s.downloads[id].map(DownloadMachine.Phase.init) ?? .notStarted
            switch phase {
            case .waiting, .active: return .unchanged
            case .finished:
                throw .violation(
                    .illegalDownloadTransition, "asset pack \(pack) version \(version) already finished; a download that begins again is a new version", e)
            case .notStarted, .paused, .failed, .cancelled:
                createPackDownload(&s, pack, version)
                s.downloads.update(id) { next in
                    if phase != .paused {
                        next.attempts += 1
                        next.startedAt = e.at
                        next.progress = 0
                        next.error = nil
                    }
                    next.started = true
                    next.state = .active
                    next.lastActivityAt = e.at
                }
                return .applied
            }

        case .assetPackProgressed(let pack, let version, let progress):
            let id = try packDownload(s, pack, version, e, DownloadMachine.progress)
            if s.downloads[id]?.state == .active && s.downloads[id]?.progress == progress { return .unchanged }
            s.downloads.update(id) { next in
                next.state = .active
                next.progress = progress
                next.lastActivityAt = e.at
            }
            return .applied

        case .assetPackPaused(let pack, let version):
            let id = try packDownload(s, pack, version, e, DownloadMachine.pause)
            s.downloads.update(id) { next in
                next.state = .paused
                next.lastActivityAt = e.at
            }
            return .applied

        case .assetPackFinished(let pack, let version):
            try checkPackVersion(s, pack, version, e)
            if s.downloads[AssetPacks.downloadID(pack: pack, version: version)]?.state == .finished { return .unchanged }
            let id = try endPackDownload(&s, pack, version, e, from: [.notStarted, .waiting, .active], "finish") { next in
                next.state = .finished
                next.progress = 1
                next.finishedAt = e.at
            }
            let key = AssetPacks.key(pack: pack)
            if let replaced = s.copiedContent[key]?.download, replaced != id {
                s.downloads.update(replaced) { $0.discarded = true }
            }
            s.copiedContent[key] = OwnedContent(
                product: "", content: key.content, contentVersion: ContentVersion(version), destination: "", transaction: "", download: id, copiedAt: e.at)
            return .applied

        case .assetPackFailed(let pack, let version, let error):
            _ = try endPackDownload(&s, pack, version, e, from: [.notStarted, .waiting, .active, .paused], "fail") { next in
                next.state = .failed
                next.error = error
            }
            return .applied

        case .assetPackRemoved(let pack):
            let key = AssetPacks.key(pack: pack)
            guard let owned = s.copiedContent[key] else { return .unchanged }
            s.downloads.update(owned.download) { next in
                next.discarded = true
                next.lastActivityAt = e.at
            }
            s.copiedContent[key] = nil
            return .applied

        case .assetPackOpened(let pack, let version):
            let key = AssetPacks.key(pack: pack)
            guard let owned = s.copiedContent[key], let onDevice = Int(owned.contentVersion.text), onDevice >= version else {
                let had = s.copiedContent[key].map { "it is on the device at version \($0.contentVersion.text)" }
                let downloading = s.downloads[AssetPacks.downloadID(pack: pack, version: version)].map { "version \(version) is \(describe($0))" }
                throw .violation(
                    .assetPackNotReady,
                    "asset pack \(pack) is not on the device at version \(version) or later (\(had ?? downloading ?? "it never finished, or was removed")); a pack is usable only after assetPackFinished",
                    e)
            }
            let unlocking = s.unlockingProducts(ofPack: pack)
            if !unlocking.isEmpty && !unlocking.contains(where: { s.owns(product: $0) }) {
                let revoked = s.revokedPurchases(of: unlocking)
                throw .violation(
                    .assetPackNotReady,
                    "asset pack \(pack) is unlocked by \(unlocking.joined(separator: ", ")), and no purchase of them is in force"
                        + (revoked.isEmpty ? "" : " (refunded or revoked: \(revoked.joined(separator: ", ")))"), e)
            }
            s.downloads.update(owned.download) { $0.lastActivityAt = e.at }
            return .applied

        case .storePaymentPromoted(let product, _):
            guard s.products[product] != nil else {
                throw .violation(.unknownProduct, "product \(product), promoted on the App Store, was never registered", e)
            }
            return .applied

        case .personalDataErased:
            // The values are already gone from what a replay reads: nothing to change.
            return .applied
        }
    }

    /// Versions of a pack never go down: one below the version on the device breaks
    /// `assetPackVersionDown`.
    private static func checkPackVersion(_ s: LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) {
        guard let owned = s.copiedContent[AssetPacks.key(pack: pack)], let onDevice = Int(owned.contentVersion.text), version < onDevice else { return }
        throw .violation(.assetPackVersionDown, "asset pack \(pack) is on the device at version \(onDevice); version \(version) would go down", e)
    }

    /// The end of a pack version's download, finished or failed, from one of the `allowed` phases
    /// (a pack may be reported at its end without a beginning: one already on the device when
    /// the app first listens): the download is made if new, marked started, then `change`d.
    private static func endPackDownload(
        _ s: inout LedgerState, _ pack: String, _ version: Int, _ e: Event, from allowed: [DownloadMachine.Phase], _ verb: String,
        _ change: (inout DownloadRecord) -> Void
    ) throws(LedgerError) -> String {
        let id = AssetPacks.downloadID(pack: pack, version: version)
        let phase = s.downloads[id].map(DownloadMachine.Phase.init) ?? .notStarted
        guard allowed.contains(phase) else {
            throw .violation(.illegalDownloadTransition, "asset pack \(pack) version \(version) is \(phase.name); only one downloading can \(verb)", e)
        }
        createPackDownload(&s, pack, version)
        s.downloads.update(id) { next in
            if !next.started {
                next.started = true
                next.attempts += 1
                next.startedAt = e.at
            }
            change(&next)
            next.lastActivityAt = e.at
        }
        return id
    }

    /// The download of a pack's version, made when first reported.
    private static func createPackDownload(_ s: inout LedgerState, _ pack: String, _ version: Int) {
        let id = AssetPacks.downloadID(pack: pack, version: version)
        guard s.downloads[id] == nil else { return }
        s.downloads[id] = DownloadRecord(download: id, transaction: nil, content: AssetPacks.contentID(pack: pack), contentVersion: ContentVersion(version))
    }

    /// The id of a pack version's download, which must be in a phase `transition` allows (else
    /// `illegalDownloadTransition`).
    private static func packDownload(
        _ s: LedgerState, _ pack: String, _ version: Int, _ e: Event, _ transition: DownloadMachine.Transition
    ) throws(LedgerError) -> String {
        let id = AssetPacks.downloadID(pack: pack, version: version)
        let phase = s.downloads[id].map(DownloadMachine.Phase.init) ?? .notStarted
        guard transition.from.contains(phase) else {
            throw .violation(.illegalDownloadTransition, "asset pack \(pack) version \(version) is \(phase.name); \(transition.requirement)", e)
        }
        return id
    }

    // MARK: - Helpers

    /// The finish rules, in precedence order: alreadyFinished > finishWhilePurchasing /
    /// finishWhileDeferred > finishBeforeCopyOut.
    static func checkFinish(_ s: LedgerState, _ record: TransactionRecord, discard: Bool, _ e: Event) throws(LedgerError) {
        let t = record.transaction
        if record.finished {
            throw .violation(.alreadyFinished, "transaction \(t) was already finished", e)
        }
        switch record.state {
        case .purchasing:
            throw .violation(.finishWhilePurchasing, "transaction \(t) is still purchasing; the store throws when a purchasing transaction is finished", e)
        case .deferred:
            throw .violation(.finishWhileDeferred, "transaction \(t) is deferred (waiting for Ask to Buy); wait for it to be purchased or failed", e)
        default: break
        }
        if !discard {
            let uncopied = record.downloads.filter { id in
                guard let d = s.downloads[id] else { return false }
                return d.state == .finished && !d.copiedOut
            }
            if !uncopied.isEmpty {
                let list = uncopied.joined(separator: ", ")
                let noun = uncopied.count == 1 ? "download \(list) finished but its content was" : "downloads \(list) finished but their content was"
                throw .violation(
                    .finishBeforeCopyOut, "\(noun) never copied out; finishing now would delete it (copy it out first, or finish with discardContent)", e, downloads: uncopied)
            }
        }
    }

    /// A transition of a known transaction, looked up in ``TransactionMachine``: apply it, or
    /// compare a redelivery with the record; from any other state, `illegalTransactionTransition`.
    private static func verdict(_ row: TransactionMachine.Transition, _ record: TransactionRecord, _ e: Event) throws(LedgerError) -> Applicable {
        switch row.verdict(record) {
        case .apply: return .apply
        case .redelivery: return .redelivery
        case .illegal: throw .violation(.illegalTransactionTransition, "transaction \(record.transaction) is \(record.state.rawValue); \(row.requirement)", e)
        }
    }

    /// A verdict the reducer can act on (the illegal one has thrown).
    private enum Applicable {
        case apply, redelivery
    }

    /// The catalog's own copy of a registered product id, or nil for a product never
    /// registered: a record made with it shares the catalog's string instead of holding one of
    /// its own (a product id is longer than Swift keeps inline, and a large ledger holds a
    /// hundred thousand transactions of a few hundred products).
    @inline(__always)
    /// What a purchase or restore fixes of its price (contract 5.1): the event's own price, else
    /// the registration of `product` in force now, at this point of the log; never changed after.
    private static func paid(_ terms: PurchaseTerms, _ product: String, _ s: LedgerState) -> PaidTerms {
        var paid = PaidTerms()
        if let price = terms.price, let currency = terms.currency {
            (paid.price, paid.currency, paid.priceSource) = (price, currency, .event)
        } else if let registration = s.products[product]?.registration {
            (paid.price, paid.currency, paid.priceSource) = (registration.price, registration.currency, .catalog)
        }
        paid.storefront = terms.storefront
        paid.environment = terms.environment ?? .production
        paid.ownership = terms.ownership ?? .purchased
        paid.offer = terms.offer
        return paid
    }

    private static func registered(_ product: String, _ s: LedgerState) -> String? {
        guard let i = s.products.index(forKey: product) else { return nil }
        return s.products.keys[i]
    }

    private static func transaction(_ s: LedgerState, _ t: String, _ e: Event) throws(LedgerError) -> TransactionRecord {
        guard let record = s.transactions[t] else {
            throw .malformed("transaction \(t) is unknown to this ledger", event: e)
        }
        return record
    }

    private static func downloadRecord(_ s: LedgerState, _ d: String, _ e: Event) throws(LedgerError) -> DownloadRecord {
        guard let record = s.downloads[d] else {
            throw .malformed("download \(d) is unknown to this ledger", event: e)
        }
        return record
    }

    /// One of the transitions of ``DownloadMachine`` applied to download `d` (checked by
    /// ``downloadForTransition(_:_:_:_:)``): its new state, `change`, its last activity.
    @inline(__always)
    private static func move(
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
    private static func downloadForTransition(
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

    private static func finishedOwner(_ s: LedgerState, _ download: DownloadRecord) -> Bool {
        guard let t = download.transaction else { return false }
        return s.transactions[t]?.finished == true
    }

    /// A purchase or restore whose downloads reuse an id already in the ledger, or repeat one,
    /// breaks `duplicateDownload`.
    /// A transaction the ledger first sees purchased or restored (not queued here before): it is
    /// created granting its product, with its downloads delivered.
    private static func arrive(
        _ s: inout LedgerState, _ t: String, _ product: String, _ user: String?, _ storeID: String?, _ specs: [DownloadSpec]?,
        _ terms: PurchaseTerms, as state: TransactionStatus, original: String?, _ e: Event
    ) throws(LedgerError) -> Outcome {
        guard let product = registered(product, s) else {
            throw .violation(.unknownProduct, "product \(product) was never registered", e)
        }
        try checkNewDownloads(s, specs, e)
        var created = TransactionRecord(transaction: t, product: product, user: user, quantity: 1, state: state)
        created.originalTransaction = original
        created.storeTransactionId = storeID
        created.purchasedAt = e.at
        created.paid = paid(terms, product, s)
        s.transactions[t] = created
        deliver(&s, t, specs ?? [])
        s.owners[product, default: 0] += 1
        return .applied
    }

    private static func checkNewDownloads(_ s: LedgerState, _ specs: [DownloadSpec]?, _ e: Event) throws(LedgerError) {
        var seen = Set<String>()
        for spec in specs ?? [] {
            if AssetPacks.isReserved(spec.download) {
                throw .malformed("download id \(spec.download): ids starting with \(AssetPacks.prefix) are reserved for asset packs", event: e)
            }
            if s.downloads[spec.download] != nil || !seen.insert(spec.download).inserted {
                throw .violation(.duplicateDownload, "download id \(spec.download) is already in the ledger, or named twice", e)
            }
        }
    }

    private static func deliver(_ s: inout LedgerState, _ t: String, _ specs: [DownloadSpec]) {
        for spec in specs {
            s.downloads[spec.download] = DownloadRecord(
                download: spec.download, transaction: t, content: spec.content,
                contentVersion: spec.contentVersion, contentLength: spec.contentLength)
        }
        guard !specs.isEmpty,
            let product = s.transactions.update(
                t,
                { record in
                    record.downloads = specs.map(\.download)
                    return record.product
                })
        else { return }
        publish(&s, product, specs.map { ($0.content, $0.contentVersion) })
    }

    /// The downloads a transaction was delivered with, as the store described them.
    private static func delivered(_ s: LedgerState, _ record: TransactionRecord) -> [DownloadSpec] {
        record.downloads.compactMap { id in
            guard let d = s.downloads[id], let content = d.content, let version = d.contentVersion else { return nil }
            return DownloadSpec(download: id, content: content, contentVersion: version, contentLength: d.contentLength ?? 0)
        }
    }

    private static func publish(_ s: inout LedgerState, _ product: String, _ versions: [(String, ContentVersion)]) {
        for (content, version) in versions {
            let key = ContentKey(product: product, content: content)
            if let latest = s.publishedVersions[key], !version.isNewer(than: latest) { continue }
            s.publishedVersions[key] = version
        }
    }

    private static func describe(_ d: DownloadRecord) -> String {
        if !d.started { return "not started" }
        return d.state.rawValue
    }
}
