// StoreKit 1 (SKPaymentQueue, SKDownload): the Apple-only layer. It copies StoreKit's objects into
// the recorder's value types and forwards the app's calls to the queue only after the ledger took
// them; StoreKitRecorder decides, tested on Linux. Type-checked there against stand-ins
// (Tools/storekit-check.sh). Not on visionOS, where SKDownload and the queue's download calls are
// API_UNAVAILABLE. Hosted content is deprecated: why its API is too, see DeprecatedStoreKit.swift.
#if canImport(StoreKit) && !os(visionOS)
    public import Foundation
    public import PurchaseLedger
    public import StoreKit

    /// The payment queue, recorded in a ledger: add it as the queue's observer at launch, and make the
    /// app's payment, download, copy-out, finish and restore calls through it. Keep it for the app's
    /// whole life (a static or an app-delegate property): the queue does not retain its observers.
    ///
    /// ```swift
    /// let recorder = PaymentQueueRecorder(ledger: ledger)
    /// recorder.install()                                   // SKPaymentQueue.default().add(recorder)
    /// try recorder.add(SKPayment(product: product))
    /// try recorder.finish(transaction)                     // refused while content is not copied out
    /// ```
    public final class PaymentQueueRecorder: NSObject, SKPaymentTransactionObserver, @unchecked Sendable {  // unchecked: immutable lets; SKPaymentQueue is thread-safe
        /// The platform-neutral recorder the calls and callbacks go through.
        public let recorder: StoreKitRecorder
        /// The payment queue observed, and given the app's calls once the ledger took them.
        public let queue: SKPaymentQueue

        /// Whether a purchase promoted on the App Store continues now (`paymentQueue(_:shouldAddStorePayment:for:)`).
        public let shouldAddStorePayment: @Sendable (SKPayment, SKProduct) -> Bool

        /// A recorder of `queue` into `ledger`. `onError` gets each callback the ledger could not record;
        /// `shouldAddStorePayment` answers promoted purchases (default: continue now). Call ``install()``.
        public init(
            ledger: Ledger, queue: SKPaymentQueue = .default(), onError: @escaping @Sendable (LedgerError) -> Void = { _ in },
            shouldAddStorePayment: @escaping @Sendable (SKPayment, SKProduct) -> Bool = { _, _ in true }
        ) {
            recorder = StoreKitRecorder(ledger: ledger, onError: onError)
            self.queue = queue
            self.shouldAddStorePayment = shouldAddStorePayment
            super.init()
        }

        /// Observes the queue. Call it once, early at launch, before StoreKit redelivers transactions.
        public func install() {
            queue.add(self)
        }

        /// Registers products fetched with `SKProductsRequest` (StoreKit 1 does not say a product's
        /// kind: give it).
        public func register(_ products: [SKProduct], kind: (SKProduct) -> ProductKind) throws {
            try recorder.register(products.map { ProductValue($0, kind: kind($0)) })
        }

        // MARK: - The app's calls: the ledger first, then StoreKit

        /// Records the payment, then adds it to the queue. Returns its ledger transaction id.
        @discardableResult
        public func add(_ payment: SKPayment) throws -> String {
            let id = try recorder.addPayment(
                productIdentifier: payment.productIdentifier, quantity: payment.quantity,
                applicationUsername: payment.applicationUsername)
            queue.add(payment)
            return id
        }

        /// Records the start of these downloads, then starts them (a refusal throws: nothing starts).
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func start(_ downloads: [SKDownload]) throws {
            try recorder.start(downloads.map(DownloadValue.init))
            queue.start(downloads)
        }

        /// Records the pause of these downloads, then pauses them (a refusal throws: nothing pauses).
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func pause(_ downloads: [SKDownload]) throws {
            try recorder.pause(downloads.map(DownloadValue.init))
            queue.pause(downloads)
        }

        /// Records the resumption of these downloads, then resumes them (a refusal throws: none resumes).
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func resume(_ downloads: [SKDownload]) throws {
            try recorder.resume(downloads.map(DownloadValue.init))
            queue.resume(downloads)
        }

        /// Records the user's cancellation of these downloads, then cancels them (a refusal throws).
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func cancel(_ downloads: [SKDownload]) throws {
            try recorder.cancel(downloads.map(DownloadValue.init))
            queue.cancel(downloads)
        }

        /// Copies a finished download's content out of StoreKit's cache, and records it.
        @discardableResult
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func copyContent(of download: SKDownload, to destination: URL) throws -> Int64 {
            try recorder.copyContent(of: DownloadValue(download), to: destination)
        }

        /// Finishes the transaction if the ledger allows it; a refusal (say `finishBeforeCopyOut`)
        /// throws and StoreKit never sees the finish, so it deletes nothing.
        public func finish(_ transaction: SKPaymentTransaction, discardContent: Bool = false) throws {
            try recorder.finish(PaymentTransactionValue(transaction), discardContent: discardContent)
            queue.finishTransaction(transaction)
        }

        /// Records the start of a restore, then asks the queue to restore (with `applicationUsername` when
        /// given); throws `restoreInProgress`, and restores nothing, while one runs.
        public func restoreCompletedTransactions(applicationUsername: String? = nil) throws {
            try recorder.restoreStarted(applicationUsername: applicationUsername)
            if let applicationUsername {
                queue.restoreCompletedTransactions(withApplicationUsername: applicationUsername)
            } else {
                queue.restoreCompletedTransactions()
            }
        }

        // MARK: - SKPaymentTransactionObserver

        /// Records what the queue reports of these transactions, with the queue's storefront.
        public func paymentQueue(_ queue: SKPaymentQueue, updatedTransactions transactions: [SKPaymentTransaction]) {
            let storefront = queue.storefront?.countryCode
            recorder.updatedTransactions(transactions.map { PaymentTransactionValue($0, storefront: storefront) })
        }

        /// Family Sharing (or a refund) took products away: their transactions are recorded as revoked.
        /// Declared for iOS 14, macOS 11, tvOS 14, watchOS 7: every platform this layer builds for.
        public func paymentQueue(_ queue: SKPaymentQueue, didRevokeEntitlementsForProductIdentifiers productIdentifiers: [String]) {
            recorder.revokedEntitlements(productIdentifiers: productIdentifiers)
        }

        #if !os(watchOS)
            /// A promoted purchase started on the App Store: recorded with the answer of
            /// `shouldAddStorePayment` (default: continue it now), which is what StoreKit gets.
            public func paymentQueue(_ queue: SKPaymentQueue, shouldAddStorePayment payment: SKPayment, for product: SKProduct) -> Bool {
                recorder.storePaymentPromoted(productIdentifier: product.productIdentifier, accepted: shouldAddStorePayment(payment, product))
            }
        #endif

        /// Records the finish of these transactions when the app finished them without the recorder (a
        /// finish made through ``finish(_:discardContent:)`` is recorded already).
        public func paymentQueue(_ queue: SKPaymentQueue, removedTransactions transactions: [SKPaymentTransaction]) {
            recorder.removedTransactions(transactions.map { PaymentTransactionValue($0) })
        }

        /// Records what the queue reports of these downloads.
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public func paymentQueue(_ queue: SKPaymentQueue, updatedDownloads downloads: [SKDownload]) {
            recorder.updatedDownloads(downloads.map(DownloadValue.init))
        }

        /// Records that the restore completed.
        public func paymentQueueRestoreCompletedTransactionsFinished(_ queue: SKPaymentQueue) {
            recorder.restoreCompleted()
        }

        /// Records that the restore failed, with StoreKit's error.
        public func paymentQueue(_ queue: SKPaymentQueue, restoreCompletedTransactionsFailedWithError error: any Error) {
            recorder.restoreFailed(StoreError(error))
        }
    }

    extension PaymentTransactionValue {
        /// What the recorder reads of a transaction (`storefront`: the queue's, when the callback came).
        public init(_ t: SKPaymentTransaction, storefront: String? = nil) {
            self.init(
                handle: Int(bitPattern: ObjectIdentifier(t)),
                state: PaymentTransactionState(rawValue: t.transactionState.rawValue) ?? .purchasing,
                productIdentifier: t.payment.productIdentifier, quantity: t.payment.quantity,
                applicationUsername: t.payment.applicationUsername, transactionIdentifier: t.transactionIdentifier,
                originalTransactionIdentifier: t.original?.transactionIdentifier, error: t.error.map(StoreError.init),
                downloads: deprecatedStoreKit.downloads(of: t), transactionDate: t.transactionDate, storefront: storefront)
        }
    }

    extension DownloadValue {
        /// What the recorder reads of a download.
        @available(*, deprecated, message: "StoreKit deprecated hosted content (SKDownload) in iOS 16, macOS 13, tvOS 16 and watchOS 9; the ledger still records it")
        public init(_ d: SKDownload) {
            self.init(
                transactionHandle: Int(bitPattern: ObjectIdentifier(d.transaction)), contentIdentifier: d.contentIdentifier,
                contentVersion: d.contentVersion, contentLength: d.expectedContentLength,
                state: DownloadState(rawValue: d.state.rawValue) ?? .waiting, progress: Double(d.progress),
                timeRemaining: d.timeRemaining, contentURL: d.contentURL, error: d.error.map(StoreError.init))
        }
    }

    extension ProductValue {
        /// What the recorder reads of a product; StoreKit 1 does not say its `kind`, so the app gives it.
        public init(_ p: SKProduct, kind: ProductKind) {
            let content = deprecatedStoreKit.hostedContent(of: p)
            self.init(
                productIdentifier: p.productIdentifier, kind: kind, price: p.price.decimalValue,
                currencyCode: p.priceLocale.currency?.identifier ?? "XXX", isDownloadable: content.isDownloadable,
                contentVersion: content.version, contentLengths: content.lengths, title: p.localizedTitle)
        }
    }
#endif
