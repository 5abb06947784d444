// Background Assets (asset packs, iOS/macOS/tvOS/visionOS 26): the Apple-only layer. It copies
// `AssetPackManager`'s status updates into AssetPackStatusUpdateValue and forwards removals and
// update checks; what they become in the ledger is decided in StoreKitRecorder, tested on Linux.
// Type-checked on Linux against stand-ins (Tools/storekit-check.sh); compiled where Background Assets
// has asset packs (not watchOS).
// `AssetPackManager` is in the SDKs of iOS, macOS, tvOS and visionOS 26, which come with Swift 6.2;
// Background Assets itself exists since iOS 16.1, so `canImport` alone is true with older SDKs.
#if compiler(>=6.2) && canImport(BackgroundAssets) && !os(watchOS)
    public import BackgroundAssets
    import Foundation
    import PurchaseLedger

    @available(iOS 26, macOS 26, tvOS 26, visionOS 26, *)
    extension StoreKitRecorder {
        /// Records every asset pack's download status until the calling task is cancelled (the
        /// sequence never ends). Start it at launch, before asking for any pack.
        ///
        /// The manager is the app's to give: the first reference to `AssetPackManager.shared` opts
        /// the app into the system's management of its asset packs, which also needs the matching
        /// downloader extension (`StoreDownloaderExtension` for Apple-hosted packs), so this layer
        /// never touches it on its own.
        ///
        /// ```swift
        /// let packs = AssetPackManager.shared   // the app opts in here, with its downloader extension
        /// Task { await recorder.recordAssetPackUpdates(from: packs) }
        /// try recorder.assetPackPublished(id: "levels", version: pack.version, unlockedBy: ["com.example.levels"])
        /// try await packs.ensureLocalAvailability(of: pack)
        /// try recorder.openAssetPack(id: "levels", version: pack.version)   // refused when not usable
        /// ```
        public func recordAssetPackUpdates(from manager: AssetPackManager) async {
            for await update in await manager.statusUpdates {
                if Task.isCancelled { return }
                if let value = AssetPackStatusUpdateValue(update) {
                    assetPackStatusUpdate(value)
                } else {
                    unrecorded("an asset pack status this version does not know: \(update)")
                }
            }
        }

        /// `remove(assetPackWithID:)`, recorded once it returns.
        public func remove(assetPackWithID id: String, from manager: AssetPackManager) async throws {
            try await manager.remove(assetPackWithID: id)
            assetPackRemoved(id: id)
        }

        /// `checkForUpdates()`; the packs it removed are recorded as removed (the updates it starts
        /// arrive through `statusUpdates`).
        @discardableResult
        public func checkForAssetPackUpdates(with manager: AssetPackManager) async throws -> (updatingIDs: Set<String>, removedIDs: Set<String>) {
            let result = try await manager.checkForUpdates()
            for id in result.removedIDs.sorted() { assetPackRemoved(id: id) }
            return result
        }
    }

    @available(iOS 26, macOS 26, tvOS 26, visionOS 26, *)
    extension AssetPackStatusUpdateValue {
        /// Nil for a status added after this version (reported to `onError`, never guessed).
        public init?(_ update: AssetPackManager.DownloadStatusUpdate) {
            switch update {
            case .began(let pack): self = .began(pack: pack.id, version: pack.version)
            case .downloading(let pack, let progress): self = .downloading(pack: pack.id, version: pack.version, fractionCompleted: progress.fractionCompleted)
            case .paused(let pack): self = .paused(pack: pack.id, version: pack.version)
            case .finished(let pack): self = .finished(pack: pack.id, version: pack.version)
            case .failed(let pack, let error): self = .failed(pack: pack.id, version: pack.version, error: StoreError(error))
            @unknown default: return nil
            }
        }
    }
#endif
