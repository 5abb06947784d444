public import Foundation
public import PurchaseLedger

/// Turns StoreKit's callbacks into ledger events, and puts the ledger's rules in front of the
/// app's own calls: a start, pause, resume, cancel, copy-out or finish that breaks a rule throws
/// the ledger's error **before StoreKit sees it** (so a finish that would delete content not yet
/// copied out never reaches `finishTransaction`).
///
/// This is the platform-neutral core, fed with value types (``PaymentTransactionValue``,
/// ``DownloadValue``, ``StoreKit2TransactionValue``). On Apple platforms, `PaymentQueueRecorder`
/// (StoreKit 1) and the `StoreKitRecorder` StoreKit 2 methods copy StoreKit's objects into them.
///
/// How StoreKit maps to the contract's events (docs/storekit.md has the full table):
/// - A payment the app adds is a `paymentQueued` with an id the recorder chooses (a UUID, or yours),
///   bound to the `SKPaymentTransaction` object when StoreKit reports it as purchasing; later
///   callbacks of the same object, and after a relaunch the store's transaction identifier, find it
///   again. A transaction first seen in another state (bought outside the app, redelivered after a
///   reinstall) gets the id `sk1-<store id>`.
/// - `purchased`, `failed`, `deferred`, `restored` are the matching observations; a download is
///   `<transaction>-<contentIdentifier>`.
/// - StoreKit 2 transactions are `sk2-<id>`.
///
/// StoreKit's callbacks cannot throw: what the ledger refuses there goes to `onError`.
///
/// On Apple platforms the recorder also has methods that take StoreKit's own types:
/// `startStoreKit2()`, `purchase(_:options:)`, `finish(_:)` and `register(_:)` for StoreKit 2, and
/// `recordAssetPackUpdates(from:)`, `remove(assetPackWithID:from:)` and
/// `checkForAssetPackUpdates(with:)` for Background Assets.
///
/// ## Topics
///
/// ### Creating a recorder
/// - ``init(ledger:onError:clock:)``
/// - ``ledger``
///
/// ### Products
/// - ``register(_:)``
///
/// ### StoreKit 1: the app's calls
/// - ``addPayment(productIdentifier:quantity:applicationUsername:transactionID:)``
/// - ``start(_:)``
/// - ``pause(_:)``
/// - ``resume(_:)``
/// - ``cancel(_:)``
/// - ``copyContent(of:to:)``
/// - ``finish(_:discardContent:)``
/// - ``restoreStarted(applicationUsername:)``
///
/// ### StoreKit 1: what the queue reports
/// - ``updatedTransactions(_:)``
/// - ``updatedDownloads(_:)``
/// - ``removedTransactions(_:)``
/// - ``storePaymentPromoted(productIdentifier:accepted:)``
/// - ``restoreCompleted()``
/// - ``restoreFailed(_:)``
/// - ``revokedEntitlements(productIdentifiers:)``
///
/// ### StoreKit 2
/// - ``record(_:from:)``
/// - ``StoreKit2Source``
/// - ``unverified(storeKit2:product:purchaseDate:error:)``
/// - ``finish(storeKit2:)``
///
/// ### Asset packs
/// - ``assetPackPublished(id:version:unlockedBy:)``
/// - ``assetPackStatusUpdate(_:)``
/// - ``assetPackRemoved(id:)``
/// - ``openAssetPack(id:version:)``
///
/// ### Store product views
/// - ``productViewPresented(_:style:view:)``
/// - ``productViewLoaded(view:)``
/// - ``productViewFailed(view:error:)``
/// - ``productViewDismissed(view:)``
/// - ``ProductViewParameters``
///
/// ### Ids in the ledger
/// - ``downloadID(transaction:content:)``
/// - ``transactionID(storeKit2:)``
public final class StoreKitRecorder: Sendable {
    /// The ledger the events are appended to.
    public let ledger: Ledger
    let onError: @Sendable (LedgerError) -> Void
    let clock: @Sendable () -> Timestamp
    let bindings = Locked(Bindings())

    /// StoreKit objects seen in this process, by handle.
    struct Bindings {
        var transactions: [Int: String] = [:]
        /// Store product views on screen: their controller or overlay, to the view id.
        var productViews: [ObjectIdentifier: String] = [:]
    }

