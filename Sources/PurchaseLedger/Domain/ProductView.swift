/// How the App Store's page of an item was shown: `SKStoreProductViewController` (a sheet) or
/// `SKOverlay` (a banner at the bottom of the screen, iOS 14 and later).
public enum ProductViewStyle: String, Sendable, Hashable, Codable, CaseIterable {
    case sheet, overlay
}

/// Where a store product view is: presented (loading), loaded, failed or dismissed.
public enum ProductViewStatus: String, Sendable, Hashable, Codable, CaseIterable {
    case presented, loaded, failed, dismissed
}

/// One presentation of a store product view as the ledger knows it now.
public typealias ProductViewRecord = Record<ProductViewFields>

/// What the ledger records of one store product view (`storeProductViewPresented` and what
/// followed it): a ``ProductViewRecord``'s fields.
public struct ProductViewFields: Sendable, Hashable, StreamCounted {
    /// The app's id for this presentation (`view` in events).
    public package(set) var view: String
    /// The item shown: its Apple ID, as digits.
    public package(set) var item: String
    /// Sheet or overlay.
    public package(set) var style: ProductViewStyle
    /// `SKStoreProductParameterAffiliateToken`, when the app passed one.
    public package(set) var affiliateToken: String?
    /// `SKStoreProductParameterCampaignToken`, when the app passed one.
    public package(set) var campaignToken: String?
    /// `SKStoreProductParameterProviderToken`, when the app passed one.
    public package(set) var providerToken: String?
    /// The error the load failed with.
    public package(set) var error: StoreError?
    /// When it was presented.
    public package(set) var presentedAt: Timestamp?
    /// When its page loaded.
    public package(set) var loadedAt: Timestamp?
    /// When its page failed to load.
    public package(set) var failedAt: Timestamp?
    /// When it left the screen (`storeProductViewDismissed`).
    public package(set) var dismissedAt: Timestamp?
    /// When another presentation came while this one was on screen and took its place
    /// (``Rule/productViewOverlap``): it is off screen from then on, dismissed or not.
    public package(set) var replacedAt: Timestamp?
    /// The view this presentation replaced on screen (``Rule/productViewOverlap``), if any.
    public package(set) var replaces: String?
    /// Events stored in its stream (`productView:<id>`).
    public package(set) var events: Int64 = 0

    /// Presented, loaded, failed or dismissed: the latest of them, from its times (a view loads
    /// or fails, never both, and is dismissed last).
    public var state: ProductViewStatus {
        dismissedAt != nil ? .dismissed : failedAt != nil ? .failed : loadedAt != nil ? .loaded : .presented
    }

    /// On screen: presented and not dismissed or replaced; an overlay that failed to load never
    /// showed (a sheet that failed shows its error until the user closes it).
    public var onScreen: Bool {
        dismissedAt == nil && replacedAt == nil && !(style == .overlay && failedAt != nil)
    }

    /// Dismissed before its page loaded or failed: the user gave up waiting.
    public var dismissedWithoutLoading: Bool { dismissedAt != nil && loadedAt == nil && failedAt == nil }

    /// Milliseconds from presentation to load, between the two times in whole milliseconds (as
    /// the projection and the fleet store hold them, so every view of the figure agrees); nil
    /// unless it loaded. A load stamped before its presentation (a device clock moved back)
    /// counts as 0.
    public var loadMilliseconds: Int64? {
        guard let loadedAt, let presentedAt else { return nil }
        return max(0, Self.milliseconds(loadedAt) - Self.milliseconds(presentedAt))
    }

    /// `t` in whole milliseconds since 1970, rounded down (before 1970 too).
    static func milliseconds(_ t: Timestamp) -> Int64 {
        let ns = t.nanosecondsSinceEpoch
        return ns >= 0 ? ns / 1_000_000 : -((-ns + 999_999) / 1_000_000)
    }
}

