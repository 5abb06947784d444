// Background Assets (asset packs, iOS/macOS/tvOS/visionOS 26): the Apple-only layer. It copies
// `AssetPackManager`'s status updates into AssetPackStatusUpdateValue and forwards removals and
// update checks; what they become in the ledger is decided in StoreKitRecorder, tested on Linux.
// Parsed on Linux (swiftc -parse); compiled where Background Assets has asset packs (not watchOS).
#if canImport(BackgroundAssets) && !os(watchOS)
    public import BackgroundAssets
    import Foundation
    import PurchaseLedger

    @available(iOS 26, macOS 26, tvOS 26, visionOS 26, *)
    extension StoreKitRecorder {
        /// Records every asset pack's download status until the calling task is cancelled (the
        /// sequence never ends). Start it at launch, before asking for any pack:
        ///
        /// ```swift
        /// Task { await recorder.recordAssetPackUpdates() }
        /// try recorder.assetPackPublished(id: "levels", version: pack.version, unlockedBy: ["com.example.levels"])
        /// try await AssetPackManager.shared.ensureLocalAvailability(of: pack)
        /// try recorder.openAssetPack(id: "levels", version: pack.version)   // refused when not usable
        /// ```
        public func recordAssetPackUpdates(from manager: AssetPackManager = .shared) async {
            for await update in manager.statusUpdates {
                if Task.isCancelled { return }
                if let value = AssetPackStatusUpdateValue(update) {
                    assetPackStatusUpdate(value)
                } else {
                    unrecorded("an asset pack status this version does not know: \(update)")
                }
            }
        }

        /// `remove(assetPackWithID:)`, recorded once it returns.
        public func remove(assetPackWithID id: String, from manager: AssetPackManager = .shared) async throws {
            try await manager.remove(assetPackWithID: id)
            assetPackRemoved(id: id)
        }

        /// `checkForUpdates()`; the packs it removed are recorded as removed (the updates it starts
        /// arrive through `statusUpdates`).
        @discardableResult
        public func checkForAssetPackUpdates(with manager: AssetPackManager = .shared) async throws -> (updatingIDs: Set<String>, removedIDs: Set<String>) {
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
