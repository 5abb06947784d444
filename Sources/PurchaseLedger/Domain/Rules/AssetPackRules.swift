// The rules of one aggregate; ``Reducer/decide(_:_:)`` dispatches each event to its function.

/// Apple-hosted asset packs: each version a standalone download of the content `assetpack:<id>`;
/// versions never go down, and a pack opens only when on the device and its unlocking purchase
/// is in force.
extension Reducer {
    /// `assetPackPublished`.
    static func publishPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ unlockedBy: [String], _ e: Event) throws(LedgerError) -> Outcome {
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
    }

    /// `assetPackBegan`.
    static func beginPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) -> Outcome {
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
    }

    /// `assetPackProgressed`.
    static func progressPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ progress: Double, _ e: Event) throws(LedgerError) -> Outcome {
        let id = try packDownload(s, pack, version, e, DownloadMachine.progress)
        if s.downloads[id]?.state == .active && s.downloads[id]?.progress == progress { return .unchanged }
        s.downloads.update(id) { next in
            next.state = .active
            next.progress = progress
            next.lastActivityAt = e.at
        }
        return .applied
    }

    /// `assetPackPaused`.
    static func pausePack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) -> Outcome {
        let id = try packDownload(s, pack, version, e, DownloadMachine.pause)
        s.downloads.update(id) { next in
            next.state = .paused
            next.lastActivityAt = e.at
        }
        return .applied
    }

    /// `assetPackFinished`.
    static func finishPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) -> Outcome {
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
    }

    /// `assetPackFailed`.
    static func failPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ error: StoreError, _ e: Event) throws(LedgerError) -> Outcome {
        _ = try endPackDownload(&s, pack, version, e, from: [.notStarted, .waiting, .active, .paused], "fail") { next in
            next.state = .failed
            next.error = error
        }
        return .applied
    }

    /// `assetPackRemoved`.
    static func removePack(_ s: inout LedgerState, _ pack: String, _ e: Event) throws(LedgerError) -> Outcome {
        let key = AssetPacks.key(pack: pack)
        guard let owned = s.copiedContent[key] else { return .unchanged }
        s.downloads.update(owned.download) { next in
            next.discarded = true
            next.lastActivityAt = e.at
        }
        s.copiedContent[key] = nil
        return .applied
    }

    /// `assetPackOpened`.
    static func openPack(_ s: inout LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) -> Outcome {
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
    }

    /// Versions of a pack never go down: one below the version on the device breaks
    /// `assetPackVersionDown`.
    static func checkPackVersion(_ s: LedgerState, _ pack: String, _ version: Int, _ e: Event) throws(LedgerError) {
        guard let owned = s.copiedContent[AssetPacks.key(pack: pack)], let onDevice = Int(owned.contentVersion.text), version < onDevice else { return }
        throw .violation(.assetPackVersionDown, "asset pack \(pack) is on the device at version \(onDevice); version \(version) would go down", e)
    }

    /// The end of a pack version's download, finished or failed, from one of the `allowed` phases
    /// (a pack may be reported at its end without a beginning: one already on the device when
    /// the app first listens): the download is made if new, marked started, then `change`d.
    static func endPackDownload(
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
    static func createPackDownload(_ s: inout LedgerState, _ pack: String, _ version: Int) {
        let id = AssetPacks.downloadID(pack: pack, version: version)
        guard s.downloads[id] == nil else { return }
        s.downloads[id] = DownloadRecord(download: id, transaction: nil, content: AssetPacks.contentID(pack: pack), contentVersion: ContentVersion(version))
    }

    /// The id of a pack version's download, which must be in a phase `transition` allows (else
    /// `illegalDownloadTransition`).
    static func packDownload(
        _ s: LedgerState, _ pack: String, _ version: Int, _ e: Event, _ transition: DownloadMachine.Transition
    ) throws(LedgerError) -> String {
        let id = AssetPacks.downloadID(pack: pack, version: version)
        let phase = s.downloads[id].map(DownloadMachine.Phase.init) ?? .notStarted
        guard transition.from.contains(phase) else {
            throw .violation(.illegalDownloadTransition, "asset pack \(pack) version \(version) is \(phase.name); \(transition.requirement)", e)
        }
        return id
    }
}
