/// A rule of the ledger, by its stable name.
///
/// Names appear in errors, in `verify` output and in the anomaly flags of stored observations; they
/// never change. Each rule also has a small stable number used on disk.
public struct Rule: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The stable name (`finishBeforeCopyOut`), as errors, `verify` output and anomaly flags show it.
    public let name: String
    /// The on-disk number of the rule (1...). Never reused.
    public let code: UInt8

    private init(_ name: String, _ code: UInt8) {
        self.name = name
        self.code = code
    }

    /// The rule's ``name``.
    public var description: String { name }

    /// `paymentQueued`, `contentDeleted` or an observation names a product never registered.
    public static let unknownProduct = Rule("unknownProduct", 1)
    /// A transaction id reused for another payment, or an observation contradicting the record.
    public static let duplicateTransaction = Rule("duplicateTransaction", 2)
    /// Finishing a transaction the store is still processing (the real store throws).
    public static let finishWhilePurchasing = Rule("finishWhilePurchasing", 3)
    /// Finishing a transaction waiting for Ask to Buy approval.
    public static let finishWhileDeferred = Rule("finishWhileDeferred", 4)
    /// A second finish of one transaction.
    public static let alreadyFinished = Rule("alreadyFinished", 5)
    /// Finishing while finished content was never copied out: the store would delete it.
    public static let finishBeforeCopyOut = Rule("finishBeforeCopyOut", 6)
    /// Using a download's content URL after its transaction finished.
    public static let contentURLAfterFinish = Rule("contentURLAfterFinish", 7)
    /// Starting, pausing, resuming or cancelling a download of a finished transaction.
    public static let downloadAfterFinish = Rule("downloadAfterFinish", 8)
    /// A download command, or observation, that its current state does not allow.
    public static let illegalDownloadTransition = Rule("illegalDownloadTransition", 9)
    /// Copying content out of a download that has not finished.
    public static let copyOutBeforeFinished = Rule("copyOutBeforeFinished", 10)
    /// Registering a known content URL under another download id.
    public static let contentKeyMismatch = Rule("contentKeyMismatch", 11)
    /// Starting a restore while one is running.
    public static let restoreInProgress = Rule("restoreInProgress", 12)
    /// A transaction observation that makes no sense in the transaction's state.
    public static let illegalTransactionTransition = Rule("illegalTransactionTransition", 13)
    /// A restore outcome with no restore running.
    public static let noRestoreInProgress = Rule("noRestoreInProgress", 14)
    /// Downloads reusing a download id already in the ledger.
    public static let duplicateDownload = Rule("duplicateDownload", 15)
    /// A purchase or restore whose store signature did not verify (StoreKit 2's
    /// `VerificationResult.unverified`): kept, never applied.
    public static let unverifiedTransaction = Rule("unverifiedTransaction", 16)
    /// An asset pack reported at a version below the one already on the device: versions never
    /// go down.
    public static let assetPackVersionDown = Rule("assetPackVersionDown", 17)
    /// Opening an asset pack that is not on the device at the version needed (never finished,
    /// still downloading, removed), or whose unlocking purchase is not in force (refunded,
    /// revoked, never made).
    public static let assetPackNotReady = Rule("assetPackNotReady", 18)
    /// A purchase, restore or revocation that states a field (store id, product, quantity, price,
    /// currency, storefront, environment, ownership, offer, revocation) otherwise than the signed
    /// transaction it carries: applied as reported, flagged, never trusted as Apple's.
    public static let signedFieldsDiffer = Rule("signedFieldsDiffer", 19)
    /// A store product view loaded, failed or dismissed that was never presented.
    public static let productViewNotPresented = Rule("productViewNotPresented", 20)
    /// A store product view event its view's state does not allow: a load after a failure or a
    /// dismissal, a failure after a load or a dismissal, a view id presented again.
    public static let illegalProductViewTransition = Rule("illegalProductViewTransition", 21)
    /// A store product view presented while another was on screen: recorded, flagged, and the
    /// one on screen counted as replaced.
    public static let productViewOverlap = Rule("productViewOverlap", 22)

    /// Every rule, in code order.
    public static let all: [Rule] = [
        .unknownProduct, .duplicateTransaction, .finishWhilePurchasing, .finishWhileDeferred, .alreadyFinished,
        .finishBeforeCopyOut, .contentURLAfterFinish, .downloadAfterFinish, .illegalDownloadTransition,
        .copyOutBeforeFinished, .contentKeyMismatch, .restoreInProgress, .illegalTransactionTransition,
        .noRestoreInProgress, .duplicateDownload, .unverifiedTransaction, .assetPackVersionDown, .assetPackNotReady,
        .signedFieldsDiffer, .productViewNotPresented, .illegalProductViewTransition, .productViewOverlap,
    ]

    /// The rule named `name`; nil for a name no rule has.
    public init?(name: String) {
        guard let rule = Rule.all.first(where: { $0.name == name }) else { return nil }
        self = rule
    }

    init?(code: UInt8) {
        guard code >= 1, Int(code) <= Rule.all.count else { return nil }
        self = Rule.all[Int(code) - 1]
    }

    /// Decodes a rule from its name; throws `DecodingError` for a name no rule has.
    public init(from decoder: any Decoder) throws {
        let name = try decoder.singleValueContainer().decode(String.self)
        guard let rule = Rule(name: name) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "unknown rule \(name)"))
        }
        self = rule
    }

    /// Encodes the rule as its ``name``.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(name)
    }
}
