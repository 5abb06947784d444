import Foundation

/// Which records a minimal repro keeps: some transactions, or every transaction of one user.
public enum ExtractSelection: Sendable, Hashable {
    /// These transaction ids.
    case transactions([String])
    /// Every transaction of this user id.
    case user(String)
}

/// What ``Ledger/extract(_:to:redact:configuration:)`` wrote.
public struct ExtractSummary: Sendable, Hashable {
    /// The new ledger's path.
    public var path: String
    /// Events stored in the new ledger.
    public var keptEvents: Int
    /// Events stored in the original ledger (its last seq when extracted).
    public var totalEvents: Int64
    /// The transactions kept, sorted: the ones chosen, and any that share a download id with them
    /// (``addedTransactions``).
    public var transactions: [String]
    /// Transactions kept although not chosen: a chosen transaction's purchase or restore reuses one
    /// of their download ids, so without them it would not be flagged `duplicateDownload` as it was.
    public var addedTransactions: [String]
    /// The downloads kept, sorted.
    public var downloads: [String]
    /// Restores kept (each a `restoreStarted` and the `restoreCompleted` / `restoreFailed` ending it).
    public var restores: Int
    /// Apple's records kept (`appleTransactionReceived`, `appleNotificationReceived`,
    /// `appleHistoryCompleted`): those about the kept transactions, and the complete histories
    /// of their users; with a user chosen, all of that user's. None when redacted.
    public var appleRecords: Int = 0
    /// For each seq of the new ledger (index 0 is seq 1), the seq it had in the original.
    public var originalSeqs: [Int64]
}

extension Ledger {
    /// Writes a new ledger at `path` holding only what reproduces the selected records: the
    /// catalog events of their products (and of related products), their transactions' and
    /// downloads' events, and the restores they took part in, in the original order. The
    /// cancellations the original ledger appended itself are appended again by the new one.
    ///
    /// Replaying the new ledger gives the selected transactions and downloads the same state as
    /// the original at every seq where they changed (``ExtractSummary/originalSeqs`` maps the new
    /// numbering back). Apple's records of the kept transactions come along (and, with a user
    /// chosen, every record of that user's), so the repro's divergence report shows what the
    /// original's does for them. With `redact`, every personal field is replaced by this
    /// ledger's pseudonyms (``redactor()``), as `export --redact` does, and Apple's records,
    /// whose signed bodies cannot be redacted and stay Apple's, are left out.
    ///
    /// ```swift
    /// // Attach a repro of one purchase to an in-app bug report.
    /// let repro = FileManager.default.temporaryDirectory.appending(path: "repro-t1.ledger").path
    /// let summary = try ledger.extract(.transactions(["t1"]), to: repro, redact: true)
    /// print("kept \(summary.keptEvents) of \(summary.totalEvents) events")
    /// ```
    ///
    /// Throws ``LedgerError`` with code `malformedInput` for a transaction or user not in this
    /// ledger, and `io` when `path` already exists; on any error nothing is left at `path`.
    @discardableResult
    public func extract(
        _ selection: ExtractSelection, to path: String, redact: Bool = false,
        configuration: LedgerConfiguration = LedgerConfiguration()
    ) throws -> ExtractSummary {
        var plan = try extractPlan(selection, keepApple: !redact)
        if FileManager.default.fileExists(atPath: path) {
            throw LedgerError(.io, "\(path) already exists; extract writes a new ledger")
        }
        var events: [Event] = []
        var original: [Int64] = []
        let redactor = redact ? try self.redactor() : nil
        try forEachEvent { e in
            guard plan.keeps(e) else { return true }
            original.append(e.seq)
            if !e.appendedByLedger {
                events.append(redactor.map { $0.redact(e.event) } ?? e.event)
            }
            return true
        }
        do {
            var config = configuration
            config.readOnly = false
            let repro = try Ledger(path: path, configuration: config)
            // (An erased user's events name it as the erasure left it.)
            let result = try repro.append(contentsOf: events, progress: nil, refusingErasedUsers: false)
            // The file alone holds everything (nothing left in the -wal file): it is made to be attached.
            try repro.checkpoint()
            guard result.events.count == original.count else {
                throw LedgerError(.storage, "the extract stored \(result.events.count) events where the original has \(original.count) for these records")
            }
        } catch {
            for suffix in ["", "-wal", "-shm"] { try? FileManager.default.removeItem(atPath: path + suffix) }
            if let error = error as? LedgerError, error.code == .ruleViolation || error.code == .malformedInput {
                throw LedgerError.make(.storage, "the extract does not replay as the original did: \(error.description)")
            }
            throw error
        }
        plan.summary.path = path
        plan.summary.keptEvents = original.count
        plan.summary.originalSeqs = original
        return plan.summary
    }