extension LedgerState {
    /// Every store product view of `item` (every one when nil), oldest presentation first (then
    /// by view id).
    public func productViews(item: String? = nil) -> [ProductViewRecord] {
        productViews.values.filter { item == nil || $0.item == item }
            .sorted { ($0.presentedAt ?? Timestamp(nanosecondsSinceEpoch: 0), $0.view) < ($1.presentedAt ?? Timestamp(nanosecondsSinceEpoch: 0), $1.view) }
    }

    /// The store product views on screen now (``ProductViewFields/onScreen``): one at most, since
    /// a presentation replaces the view on screen.
    public var productViewsOnScreen: [ProductViewRecord] {
        productViewOnScreen.flatMap { productViews[$0] }.map { [$0] } ?? []
    }
}

/// Store product views of one item in one style, over a period: what `report --view
/// product-views` shows (``Ledger/productViewSummary(from:to:)``, and the fleet store's).
public struct ProductViewSummary: Sendable, Hashable {
    /// The item's Apple ID.
    public var item: String
    /// Sheet or overlay.
    public var style: ProductViewStyle
    /// Presentations in the period.
    public var presented: Int
    /// Of them, those whose page loaded.
    public var loaded: Int
    /// Of them, those whose page failed to load.
    public var failed: Int
    /// Of them, those dismissed before their page loaded or failed.
    public var dismissedWithoutLoading: Int
    /// The median time from presentation to load, in milliseconds (nearest rank); nil when none loaded.
    public var medianLoadMilliseconds: Int64?
    /// The 95th percentile of the same (nearest rank).
    public var p95LoadMilliseconds: Int64?
    /// The campaign tokens the presentations passed, sorted, each once.
    public var campaignTokens: [String]

    /// A summary of these figures.
    public init(
        item: String, style: ProductViewStyle, presented: Int, loaded: Int, failed: Int, dismissedWithoutLoading: Int,
        medianLoadMilliseconds: Int64?, p95LoadMilliseconds: Int64?, campaignTokens: [String]
    ) {
        self.item = item
        self.style = style
        self.presented = presented
        self.loaded = loaded
        self.failed = failed
        self.dismissedWithoutLoading = dismissedWithoutLoading
        self.medianLoadMilliseconds = medianLoadMilliseconds
        self.p95LoadMilliseconds = p95LoadMilliseconds
        self.campaignTokens = campaignTokens
    }

    /// The nearest-rank percentile `p` (0...1) of `sorted` (ascending): the smallest value with at
    /// least a fraction `p` of the values at or below it, as PostgreSQL's `percentile_disc`.
    package static func percentile(_ p: Double, of sorted: [Int64]) -> Int64? {
        guard !sorted.isEmpty else { return nil }
        let rank = Int((p * Double(sorted.count)).rounded(.up))
        return sorted[min(max(rank, 1), sorted.count) - 1]
    }

    /// The summaries of `views` (one per item and style, sorted by item, then style).
    package static func summaries(_ views: [ProductViewFields]) -> [ProductViewSummary] {
        Dictionary(grouping: views) { [$0.item, $0.style.rawValue] }
            .map { key, views in
                let times = views.compactMap(\.loadMilliseconds).sorted()
                return ProductViewSummary(
                    item: key[0], style: ProductViewStyle(rawValue: key[1])!, presented: views.count,
                    loaded: views.count { $0.loadedAt != nil }, failed: views.count { $0.failedAt != nil },
                    dismissedWithoutLoading: views.count(where: \.dismissedWithoutLoading),
                    medianLoadMilliseconds: percentile(0.5, of: times), p95LoadMilliseconds: percentile(0.95, of: times),
                    campaignTokens: Set(views.compactMap(\.campaignToken)).sorted())
            }
            .sorted { ($0.item, $0.style.rawValue) < ($1.item, $1.style.rawValue) }
    }

    /// Whether `item` is an App Store item's Apple ID: a positive integer in decimal digits, no
    /// leading zero, at most 9223372036854775807.
    package static func isAppleID(_ item: String) -> Bool {
        let u = item.utf8
        guard (1...19).contains(u.count), u.first != UInt8(ascii: "0") else { return false }
        return u.allSatisfy { $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") } && Int64(item) != nil
    }
}
