import Testing
@testable import PurchaseLedger

/// The numbers enums are stored by in ledger files. Never change one: an existing file would
/// change meaning. Before the codes were explicit, the format stored each case's position in its
/// declaration; the codes equal those positions, so files written then read the same.
@Suite struct StoredCodeTests {
    @Test func productKindsInTheLog() {
        #expect(ProductKind.consumable.storedCode == 0)
        #expect(ProductKind.nonConsumable.storedCode == 1)
        #expect(ProductKind.autoRenewable.storedCode == 2)
        #expect(ProductKind.nonRenewing.storedCode == 3)
        expectRoundTrips(ProductKind.self)
    }

    @Test func statesAndReasonsInSnapshots() {
        #expect(TransactionStatus.allCases.map(\.storedCode) == [0, 1, 2, 3, 4])
        #expect(TransactionStatus.allCases == [.purchasing, .deferred, .purchased, .failed, .restored])
        #expect(DownloadStatus.allCases.map(\.storedCode) == [0, 1, 2, 3, 4, 5])
        #expect(DownloadStatus.allCases == [.waiting, .active, .paused, .finished, .failed, .cancelled])
        #expect(CancelReason.user.storedCode == 0 && CancelReason.transactionFinished.storedCode == 1)
        expectRoundTrips(TransactionStatus.self)
        expectRoundTrips(DownloadStatus.self)
        expectRoundTrips(CancelReason.self)
    }

    @Test func purchaseTermsInTheLogAndSnapshots() {
        #expect(StoreEnvironment.allCases.map(\.storedCode) == [0, 1, 2])
        #expect(StoreEnvironment.allCases == [.production, .sandbox, .xcode])
        #expect(Ownership.allCases.map(\.storedCode) == [0, 1])
        #expect(Ownership.allCases == [.purchased, .familyShared])
        #expect(OfferType.allCases.map(\.storedCode) == [1, 2, 3, 4])
        #expect(OfferType.allCases == [.introductory, .promotional, .code, .winBack])
        #expect(PriceSource.allCases.map(\.storedCode) == [0, 1])
        #expect(PriceSource.allCases == [.event, .catalog])
        expectRoundTrips(StoreEnvironment.self)
        expectRoundTrips(Ownership.self)
        expectRoundTrips(OfferType.self)
        expectRoundTrips(PriceSource.self)
    }

    @Test func aCodeNoCaseHasIsRefused() {
        #expect(ProductKind(storedCode: 4) == nil)
        #expect(DownloadStatus(storedCode: 200) == nil)
        // A payload naming an unknown kind is damage, named as such, not a crash.
        var w = BinaryWriter()
        PayloadCodec.encode(.productRegistered(ProductRegistration(product: "p", kind: .nonRenewing, price: "1", currency: "USD", downloadable: false)), into: &w)
        func decodes(_ bytes: [UInt8]) -> EventBody? {
            bytes.withUnsafeBytes { buffer in
                var reader = BinaryReader(buffer)
                return try? PayloadCodec.decode(.productRegistered, &reader, personal: .empty)
            }
        }
        var bytes = w.bytes
        guard case .productRegistered(let r)? = decodes(bytes) else { Issue.record("does not decode"); return }
        #expect(r.kind == .nonRenewing)
        let key = bytes.firstIndex(of: 2 << 3)!  // field 2 (the kind), varint
        #expect(bytes[key + 1] == 3)
        bytes[key + 1] = 9
        #expect(decodes(bytes) == nil)
    }

    /// A number no writer stores (NaN, an infinity) planted in a payload is damage: it does not
    /// decode, so no command prints it as `nan` in JSON or writes it into a projection.
    @Test func aNumberThatIsNotFiniteDoesNotDecode() {
        for value in [Double.nan, .infinity, -.infinity, 0.5] {
            var w = BinaryWriter()
            PayloadCodec.encode(.downloadProgressed(download: "d", progress: value, bytesWritten: nil, timeRemaining: value), into: &w)
            let decoded = w.bytes.withUnsafeBytes { buffer in
                var reader = BinaryReader(buffer)
                return try? PayloadCodec.decode(.downloadProgressed, &reader, personal: .empty)
            }
            #expect((decoded != nil) == value.isFinite, "\(value)")
        }
    }

    /// A cancel reason goes into the log by its stored code: one no case has is damage, never
    /// read back as another reason.
    @Test func cancelReasonsInTheLogGoThroughTheirCodes() {
        var w = BinaryWriter()
        PayloadCodec.encode(.downloadCancelled(download: "d", reason: .transactionFinished), into: &w)
        func decodes(_ bytes: [UInt8]) -> EventBody? {
            bytes.withUnsafeBytes { buffer in
                var reader = BinaryReader(buffer)
                return try? PayloadCodec.decode(.downloadCancelled, &reader, personal: .empty)
            }
        }
        var bytes = w.bytes
        #expect(decodes(bytes) == .downloadCancelled(download: "d", reason: .transactionFinished))
        let key = bytes.firstIndex(of: 2 << 3)!  // field 2, varint
        bytes[key + 1] = 7
        #expect(decodes(bytes) == nil)
    }

    func expectRoundTrips<T: StoredCode & Equatable>(_ type: T.Type) {
        for value in T.allCases {
            #expect(T(storedCode: UInt64(value.storedCode)) == value)
        }
        #expect(Set(T.allCases.map(\.storedCode)).count == T.allCases.count, "codes are distinct")
    }
}
