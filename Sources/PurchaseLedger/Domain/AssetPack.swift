/// Asset packs (Background Assets, iOS 26 and later) in the ledger's existing records.
///
/// A pack is content, and its downloads are downloads, so projections, snapshots, reports and the
/// fleet hold them with no table of their own (docs/storekit.md has the mapping):
///
/// - Its **content id** is `assetpack:<pack>`. ``LedgerState/publishedVersions`` holds, under the
///   product `""`, the newest version published (`assetPackPublished`), and under each product
///   that unlocks it, the same version.
/// - Each version's **download** is a standalone download (no transaction) with the id
///   `assetpack:<pack>@<version>`, content `assetpack:<pack>` and content version `<version>`.
/// - The version **on the device** is ``LedgerState/copiedContent`` under the product `""`:
///   set by `assetPackFinished`, gone on `assetPackRemoved`.
///
/// Ids that start with `assetpack:` are reserved: other events may not use them.
public enum AssetPacks {
    /// The reserved prefix of asset pack content and download ids.
    public static let prefix = "assetpack:"

    /// The content id of `pack`: `assetpack:<pack>`.
    public static func contentID(pack: String) -> String { prefix + pack }

    /// The download id of `pack` at `version`: `assetpack:<pack>@<version>`.
    public static func downloadID(pack: String, version: Int) -> String { prefix + pack + "@" + String(version) }

    static func key(pack: String) -> ContentKey { ContentKey(product: "", content: contentID(pack: pack)) }

    static func isReserved(_ id: String) -> Bool { id.hasPrefix(prefix) }
}

/// What the ledger knows of one asset pack (``LedgerState/assetPack(_:)``).
public struct AssetPackStatus: Sendable, Hashable {
    /// The pack's id, as Background Assets names it (`pack` in events).
    public var pack: String
    /// The newest version the catalog published; nil when never published.
    public var publishedVersion: Int?
    /// The products whose purchase unlocks it; empty: free.
    public var unlockedBy: [String]
    /// The version on the device now (finished, not removed); nil when none.
    public var versionOnDevice: Int?
    /// A newer version was published than the one on the device.
    public var updateAvailable: Bool
    /// Free, or some purchase of an unlocking product is in force.
    public var unlocked: Bool
    /// Purchases of unlocking products that were refunded or revoked: access they no longer give.
    public var revokedTransactions: [String]
    /// Usable now: on the device and unlocked.
    public var usable: Bool { versionOnDevice != nil && unlocked }
    /// Its downloads, one per version, oldest first.
    public var downloads: [DownloadRecord]
}

extension LedgerState {
    /// Every asset pack the ledger has heard of, by id.
    public func assetPacks() -> [AssetPackStatus] {
        var packs = Set<String>()
        for key in publishedVersions.keys where AssetPacks.isReserved(key.content) { packs.insert(String(key.content.dropFirst(AssetPacks.prefix.count))) }
        for key in copiedContent.keys where key.product.isEmpty && AssetPacks.isReserved(key.content) {
            packs.insert(String(key.content.dropFirst(AssetPacks.prefix.count)))
        }
        return packs.sorted().compactMap(assetPack)
    }

    /// One asset pack: its published version, what unlocks it, the version on the device,
    /// whether an update is available and whether it may be used now. Nil when never published
    /// and never downloaded.
    public func assetPack(_ pack: String) -> AssetPackStatus? {
        let content = AssetPacks.contentID(pack: pack)
        let published = publishedVersions[AssetPacks.key(pack: pack)].flatMap { Int($0.text) }
        let unlockedBy = unlockingProducts(ofPack: pack)
        let onDevice = copiedContent[AssetPacks.key(pack: pack)].flatMap { Int($0.contentVersion.text) }
        let packDownloads = downloads.values.filter { $0.content == content && $0.transaction == nil }
            .sorted { (Int($0.contentVersion?.text ?? "") ?? 0) < (Int($1.contentVersion?.text ?? "") ?? 0) }
        guard published != nil || !packDownloads.isEmpty else { return nil }
        return AssetPackStatus(
            pack: pack, publishedVersion: published, unlockedBy: unlockedBy, versionOnDevice: onDevice,
            updateAvailable: published.map { p in onDevice.map { p > $0 } ?? false } ?? false,
            unlocked: unlockedBy.isEmpty || unlockedBy.contains { owns(product: $0) }, revokedTransactions: revokedPurchases(of: unlockedBy),
            downloads: packDownloads)
    }

    /// The products whose purchase unlocks `pack`, sorted (empty: free): the ones that list its
    /// content in ``publishedVersions``.
    func unlockingProducts(ofPack pack: String) -> [String] {
        let content = AssetPacks.contentID(pack: pack)
        return publishedVersions.keys.filter { $0.content == content && !$0.product.isEmpty }.map(\.product).sorted()
    }

    /// The refunded or revoked purchases of `products`, sorted.
    func revokedPurchases(of products: [String]) -> [String] {
        let products = Set(products)
        return transactions.values.filter { products.contains($0.product) && $0.revoked }.map(\.transaction).sorted()
    }
}