    /// The stored events a repro of `selection` keeps, with their original seqs, in order
    /// (including the cancellations the ledger appended).
    public func extractedEvents(_ selection: ExtractSelection) throws -> [RecordedEvent] {
        let plan = try extractPlan(selection)
        var kept: [RecordedEvent] = []
        try forEachEvent { e in
            if plan.keeps(e) { kept.append(e) }
            return true
        }
        return kept
    }

    /// One pass over the log: which transactions, downloads, products and restores to keep.
    private func extractPlan(_ selection: ExtractSelection, keepApple: Bool = true) throws -> ExtractPlan {
        var downloadsOf: [String: Set<String>] = [:]  // transaction -> its download ids, from its purchase / restore
        var ownersOf: [String: Set<String>] = [:]  // download id -> transactions naming it
        var productsOf: [String: Set<String>] = [:]  // transaction -> products it names
        var usersOf: [String: Set<String>] = [:]  // transaction -> users it names
        var related: [String: Set<String>] = [:]  // product -> related products, both ways
        struct Restore { var start: Int64; var end: Int64?; var user: String?; var transactions: Set<String> }
        var restores: [Restore] = []
        var open: Int?
        var total: Int64 = 0
        var unlocks: [String: Set<String>] = [:]  // asset pack -> products that unlock it
        var storeIDsOf: [String: Set<String>] = [:]  // transaction -> Apple's ids for it
        // Apple's records: each event's seq, the Apple ids it is about, its user, whether a history.
        var appleEvents: [(seq: Int64, ids: Set<String>, user: String?, history: Bool)] = []

        func name(_ t: String, product: String?, user: String?, downloads: [DownloadSpec]?) {
            productsOf[t, default: []].formUnion(product.map { [$0] } ?? [])
            if let user { usersOf[t, default: []].insert(user) }
            for d in downloads ?? [] {
                downloadsOf[t, default: []].insert(d.download)
                ownersOf[d.download, default: []].insert(t)
            }
        }
        try forEachEvent { e in
            total = e.seq
            // Exhaustive: a new event type must say what a repro needs of it.
            switch e.event.body {
            case .paymentQueued(let t, let p, _, let u):
                name(t, product: p, user: u, downloads: nil)
            case .transactionPurchased(let t, let p, let u, let store, let d, _):
                name(t, product: p, user: u, downloads: d)
                if let store { storeIDsOf[t, default: []].insert(store) }
            case .transactionRestored(let t, _, let p, let u, let store, let d, _):
                name(t, product: p, user: u, downloads: d)
                if let store { storeIDsOf[t, default: []].insert(store) }
                if let open { restores[open].transactions.insert(t) }
            case .appleTransactionReceived(_, _, let u), .appleNotificationReceived(_, let u):
                let ids = AppleRecord.records(in: e).reduce(into: Set<String>()) { ids, r in
                    // By Apple's id only: a record naming a kept purchase as its original is another
                    // transaction's, which the repro would show as charged and not recorded.
                    if let id = r.claims.transactionId { ids.insert(id) }
                }
                appleEvents.append((e.seq, ids, u, false))
            case .appleHistoryCompleted(_, let u):
                appleEvents.append((e.seq, [], u, true))
            case .productRegistered(let r):
                for other in r.relatedProducts {
                    related[r.product, default: []].insert(other)
                    related[other, default: []].insert(r.product)
                }
            case .restoreStarted(let u):
                if e.anomaly == nil {
                    restores.append(Restore(start: e.seq, end: nil, user: u, transactions: []))
                    open = restores.count - 1
                }
            case .restoreCompleted, .restoreFailed:
                if e.anomaly == nil, let index = open {
                    restores[index].end = e.seq
                    open = nil
                }
            case .assetPackPublished(let pack, _, let unlockedBy):
                unlocks[pack, default: []].formUnion(unlockedBy)
            case .contentVersionPublished, .transactionDeferred, .transactionFailed, .transactionRevoked, .transactionFinished,
                .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished,
                .downloadFailed, .contentCopiedOut, .contentDeleted, .contentRegistered, .assetPackBegan, .assetPackProgressed,
                .assetPackPaused, .assetPackFinished, .assetPackFailed, .assetPackRemoved, .assetPackOpened, .storePaymentPromoted,
                .personalDataErased, .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
                break
            }
            return true
        }

        var chosen: Set<String>
        var user: String?
        switch selection {
        case .transactions(let ids):
            chosen = Set(ids.map(Identifier.normalize))
            guard !chosen.isEmpty else { throw LedgerError.malformed("choose at least one transaction") }
            for t in chosen.sorted() where productsOf[t] == nil && downloadsOf[t] == nil {
                throw LedgerError.malformed("transaction \(t) is not in this ledger")
            }
        case .user(let u):
            let u = Identifier.normalize(u)
            user = u
            chosen = Set(usersOf.filter { $0.value.contains(u) }.keys)
            guard !chosen.isEmpty else { throw LedgerError.malformed("user \(u) has no transactions in this ledger") }
        }
        // Transactions that share a download id with a kept one, until none is added.
        var kept = chosen
        func close(_ start: Set<String>) {
            var queue = Array(start)
            while let t = queue.popLast() {
                for d in downloadsOf[t] ?? [] {
                    for other in ownersOf[d] ?? [] where !kept.contains(other) {
                        kept.insert(other)
                        queue.append(other)
                    }
                }
            }
        }
        close(chosen)
        func keptProducts() -> Set<String> {
            var products = kept.reduce(into: Set<String>()) { $0.formUnion(productsOf[$1] ?? []) }
            products.formUnion(products.flatMap { related[$0] ?? [] })
            return products
        }
        var products = keptProducts()
        // The asset packs a kept product unlocks, with every product that unlocks them and every
        // transaction of those: whether a pack may be opened depends on all of them.
        let packs = Set(unlocks.filter { !$0.value.isDisjoint(with: products) }.keys)
        let unlocking = packs.reduce(into: Set<String>()) { $0.formUnion(unlocks[$1] ?? []) }
        let unlockers = Set(productsOf.filter { !$0.value.isDisjoint(with: unlocking) }.keys).subtracting(kept)
        kept.formUnion(unlockers)
        close(unlockers)
        products = keptProducts().union(unlocking)
        let downloads = kept.reduce(into: Set<String>()) { $0.formUnion(downloadsOf[$1] ?? []) }
        var restoreSeqs = Set<Int64>()
        var restoreCount = 0
        for r in restores where !r.transactions.isDisjoint(with: kept) || (user != nil && r.user == user) {
            restoreSeqs.insert(r.start)
            if let end = r.end { restoreSeqs.insert(end) }
            restoreCount += 1
        }
        // Apple's records about the kept transactions, the complete histories of their users,
        // and with a user chosen, that user's.
        var appleSeqs = Set<Int64>()
        if keepApple {
            let storeIDs = kept.reduce(into: Set<String>()) { $0.formUnion(storeIDsOf[$1] ?? []) }
            let users = kept.reduce(into: Set<String>()) { $0.formUnion(usersOf[$1] ?? []) }
            for a in appleEvents {
                let about = a.history ? a.user.map(users.contains) ?? false : !a.ids.isDisjoint(with: storeIDs)
                if about || (user != nil && a.user == user) { appleSeqs.insert(a.seq) }
            }
        }
        return ExtractPlan(
            transactions: kept, downloads: downloads, products: products, packs: packs, restoreSeqs: restoreSeqs, appleSeqs: appleSeqs,
            summary: ExtractSummary(
                path: "", keptEvents: 0, totalEvents: total, transactions: kept.sorted(),
                addedTransactions: kept.subtracting(chosen).sorted(), downloads: downloads.sorted(),
                restores: restoreCount, appleRecords: appleSeqs.count, originalSeqs: []))
    }
}

