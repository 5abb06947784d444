/// An enum stored in ledger files by a number of its own, written out case by case: reordering or
/// adding cases never changes what an existing file means. The numbers are pinned by a test; never
/// change one.
protocol StoredCode: CaseIterable {
    var storedCode: UInt8 { get }
}

extension StoredCode {
    /// The case stored as `code`, or nil for a number no case has (damaged or newer data).
    init?(storedCode code: UInt64) {
        guard let match = Self.allCases.first(where: { UInt64($0.storedCode) == code }) else { return nil }
        self = match
    }

    /// The case stored as `code`; damaged or newer data throws.
    static func stored(_ code: UInt64) throws(BinaryReader.Failure) -> Self {
        guard let value = Self(storedCode: code) else { throw BinaryReader.Failure(message: "bad \(Self.self) code \(code)") }
        return value
    }
}

/// In every `productRegistered` payload of the log.
extension ProductKind: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .consumable: 0
        case .nonConsumable: 1
        case .autoRenewable: 2
        case .nonRenewing: 3
        }
    }
}

/// In snapshot pages.
extension TransactionStatus: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .purchasing: 0
        case .deferred: 1
        case .purchased: 2
        case .failed: 3
        case .restored: 4
        }
    }
}

/// In snapshot pages.
extension DownloadStatus: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .waiting: 0
        case .active: 1
        case .paused: 2
        case .finished: 3
        case .failed: 4
        case .cancelled: 5
        }
    }
}

/// In `downloadCancelled` payloads (field 2, absent for `user`) and in snapshot pages (as the
/// code plus one, 0: no reason).
extension CancelReason: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .user: 0
        case .transactionFinished: 1
        }
    }
}

/// In purchase and restore payloads (their terms) and snapshot pages.
extension StoreEnvironment: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .production: 0
        case .sandbox: 1
        case .xcode: 2
        }
    }
}

/// In purchase and restore payloads (their terms) and snapshot pages.
extension Ownership: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .purchased: 0
        case .familyShared: 1
        }
    }
}

/// In purchase and restore payloads (their terms) and snapshot pages.
extension OfferType: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .introductory: 1
        case .promotional: 2
        case .code: 3
        case .winBack: 4
        }
    }
}

/// In snapshot pages, as the code plus one (0: no price).
extension PriceSource: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .event: 0
        case .catalog: 1
        }
    }
}

/// In every `storeProductViewPresented` payload of the log (absent: sheet), and in snapshots.
extension ProductViewStyle: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .sheet: 0
        case .overlay: 1
        }
    }
}

/// In snapshots.
extension ProductViewStatus: StoredCode {
    var storedCode: UInt8 {
        switch self {
        case .presented: 0
        case .loaded: 1
        case .failed: 2
        case .dismissed: 3
        }
    }
}
