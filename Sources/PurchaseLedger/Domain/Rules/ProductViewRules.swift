/// The store product view machine as data, like ``DownloadMachine``: for each event, the phases a
/// view may be in when it arrives and the phase it leaves. docs/rules.md prints the same table.
///
/// | event | from | to |
/// |---|---|---|
/// | `storeProductViewPresented` | not presented | presented |
/// | `storeProductViewLoaded` | presented | loaded |
/// | `storeProductViewFailed` | presented | failed |
/// | `storeProductViewDismissed` | presented, loaded, failed | dismissed |
///
/// Every event is an observation, so a broken rule stores it as an anomaly: loaded, failed or
/// dismissed with the view never presented breaks `productViewNotPresented`; any other phase not
/// in the table breaks `illegalProductViewTransition` (an event that repeats the one that left
/// the view where it is changes nothing: a redelivery). A presentation while another view is on
/// screen is applied and flagged `productViewOverlap`; the view on screen is counted replaced.
enum ProductViewMachine {
    enum Phase: CaseIterable, Sendable {
        case notPresented, presented, loaded, failed, dismissed

        init(_ v: ProductViewRecord?) {
            guard let v else { self = .notPresented; return }
            switch v.state {
            case .presented: self = .presented
            case .loaded: self = .loaded
            case .failed: self = .failed
            case .dismissed: self = .dismissed
            }
        }

        var name: String {
            switch self {
            case .notPresented: "not presented"
            case .presented: "presented"
            case .loaded: "loaded"
            case .failed: "failed"
            case .dismissed: "dismissed"
            }
        }
    }

    /// One row of the table.
    struct Transition: Sendable {
        var from: [Phase]
        var to: Phase
        /// What the view must be, for the anomaly's message.
        var requirement: StaticString
    }

    static let present = Transition(from: [.notPresented], to: .presented, requirement: "a view id is presented once")
    static let load = Transition(from: [.presented], to: .loaded, requirement: "only a presented view that has not failed or left the screen can load")
    static let fail = Transition(from: [.presented], to: .failed, requirement: "only a presented view that has not loaded or left the screen can fail")
    static let dismiss = Transition(from: [.presented, .loaded, .failed], to: .dismissed, requirement: "only a view on screen can be dismissed")

    /// The row for a product view event; nil for other events.
    static func transition(_ type: EventType) -> Transition? {
        switch type {
        case .storeProductViewPresented: present
        case .storeProductViewLoaded: load
        case .storeProductViewFailed: fail
        case .storeProductViewDismissed: dismiss
        default: nil
        }
    }
}

extension Reducer {
    /// `storeProductViewPresented`.
    static func presentProductView(
        _ s: inout LedgerState, _ view: String, _ item: String, _ style: ProductViewStyle, _ tokens: (String?, String?, String?), _ e: Event
    ) throws(LedgerError) -> Outcome {
        if let existing = s.productViews[view] {
            // The same presentation delivered again (at any time) changes nothing.
            let same =
                existing.item == item && existing.style == style && existing.affiliateToken == tokens.0 && existing.campaignToken == tokens.1
                && existing.providerToken == tokens.2
            if same { return .unchanged }
            throw .violation(
                .illegalProductViewTransition,
                "store product view \(view) was already presented (item \(existing.item), \(ProductViewMachine.Phase(existing).name)); \(ProductViewMachine.present.requirement)",
                e)
        }
        // At most one view is on screen: the state keeps which, so this looks at no other.
        let replaced = s.productViewOnScreen.flatMap { s.productViews[$0]?.onScreen == true ? $0 : nil }
        if let replaced { s.productViews[replaced]?.replacedAt = e.at }
        s.productViews[view] = ProductViewRecord(
            fields: ProductViewFields(
                view: view, item: item, style: style, affiliateToken: tokens.0, campaignToken: tokens.1, providerToken: tokens.2, presentedAt: e.at,
                replaces: replaced))
        s.productViewOnScreen = view
        return replaced == nil ? .applied : .flagged(.productViewOverlap)
    }

    /// `storeProductViewLoaded`, `storeProductViewFailed` and `storeProductViewDismissed`.
    static func moveProductView(_ s: inout LedgerState, _ view: String, _ e: Event, error: StoreError? = nil) throws(LedgerError) -> Outcome {
        let transition = ProductViewMachine.transition(e.type)!
        guard let record = s.productViews[view] else {
            throw .violation(.productViewNotPresented, "store product view \(view) was never presented; \(e.type.name) needs its storeProductViewPresented first", e)
        }
        let phase = ProductViewMachine.Phase(record)
        if phase == transition.to && (transition.to != .failed || record.error == error) { return .unchanged }
        guard transition.from.contains(phase) else {
            throw .violation(.illegalProductViewTransition, "store product view \(view) is \(phase.name); \(transition.requirement)", e)
        }
        var next = record.fields
        switch transition.to {
        case .loaded:
            next.loadedAt = e.at
        case .failed:
            next.failedAt = e.at
            next.error = error
        case .dismissed:
            next.dismissedAt = e.at
        case .notPresented, .presented:
            break
        }
        s.productViews[view] = ProductViewRecord(fields: next)
        if s.productViewOnScreen == view && !next.onScreen { s.productViewOnScreen = nil }
        return .applied
    }
}
