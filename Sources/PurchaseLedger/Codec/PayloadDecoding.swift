extension PayloadCodec {
    // MARK: - Decoding

    package typealias Failure = BinaryReader.Failure

    /// Collected fields of one payload, by number. Repeated fields keep their order.
    struct Fields {
        var strings = Slots<String>()
        var ints = Slots<UInt64>()
        var doubles = Slots<Double>()
        var messages: [(UInt64, BinaryReader)] = []
        var repeatedStrings: [String] = []
        /// Field 1 of `personalDataErased`, which repeats.
        var repeatedInts: [UInt64] = []

        func string(_ f: UInt64, _ name: String) throws(Failure) -> String {
            guard let s = strings[f] else { throw Failure(message: "missing \(name)") }
            return s
        }

        /// The payload's introductions (field 15), when it has some.
        var introductions: BinaryReader?

        /// A personal field: its text, or the value its ref stands for, or, erased, its marker
        /// (from the commitment `introductions` holds for it, the payload's own by default).
        @inline(__always)
        func personal(_ f: UInt64, _ p: PersonalValues, user: Bool = false, introductions: BinaryReader? = nil) throws(Failure) -> String? {
            if let s = strings[f] { return s }
            guard let ref = ints[f] else { return nil }
            if let value = try p.value(ref) { return value }
            // A user id has one row for all its events: its marker is its ref.
            if user { return PersonalValues.erased(ref) }
            return PersonalValues.erasedMarker(
                ref: ref, commitment: try PayloadCodec.commitment(of: ref, in: introductions ?? self.introductions) ?? p.erasedCommitment(ref))
        }

        func personal(_ f: UInt64, _ name: String, _ p: PersonalValues, introductions: BinaryReader? = nil) throws(Failure) -> String {
            guard let s = try personal(f, p, introductions: introductions) else { throw Failure(message: "missing \(name)") }
            return s
        }

        func version(_ f: UInt64) throws(Failure) -> ContentVersion {
            guard let text = strings[f], let v = ContentVersion(text) else { throw Failure(message: "bad content version") }
            return v
        }

        func signed(_ f: UInt64) -> Int64? {
            ints[f].map(ZigZag.decode)
        }

        /// An asset pack's version: a whole number >= 0 that fits an Int32.
        func version(int f: UInt64) throws(Failure) -> Int {
            guard let v = signed(f), (0...Int64(Int32.max)).contains(v) else { throw Failure(message: "bad asset pack version") }
            return Int(v)
        }
    }

    /// Fields 1 to 8 of one wire type, stored inline: decoding a payload allocates nothing for
    /// its scalar fields. Higher numbers are unknown to this version and read as absent.
    struct Slots<T> {
        var s1, s2, s3, s4, s5, s6, s7, s8: T?

        subscript(_ number: UInt64) -> T? {
            get {
                switch number {
                case 1: s1
                case 2: s2
                case 3: s3
                case 4: s4
                case 5: s5
                case 6: s6
                case 7: s7
                case 8: s8
                default: nil
                }
            }
            set {
                switch number {
                case 1: s1 = newValue
                case 2: s2 = newValue
                case 3: s3 = newValue
                case 4: s4 = newValue
                case 5: s5 = newValue
                case 6: s6 = newValue
                case 7: s7 = newValue
                case 8: s8 = newValue
                default: break
                }
            }
        }
    }

    /// Reads every field. `nested` is the number of the fields holding messages (and field 8,
    /// the terms, `withTerms`); `repeatedString` names the one string field that may repeat.
    static func read(
        _ r: inout BinaryReader, nested: UInt64? = nil, repeatedString: UInt64? = nil, repeatedInt: UInt64? = nil, withTerms: Bool = false
    ) throws(Failure) -> Fields {
        var f = Fields()
        while !r.isAtEnd {
            let (number, wire) = try r.key()
            switch wire {
            case 0:
                if repeatedInt == number { f.repeatedInts.append(try r.varint()) } else { f.ints[number] = try r.varint() }
            case 1: f.doubles[number] = try r.double()
            case 2:
                if number == PayloadField.introductions {
                    f.introductions = try r.message()
                } else if number == ElidedCommitments.field {
                    // Introductions stored elided: their commitments are not needed to read.
                    try r.skip(wire: wire)
                } else if number == nested || (withTerms && number == PayloadField.Purchase.terms) {
                    f.messages.append((number, try r.message()))
                } else if number == repeatedString {
                    f.repeatedStrings.append(try r.string())
                } else {
                    f.strings[number] = try r.string()
                }
            default: try r.skip(wire: wire)
            }
        }
        return f
    }

    static func storeError(_ f: Fields, _ p: PersonalValues) throws(Failure) -> StoreError {
        typealias F = PayloadField.StoreErrorMessage
        guard var m = f.messages.last(where: { $0.0 == PayloadField.error })?.1 else { throw Failure(message: "missing error") }
        let g = try read(&m)
        guard let code = g.signed(F.code) else { throw Failure(message: "missing error code") }
        return StoreError(
            domain: try g.string(F.domain, "error domain"), code: code,
            message: try g.personal(F.message, "error message", p, introductions: f.introductions))
    }

    static func downloads(_ f: Fields) throws(Failure) -> [DownloadSpec]? {
        typealias F = PayloadField.Delivered
        var specs: [DownloadSpec] = []
        for (number, reader) in f.messages where number == PayloadField.Purchase.download {
            var m = reader
            let g = try read(&m)
            guard let length = g.signed(F.length) else { throw Failure(message: "missing contentLength") }
            specs.append(
                DownloadSpec(
                    download: try g.string(F.download, "download"), content: try g.string(F.content, "content"),
                    contentVersion: try g.version(F.version), contentLength: length))
        }
        if specs.isEmpty && f.ints[PayloadField.Purchase.noDownloads] != 1 { return nil }
        return specs
    }

    /// `personal`: what the refs of personal fields stand for (a payload holding its values
    /// as text needs none: ``PersonalValues/empty``).
    package static func decode(_ type: EventType, _ r: inout BinaryReader, personal p: PersonalValues) throws(Failure) -> EventBody {
        if type == .downloadProgressed {
            // The most frequent event: read without the general field table.
            var download: String?
            var progress: Double?
            var bytes: Int64?
            var remaining: Double?
            while !r.isAtEnd {
                let (number, wire) = try r.key()
                typealias F = PayloadField.Progress
                switch (number, wire) {
                case (PayloadField.subject, 2): download = try r.string()
                case (F.progress, 1): progress = try r.double()
                case (F.progressMicros, 0): progress = Double(try r.zigzag()) / 1_000_000
                case (F.bytes, 0): bytes = try r.zigzag()
                case (F.remaining, 1): remaining = try r.double()
                case (F.remainingMillis, 0): remaining = Double(try r.zigzag()) / 1000
                default: try r.skip(wire: wire)
                }
            }
            guard let download, let progress else { throw Failure(message: "missing download or progress") }
            return .downloadProgressed(download: download, progress: progress, bytesWritten: bytes, timeRemaining: remaining)
        }
        let nested: UInt64? =
            switch type {
            case .productRegistered: PayloadField.Product.content
            case .transactionPurchased, .transactionRestored: PayloadField.Purchase.download
            case .transactionFailed, .downloadFailed, .restoreFailed, .assetPackFailed, .storeProductViewFailed: PayloadField.error
            case .transactionRevoked: PayloadField.Revoked.signed
            case .appleTransactionReceived, .appleNotificationReceived: PayloadField.Apple.signed
            case .contentVersionPublished, .paymentQueued, .transactionDeferred, .transactionFinished,
                .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished,
                .contentCopiedOut, .contentDeleted, .restoreStarted, .restoreCompleted, .contentRegistered, .assetPackPublished,
                .assetPackBegan, .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackRemoved, .assetPackOpened,
                .storePaymentPromoted, .personalDataErased, .appleHistoryCompleted, .storeProductViewPresented, .storeProductViewLoaded,
                .storeProductViewDismissed:
                nil
            }
        let f = try read(
            &r, nested: nested,
            repeatedString: type == .productRegistered ? PayloadField.Product.related : type == .assetPackPublished ? PayloadField.Pack.unlockedBy : nil,
            repeatedInt: type == .personalDataErased ? PayloadField.Erased.ref : nil,
            withTerms: type == .transactionPurchased || type == .transactionRestored)
        typealias F = PayloadField
        let id = F.subject
        switch type {
        case .downloadProgressed:
            throw Failure(message: "unreachable")
        case .productRegistered:
            guard let code = f.ints[F.Product.kind], let kind = ProductKind(storedCode: code) else { throw Failure(message: "bad kind") }
            var contents: [ContentSpec] = []
            for (_, reader) in f.messages {
                var m = reader
                let g = try read(&m)
                guard let length = g.signed(F.Content.length) else { throw Failure(message: "missing contentLength") }
                contents.append(
                    ContentSpec(content: try g.string(F.Content.content, "content"), contentVersion: try g.version(F.Content.version), contentLength: length))
            }
            return .productRegistered(
                ProductRegistration(
                    product: try f.string(id, "product"), kind: kind, price: try f.string(F.Product.price, "price"),
                    currency: try f.string(F.Product.currency, "currency"), downloadable: f.ints[F.Product.downloadable] == 1,
                    contents: contents, relatedProducts: f.repeatedStrings, title: f.strings[F.Product.title]))
        case .transactionPurchased:
            return .transactionPurchased(
                transaction: try f.string(id, "transaction"), product: f.strings[F.Purchase.product],
                user: try f.personal(F.Purchase.user, p, user: true), storeTransactionId: try f.personal(F.Purchase.store, p),
                downloads: try downloads(f), terms: try terms(f, p))
        case .transactionRestored:
            return .transactionRestored(
                transaction: try f.string(id, "transaction"), originalTransaction: try f.personal(F.Purchase.original, "originalTransaction", p),
                product: try f.string(F.Purchase.product, "product"), user: try f.personal(F.Purchase.user, p, user: true),
                storeTransactionId: try f.personal(F.Purchase.store, p), downloads: try downloads(f), terms: try terms(f, p))
        case .transactionFailed:
            return .transactionFailed(transaction: try f.string(id, "transaction"), error: try storeError(f, p))
        case .downloadFailed:
            return .downloadFailed(download: try f.string(id, "download"), error: try storeError(f, p))
        case .restoreFailed:
            return .restoreFailed(error: try storeError(f, p))
        case .contentVersionPublished:
            return .contentVersionPublished(
                product: try f.string(id, "product"), content: try f.string(F.Published.content, "content"),
                contentVersion: try f.version(F.Published.version))
        case .paymentQueued:
            let quantity = f.ints[F.Queued.quantity] ?? 1
            guard (1...10).contains(quantity) else { throw Failure(message: "bad quantity") }
            return .paymentQueued(
                transaction: try f.string(id, "transaction"), product: try f.string(F.Queued.product, "product"),
                quantity: Int(quantity), user: try f.personal(F.Queued.user, p, user: true))
        case .transactionDeferred:
            return .transactionDeferred(transaction: try f.string(id, "transaction"))
        case .transactionRevoked:
            return .transactionRevoked(
                transaction: try f.string(id, "transaction"), reason: try f.personal(F.Second.value, "reason", p),
                signedTransaction: try signed(f.messages.last(where: { $0.0 == F.Revoked.signed })?.1, p, introductions: f.introductions))
        case .transactionFinished:
            return .transactionFinished(transaction: try f.string(id, "transaction"), discardContent: f.ints[F.Second.value] == 1)
        case .downloadStarted:
            return .downloadStarted(download: try f.string(id, "download"))
        case .downloadPaused:
            return .downloadPaused(download: try f.string(id, "download"))
        case .downloadResumed:
            return .downloadResumed(download: try f.string(id, "download"))
        case .downloadCancelled:
            return .downloadCancelled(download: try f.string(id, "download"), reason: try CancelReason.stored(f.ints[F.Second.value] ?? 0))
        case .downloadFinished:
            return .downloadFinished(download: try f.string(id, "download"), contentURL: try f.personal(F.Second.value, "contentURL", p))
        case .contentCopiedOut:
            return .contentCopiedOut(
                download: try f.string(id, "download"), destination: try f.personal(F.CopiedOut.destination, "destination", p),
                checksum: f.strings[F.CopiedOut.checksum], bytesCopied: f.signed(F.CopiedOut.bytes))
        case .contentDeleted:
            return .contentDeleted(product: try f.string(id, "product"))
        case .restoreStarted:
            return .restoreStarted(user: try f.personal(F.RestoreStarted.user, p, user: true))
        case .restoreCompleted:
            return .restoreCompleted
        case .contentRegistered:
            return .contentRegistered(
                url: try f.personal(F.Registered.url, "url", p), download: try f.string(F.Registered.download, "download"),
                contentLength: f.signed(F.Registered.length))
        case .assetPackPublished:
            return .assetPackPublished(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version), unlockedBy: f.repeatedStrings)
        case .assetPackBegan:
            return .assetPackBegan(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version))
        case .assetPackPaused:
            return .assetPackPaused(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version))
        case .assetPackFinished:
            return .assetPackFinished(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version))
        case .assetPackOpened:
            return .assetPackOpened(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version))
        case .assetPackProgressed:
            guard let progress = f.doubles[F.Pack.progress] else { throw Failure(message: "missing progress") }
            return .assetPackProgressed(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.version), progress: progress)
        case .assetPackFailed:
            return .assetPackFailed(pack: try f.string(id, "pack"), version: try f.version(int: F.Pack.failedVersion), error: try storeError(f, p))
        case .assetPackRemoved:
            return .assetPackRemoved(pack: try f.string(id, "pack"))
        case .storePaymentPromoted:
            return .storePaymentPromoted(product: try f.string(id, "product"), accepted: f.ints[F.Second.value] == 1)
        case .personalDataErased:
            return .personalDataErased(refs: f.repeatedInts.map(ZigZag.decode))
        case .appleTransactionReceived, .appleNotificationReceived:
            guard let jws = try signed(f.messages.last(where: { $0.0 == F.Apple.signed })?.1, p, introductions: f.introductions) else {
                throw Failure(message: "Apple's record without its signed document")
            }
            let user = try f.personal(F.Apple.user, p, user: true)
            if type == .appleNotificationReceived { return .appleNotificationReceived(signedPayload: jws, user: user) }
            guard let source = AppleSource(storedCode: f.ints[F.Apple.source] ?? 0) else { throw Failure(message: "bad source") }
            return .appleTransactionReceived(signedTransaction: jws, source: source, user: user)
        case .appleHistoryCompleted:
            return .appleHistoryCompleted(revision: try f.string(id, "revision"), user: try f.personal(F.Apple.user, p, user: true))
        case .storeProductViewPresented:
            guard let item = f.ints[F.ProductView.item], item > 0 else { throw Failure(message: "missing item") }
            return .storeProductViewPresented(
                view: try f.string(id, "view"), item: String(item), style: try ProductViewStyle.stored(f.ints[F.ProductView.style] ?? 0),
                affiliateToken: f.strings[F.ProductView.affiliate], campaignToken: f.strings[F.ProductView.campaign],
                providerToken: f.strings[F.ProductView.provider])
        case .storeProductViewLoaded:
            return .storeProductViewLoaded(view: try f.string(id, "view"))
        case .storeProductViewFailed:
            return .storeProductViewFailed(view: try f.string(id, "view"), error: try storeError(f, p))
        case .storeProductViewDismissed:
            return .storeProductViewDismissed(view: try f.string(id, "view"))
        }
    }
}