/// What a repro keeps, decided by ``Ledger/extractPlan(_:)``.
private struct ExtractPlan {
    var transactions: Set<String>
    var downloads: Set<String>
    var products: Set<String>
    var packs: Set<String>
    var restoreSeqs: Set<Int64>
    var appleSeqs: Set<Int64>
    var summary: ExtractSummary

    func keeps(_ e: RecordedEvent) -> Bool {
        switch e.event.body {
        case .productRegistered(let r): products.contains(r.product)
        case .contentVersionPublished(let p, _, _), .contentDeleted(let p): products.contains(p)
        case .paymentQueued(let t, _, _, _), .transactionDeferred(let t), .transactionPurchased(let t, _, _, _, _, _),
            .transactionFailed(let t, _), .transactionRestored(let t, _, _, _, _, _, _), .transactionRevoked(let t, _, _),
            .transactionFinished(let t, _):
            transactions.contains(t)
        case .downloadStarted(let d), .downloadProgressed(let d, _, _, _), .downloadPaused(let d), .downloadResumed(let d),
            .downloadCancelled(let d, _), .downloadFinished(let d, _), .downloadFailed(let d, _),
            .contentCopiedOut(let d, _, _, _), .contentRegistered(_, let d, _):
            downloads.contains(d)
        case .restoreStarted, .restoreCompleted, .restoreFailed:
            restoreSeqs.contains(e.seq)
        case .assetPackPublished(let pack, _, _), .assetPackBegan(let pack, _), .assetPackProgressed(let pack, _, _),
            .assetPackPaused(let pack, _), .assetPackFinished(let pack, _), .assetPackFailed(let pack, _, _), .assetPackRemoved(let pack),
            .assetPackOpened(let pack, _):
            packs.contains(pack)
        case .storePaymentPromoted(let product, _):
            products.contains(product)
        case .personalDataErased:
            // Its refs are this ledger's; the repro's erased values read as the markers they are.
            false
        case .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted:
            appleSeqs.contains(e.seq)
        case .storeProductViewPresented, .storeProductViewLoaded, .storeProductViewFailed, .storeProductViewDismissed:
            // Store product views belong to no transaction and no user: a repro of either has none.
            false
        }
    }
}