    /// - Parameters:
    ///   - onError: called with each callback the ledger could not record (a malformed value, an
    ///     event a rule refuses), so the app can log it; the callback itself never fails.
    ///   - clock: the time given to events StoreKit reports without one.
    public init(
        ledger: Ledger, onError: @escaping @Sendable (LedgerError) -> Void = { _ in },
        clock: @escaping @Sendable () -> Timestamp = { Timestamp.now }
    ) {
        self.ledger = ledger
        self.onError = onError
        self.clock = clock
    }

    // MARK: - Products

    /// Registers products (from `SKProductsResponse` or `Product.products(for:)`); a product whose
    /// details did not change is not registered again.
    public func register(_ products: [ProductValue]) throws {
        let state = ledger.currentState
        let events = products.compactMap { p -> Event? in
            let registration = Self.registration(p)
            if state.products[Identifier.normalize(p.productIdentifier)]?.registration == registration { return nil }
            return Event(at: clock(), .productRegistered(registration))
        }
        if !events.isEmpty { try ledger.append(contentsOf: events) }
    }

    static func registration(_ p: ProductValue) -> ProductRegistration {
        var contents: [ContentSpec] = []
        if p.isDownloadable, let text = p.contentVersion, let version = ContentVersion(text) {
            for (i, length) in p.contentLengths.enumerated() {
                contents.append(
                    ContentSpec(
                        content: i == 0 ? p.productIdentifier : "\(p.productIdentifier).\(i + 1)",
                        contentVersion: version, contentLength: length))
            }
        }
        return ProductRegistration(
            product: Identifier.normalize(p.productIdentifier), kind: p.kind, price: "\(p.price)",
            currency: p.currencyCode, downloadable: p.isDownloadable, contents: contents, title: p.title)
    }

    // MARK: - StoreKit 1: the app's calls

    /// Records a payment the app is about to add to the queue; returns its transaction id. Throws
    /// (`unknownProduct`...) before the payment reaches StoreKit.
    @discardableResult
    public func addPayment(
        productIdentifier: String, quantity: Int = 1, applicationUsername: String? = nil,
        transactionID: String? = nil
    ) throws -> String {
        let id = Identifier.normalize(transactionID ?? UUID().uuidString.lowercased())
        try ledger.append(Event(at: clock(), .paymentQueued(transaction: id, product: productIdentifier, quantity: quantity, user: applicationUsername)))
        return id
    }

    /// Records the start of these downloads; throws (`downloadAfterFinish`,
    /// `illegalDownloadTransition`...) and records nothing when one may not start.
    public func start(_ downloads: [DownloadValue]) throws {
        try command(downloads) { .downloadStarted(download: $0) }
    }

    /// Records the pause of these downloads; throws (`illegalDownloadTransition`,
    /// `downloadAfterFinish`...) and records nothing when one may not pause.
    public func pause(_ downloads: [DownloadValue]) throws {
        try command(downloads) { .downloadPaused(download: $0) }
    }

    /// Records the resumption of these downloads; throws (`illegalDownloadTransition`,
    /// `downloadAfterFinish`...) and records nothing when one may not resume.
    public func resume(_ downloads: [DownloadValue]) throws {
        try command(downloads) { .downloadResumed(download: $0) }
    }

    /// Records the user's cancellation of these downloads (reason `user`); throws
    /// (`illegalDownloadTransition`, `downloadAfterFinish`...) and records nothing when one may not be
    /// cancelled.
    public func cancel(_ downloads: [DownloadValue]) throws {
        try command(downloads) { .downloadCancelled(download: $0, reason: .user) }
    }

    func command(_ downloads: [DownloadValue], _ body: (String) -> EventBody) throws {
        let at = clock()
        try ledger.append(contentsOf: try downloads.map { Event(at: at, body(try downloadID($0))) })
    }

