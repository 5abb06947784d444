// Stand-in for the part of Background Assets that PurchaseLedgerStoreKit uses (iOS, macOS, tvOS
// and visionOS 26; not watchOS), so the StoreKit layer can be type-checked on Linux
// (Tools/storekit-check.sh). Each declaration is written from Apple's documentation of the real one,
// whose path under developer.apple.com/documentation/backgroundassets/ is named beside it.
// Availability cannot be modelled here: docs/platforms.md keeps it, checked by a test.
public import Foundation

// assetpack: `struct AssetPack`; assetpack/id: `let id: String`; assetpack/version: `let version: Int`.
public struct AssetPack: Sendable, Hashable {
    public let id: String
    public let version: Int

    public init(id: String, version: Int) {
        self.id = id
        self.version = version
    }
}

// assetpackmanager: `actor AssetPackManager`.
public actor AssetPackManager {
    // assetpackmanager/shared: the shared manager. The first reference to it opts the app into
    // the system's management of its asset packs.
    public static let shared = AssetPackManager()

    // assetpackmanager/downloadstatusupdate: `enum DownloadStatusUpdate` with `case began(AssetPack)`,
    // `case downloading(AssetPack, Progress)`, `case paused(AssetPack)`, `case finished(AssetPack)`,
    // `case failed(AssetPack, any Error)`. Compiled with library evolution, so not frozen: a switch
    // over it needs `@unknown default`, as over the real one.
    public enum DownloadStatusUpdate: @unchecked Sendable {
        case began(AssetPack)
        case downloading(AssetPack, Progress)
        case paused(AssetPack)
        case finished(AssetPack)
        case failed(AssetPack, any Error)
    }

    // assetpackmanager/statusupdates:
    // `final let statusUpdates: some Sendable & AsyncSequence<AssetPackManager.DownloadStatusUpdate, Never>`
    // (actor-isolated: from outside the actor it is read with `await`).
    public let statusUpdates: AsyncStream<DownloadStatusUpdate> = AsyncStream { _ in }

    // assetpackmanager/remove(assetpackwithid:): `func remove(assetPackWithID assetPackID: String) async throws`.
    public func remove(assetPackWithID assetPackID: String) async throws {}

    // assetpackmanager/ensurelocalavailability(of:): `func ensureLocalAvailability(of assetPack:
    // AssetPack) async throws` (iOS 26.0 to 26.4; later with `requireLatestVersion:`, defaulted).
    public func ensureLocalAvailability(of assetPack: AssetPack) async throws {}

    // assetpackmanager/checkforupdates(): `@discardableResult func checkForUpdates() async throws
    // -> (updatingIDs: Set<String>, removedIDs: Set<String>)`.
    @discardableResult
    public func checkForUpdates() async throws -> (updatingIDs: Set<String>, removedIDs: Set<String>) { ([], []) }
}