    /// Copies a finished download's content (the directory at its `contentURL`) to `destination`,
    /// replacing what is there, and records the copy-out with the bytes copied. Checks the ledger
    /// first: a download not finished (`copyOutBeforeFinished`) or whose transaction is finished
    /// (`contentURLAfterFinish`) throws before any file is touched.
    @discardableResult
    public func copyContent(of download: DownloadValue, to destination: URL) throws -> Int64 {
        let id = try downloadID(download)
        let probe = Event(at: clock(), .contentCopiedOut(download: id, destination: destination.path, checksum: nil, bytesCopied: nil))
        _ = try ledger.check([probe])
        guard let source = download.contentURL ?? ledger.currentState.contentURL(for: id).flatMap(URL.init(string:)) else {
            throw LedgerError.make(.io, "download \(id) has no content URL to copy from")
        }
        let files = FileManager.default
        do {
            if files.fileExists(atPath: destination.path) { try files.removeItem(at: destination) }
            try files.createDirectory(at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
            try files.copyItem(at: source, to: destination)
        } catch {
            throw LedgerError.make(.io, "copying the content of \(id) to \(destination.path): \(error.localizedDescription)")
        }
        let bytes = Self.size(of: destination)
        try ledger.append(Event(at: probe.at, .contentCopiedOut(download: id, destination: destination.path, checksum: nil, bytesCopied: bytes)))
        return bytes
    }

    /// The bytes of a file, or of every file under a directory.
    static func size(of url: URL) -> Int64 {
        let files = FileManager.default
        var isDirectory: ObjCBool = false
        guard files.fileExists(atPath: url.path, isDirectory: &isDirectory) else { return 0 }
        if !isDirectory.boolValue { return (try? files.attributesOfItem(atPath: url.path)[.size] as? Int64) ?? 0 }
        var total: Int64 = 0
        for case let path as String in files.enumerator(atPath: url.path) ?? NSEnumerator() {
            let attributes = try? files.attributesOfItem(atPath: url.appendingPathComponent(path).path)
            if attributes?[.type] as? FileAttributeType == .typeRegular { total += (attributes?[.size] as? Int64) ?? 0 }
        }
        return total
    }

    /// Records the finish of a transaction; throws (`finishBeforeCopyOut`, `finishWhilePurchasing`,
    /// `alreadyFinished`...) when the ledger refuses it, and then the app must not call
    /// `finishTransaction`. Early finishes cancel the started downloads, as the store would.
    public func finish(_ transaction: PaymentTransactionValue, discardContent: Bool = false) throws {
        let id = try transactionID(transaction)
        try ledger.append(Event(at: clock(), .transactionFinished(transaction: id, discardContent: discardContent)))
    }

    /// Records a restore the app starts (`restoreCompletedTransactions`); throws
    /// `restoreInProgress` while one runs.
    public func restoreStarted(applicationUsername: String? = nil) throws {
        try ledger.append(Event(at: clock(), .restoreStarted(user: applicationUsername)))
    }

    // MARK: - StoreKit 1: what the queue reports

    /// `paymentQueue(_:updatedTransactions:)`. Each transaction's events are appended on their own,
    /// so one the ledger cannot take does not hold back the others.
    public func updatedTransactions(_ transactions: [PaymentTransactionValue]) {
        for t in transactions {
            record { try self.events(for: t) }
        }
    }

    /// `paymentQueue(_:updatedDownloads:)`.
    public func updatedDownloads(_ downloads: [DownloadValue]) {
        for d in downloads {
            record { try self.events(for: d) }
        }
    }

    /// `paymentQueue(_:removedTransactions:)`: StoreKit finished these. A finish the app made
    /// through the recorder is recorded already; one it made around the recorder is recorded now,
    /// with `discardContent` when content was left behind (StoreKit deleted it) and that lapse
    /// reported to `onError`.
    public func removedTransactions(_ transactions: [PaymentTransactionValue]) {
        for t in transactions {
            guard let id = bindings.withLock({ $0.transactions[t.handle] }) ?? lookUp(storeID: t.transactionIdentifier) else { continue }
            bindings.withLock { _ = $0.transactions.removeValue(forKey: t.handle) }
            guard let existing = ledger.currentState.transactions[id], !existing.finished else { continue }
            do {
                try ledger.append(Event(at: clock(), .transactionFinished(transaction: id, discardContent: false)))
            } catch let error as LedgerError where error.rule == .finishBeforeCopyOut {
                onError(error)
                record { [Event(at: self.clock(), .transactionFinished(transaction: id, discardContent: true))] }
            } catch let error as LedgerError {
                onError(error)
            } catch {
                onError(LedgerError.make(.storage, "\(error)"))
            }
        }
    }

    /// `paymentQueue(_:shouldAddStorePayment:for:)`: a purchase started on the App Store (a
    /// promoted in-app purchase). Records the product and the app's answer, and returns the answer
    /// for the delegate to return. An accepted payment then reaches `updatedTransactions` as any
    /// other; a declined one the app may add later with ``addPayment(productIdentifier:quantity:applicationUsername:transactionID:)``.
    @discardableResult
    public func storePaymentPromoted(productIdentifier: String, accepted: Bool) -> Bool {
        record { [Event(at: self.clock(), .storePaymentPromoted(product: productIdentifier, accepted: accepted))] }
        return accepted
    }

    /// `paymentQueueRestoreCompletedTransactionsFinished(_:)`.
    public func restoreCompleted() {
        record { [Event(at: self.clock(), .restoreCompleted)] }
    }

    /// `paymentQueue(_:restoreCompletedTransactionsFailedWithError:)`.
    public func restoreFailed(_ error: StoreError) {
        record { [Event(at: self.clock(), .restoreFailed(error: error))] }
    }

    /// Appends what `make` gives, reporting instead of throwing.
    /// Reports a callback the recorder could not turn into an event.
    func unrecorded(_ message: String) {
        onError(LedgerError.make(.malformedInput, message))
    }

    /// Whether it was stored (false: reported to `onError`).
    @discardableResult
    func record(_ make: () throws -> [Event]) -> Bool {
        do {
            let events = try make()
            if !events.isEmpty { try ledger.append(contentsOf: events) }
            return true
        } catch let error as LedgerError {
            onError(error)
        } catch {
            onError(LedgerError.make(.storage, "\(error)"))
        }
        return false
    }

    // MARK: - Mapping

    /// The events one `updatedTransactions` entry stands for.
    func events(for t: PaymentTransactionValue) throws -> [Event] {
        let now = clock()
        // The App Store's own time for a purchase or restore; the device clock for the rest.
        let at = (t.state == .purchased || t.state == .restored ? t.transactionDate.map(Timestamp.init) : nil) ?? now
        let terms = PurchaseTerms(storefront: t.storefront.flatMap { PurchaseTerms.isUpperLetters($0, count: 3) ? $0 : nil })
        let state = ledger.currentState
        let (id, isNew) = resolve(t, state)
        var events: [Event] = []
        // A transaction the ledger has not seen starts with its payment, unless it is a restore
        // (which starts a transaction of its own) or a purchase (which may name its product).
        let needsPayment = isNew && state.transactions[id] == nil && [.purchasing, .deferred, .failed].contains(t.state)
        if needsPayment {
            events.append(Event(at: now, .paymentQueued(transaction: id, product: t.productIdentifier, quantity: t.quantity, user: t.applicationUsername)))
        }
        switch t.state {
        case .purchasing:
            break
        case .deferred:
            events.append(Event(at: now, .transactionDeferred(transaction: id)))
        case .purchased:
            events.append(
                Event(
                    at: at,
                    .transactionPurchased(
                        transaction: id, product: t.productIdentifier, user: t.applicationUsername,
                        storeTransactionId: t.transactionIdentifier, downloads: try specs(id, t.downloads), terms: terms)))
        case .failed:
            let error = t.error ?? StoreError(domain: "SKErrorDomain", code: 0, message: "unknown error")
            events.append(Event(at: now, .transactionFailed(transaction: id, error: error)))
        case .restored:
            let original =
                lookUp(storeID: t.originalTransactionIdentifier)
                ?? "sk1-" + (t.originalTransactionIdentifier ?? t.transactionIdentifier ?? "unknown")
            events.append(
                Event(
                    at: at,
                    .transactionRestored(
                        transaction: id, originalTransaction: original, product: t.productIdentifier,
                        user: t.applicationUsername, storeTransactionId: t.transactionIdentifier,
                        downloads: try specs(id, t.downloads), terms: terms)))
        }
        return events
    }

    /// The ledger id of a StoreKit transaction, binding its handle; true when it is new to the ledger.
    func resolve(_ t: PaymentTransactionValue, _ state: LedgerState) -> (String, Bool) {
        if let id = bindings.withLock({ $0.transactions[t.handle] }) { return (id, false) }
        let bound = Set(bindings.withLock { $0.transactions.values })
        var id: String?
        if let known = lookUp(storeID: t.transactionIdentifier, in: state) {
            id = known
        } else if t.state != .restored {
            // A payment recorded by addPayment (or before a relaunch) that StoreKit now reports:
            // the oldest unbound one of the same product, quantity and user still in progress.
            let product = Identifier.normalize(t.productIdentifier)
            let user = t.applicationUsername.map(Identifier.normalize)
            id =
                state.transactions.values
                .filter {
                    ($0.state == .purchasing || $0.state == .deferred) && !$0.finished && $0.product == product
                        && $0.quantity == t.quantity && $0.user == user && !bound.contains($0.transaction)
                }
                .min { ($0.queuedAt ?? Timestamp(nanosecondsSinceEpoch: .max), $0.transaction) < ($1.queuedAt ?? Timestamp(nanosecondsSinceEpoch: .max), $1.transaction) }?
                .transaction
        }
        let isNew = id == nil
        let resolved = id ?? t.transactionIdentifier.map { "sk1-" + $0 } ?? UUID().uuidString.lowercased()
        bindings.withLock { $0.transactions[t.handle] = resolved }
        return (Identifier.normalize(resolved), isNew)
    }

    /// The ledger transaction holding this store transaction identifier.
    func lookUp(storeID: String?, in given: LedgerState? = nil) -> String? {
        guard let storeID else { return nil }
        let state = given ?? ledger.currentState
        if state.transactions["sk1-" + storeID] != nil { return "sk1-" + storeID }
        return state.transactions.values.first { $0.storeTransactionId == storeID }?.transaction
    }

    func transactionID(_ t: PaymentTransactionValue) throws -> String {
        if let id = bindings.withLock({ $0.transactions[t.handle] }) ?? lookUp(storeID: t.transactionIdentifier) { return id }
        throw LedgerError.make(.malformedInput, "StoreKit transaction \(t.transactionIdentifier ?? "(no identifier yet)") of \(t.productIdentifier) is not in the ledger")
    }

    func downloadID(_ d: DownloadValue) throws -> String {
        guard let transaction = bindings.withLock({ $0.transactions[d.transactionHandle] }) else {
            throw LedgerError.make(.malformedInput, "download \(d.contentIdentifier) belongs to a transaction the recorder has not seen")
        }
        return Self.downloadID(transaction: transaction, content: d.contentIdentifier)
    }

    /// `<transaction>-<contentIdentifier>`: unique in the ledger, since transaction ids are.
    public static func downloadID(transaction: String, content: String) -> String {
        Identifier.normalize(transaction + "-" + content)
    }

    func specs(_ transaction: String, _ downloads: [DownloadValue]) throws -> [DownloadSpec]? {
        guard !downloads.isEmpty else { return nil }
        return try downloads.map { d in
            guard let version = ContentVersion(d.contentVersion) else {
                throw LedgerError.make(.malformedInput, "download \(d.contentIdentifier) has the content version \"\(d.contentVersion)\", which is not dotted integers")
            }
            return DownloadSpec(
                download: Self.downloadID(transaction: transaction, content: d.contentIdentifier), content: d.contentIdentifier,
                contentVersion: version, contentLength: max(0, d.contentLength))
        }
    }

    /// The events one `updatedDownloads` entry stands for. Waiting, and a state the ledger already
    /// shows (the app's own pause, the ledger's own cancellation at an early finish), add nothing.
    func events(for d: DownloadValue) throws -> [Event] {
        let id = try downloadID(d)
        let at = clock()
        let recorded = ledger.currentState.downloads[id]
        switch d.state {
        case .waiting:
            return []
        case .active:
            // A value StoreKit never sends (NaN, an infinity) reads as the nearest valid one rather
            // than making the ledger refuse the whole callback.
            let progress = d.progress.isFinite ? min(1, max(0, d.progress)) : 0
            if recorded?.state == .active && recorded?.progress == progress { return [] }
            return [
                Event(
                    at: at,
                    .downloadProgressed(
                        download: id, progress: progress, bytesWritten: nil,
                        timeRemaining: d.timeRemaining.isFinite && d.timeRemaining >= 0 ? d.timeRemaining : -1))
            ]
        case .paused:
            return recorded?.state == .paused ? [] : [Event(at: at, .downloadPaused(download: id))]
        case .finished:
            let url = d.contentURL?.absoluteString ?? ""
            if recorded?.state == .finished { return [] }
            return [Event(at: at, .downloadFinished(download: id, contentURL: url))]
        case .failed:
            if recorded?.state == .failed { return [] }
            let error = d.error ?? StoreError(domain: "SKErrorDomain", code: 0, message: "unknown error")
            return [Event(at: at, .downloadFailed(download: id, error: error))]
        case .cancelled:
            return recorded?.state == .cancelled ? [] : [Event(at: at, .downloadCancelled(download: id, reason: .user))]
        }
    }
}

extension Timestamp {
    /// The time of a `Date`, to the microsecond.
    public init(_ date: Date) {
        self.init(nanosecondsSinceEpoch: Int64((date.timeIntervalSince1970 * 1_000_000).rounded()) * 1000)
    }
}
