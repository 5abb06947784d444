/// The binary payload of each event type (format version 1, docs/format.md).
///
/// Tagged fields: a reader skips field numbers it does not know, and optional fields may be
/// absent, so an event can gain fields without breaking old ledgers or old readers.
package enum PayloadCodec {
    static let formatVersion = 1

    /// `personal`: the append's encoder, which writes each personal value as its ref; nil writes
    /// the values themselves (a payload outside a ledger, and ledgers before migration 0007).
    static func encode(_ body: EventBody, into w: inout BinaryWriter, personal p: PersonalEncoder? = nil) {
        switch body {
        case .productRegistered(let p):
            w.field(1, p.product)
            w.field(2, unsigned: UInt64(p.kind.storedCode))
            w.field(3, p.price)
            w.field(4, p.currency)
            w.field(5, unsigned: p.downloadable ? 1 : 0)
            for c in p.contents {
                w.message(6) { m in
                    m.field(1, c.content); m.field(2, c.contentVersion.text); m.field(3, signed: c.contentLength)
                }
            }
            for r in p.relatedProducts { w.field(7, r) }
            w.field(8, p.title)
        case .contentVersionPublished(let product, let content, let version):
            w.field(1, product); w.field(2, content); w.field(3, version.text)
        case .paymentQueued(let t, let product, let quantity, let user):
            w.field(1, t); w.field(2, product)
            if quantity != 1 { w.field(3, unsigned: UInt64(quantity)) }
            personal(4, user, user: true, &w, p)
        case .transactionDeferred(let t):
            w.field(1, t)
        case .transactionPurchased(let t, let product, let user, let store, let specs, let paid):
            w.field(1, t); w.field(2, product); personal(4, user, user: true, &w, p); personal(5, store, &w, p)
            downloads(specs, &w)
            terms(paid, &w)
        case .transactionFailed(let t, let e):
            w.field(1, t); error(e, &w, p)
        case .transactionRestored(let t, let original, let product, let user, let store, let specs, let paid):
            w.field(1, t); w.field(2, product); personal(3, original, &w, p); personal(4, user, user: true, &w, p); personal(5, store, &w, p)
            downloads(specs, &w)
            terms(paid, &w)
        case .transactionRevoked(let t, let reason):
            w.field(1, t); personal(2, reason, &w, p)
        case .transactionFinished(let t, let discard):
            w.field(1, t)
            if discard { w.field(2, unsigned: 1) }
        case .downloadStarted(let d), .downloadPaused(let d), .downloadResumed(let d):
            w.field(1, d)
        case .downloadProgressed(let d, let progress, let bytes, let remaining):
            w.field(1, d)
            if let micros = exactScaled(progress, 1_000_000) { w.field(3, signed: micros) } else { w.field(2, double: progress) }
            w.field(4, signed: bytes)
            if let remaining {
                if let millis = exactScaled(remaining, 1000) { w.field(6, signed: millis) } else { w.field(5, double: remaining) }
            }
        case .downloadCancelled(let d, let reason):
            w.field(1, d)
            if reason != .user { w.field(2, unsigned: UInt64(reason.storedCode)) }
        case .downloadFinished(let d, let url):
            w.field(1, d); personal(2, url, &w, p)
        case .downloadFailed(let d, let e):
            w.field(1, d); error(e, &w, p)
        case .contentCopiedOut(let d, let destination, let checksum, let bytes):
            w.field(1, d); personal(2, destination, &w, p); w.field(3, checksum); w.field(4, signed: bytes)
        case .contentDeleted(let product):
            w.field(1, product)
        case .restoreStarted(let user):
            personal(1, user, user: true, &w, p)
        case .restoreCompleted:
            break
        case .restoreFailed(let e):
            error(e, &w, p)
        case .contentRegistered(let url, let d, let length):
            personal(1, url, &w, p); w.field(2, d); w.field(3, signed: length)
        case .assetPackPublished(let pack, let version, let unlockedBy):
            w.field(1, pack); w.field(2, signed: Int64(version))
            for product in unlockedBy { w.field(3, product) }
        case .assetPackBegan(let pack, let version), .assetPackPaused(let pack, let version), .assetPackFinished(let pack, let version),
            .assetPackOpened(let pack, let version):
            w.field(1, pack); w.field(2, signed: Int64(version))
        case .assetPackProgressed(let pack, let version, let progress):
            w.field(1, pack); w.field(2, signed: Int64(version)); w.field(3, double: progress)
        case .assetPackFailed(let pack, let version, let e):
            // The error is field 2 in every event that has one: the version moves to 3.
            w.field(1, pack); w.field(3, signed: Int64(version)); error(e, &w, p)
        case .assetPackRemoved(let pack):
            w.field(1, pack)
        case .storePaymentPromoted(let product, let accepted):
            w.field(1, product)
            if accepted { w.field(2, unsigned: 1) }
        case .personalDataErased(let refs):
            for ref in refs { w.field(1, signed: ref) }
        }
    }

    /// `value * scale` as an integer, when dividing it back gives exactly `value`.
    private static func exactScaled(_ value: Double, _ scale: Double) -> Int64? {
        let scaled = (value * scale).rounded()
        guard abs(scaled) < 9e15, Double(Int64(scaled)) / scale == value else { return nil }
        return Int64(scaled)
    }

    private static func error(_ e: StoreError, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        w.message(2) { m in
            m.field(1, e.domain); m.field(2, signed: e.code); personal(3, e.message, &m, p)
        }
    }

    /// A personal field: its ref (a varint) when the ledger keeps personal values apart, else the
    /// text (docs/format.md).
    @inline(__always)
    private static func personal(_ f: UInt64, _ value: String?, user: Bool = false, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        guard let value else { return }
        if let ref = p?.known(value, isUser: user) { w.field(f, unsigned: UInt64(ref)) } else { w.field(f, value) }
    }

    private static func downloads(_ specs: [DownloadSpec]?, _ w: inout BinaryWriter) {
        guard let specs else { return }
        for s in specs {
            w.message(6) { m in
                m.field(1, s.download); m.field(2, s.content); m.field(3, s.contentVersion.text); m.field(4, signed: s.contentLength)
            }
        }
        // Distinguishes an empty list from no list (some wrappers treat them differently).
        if specs.isEmpty { w.field(7, unsigned: 1) }
    }

    /// Field 8 of a purchase or restore, absent when it has no terms: a message of price (1),
    /// currency (2), storefront (3), environment (4), ownership (5) and offer type (6) as stored
    /// codes, offer id (7), verification error (8). An absent code is the default (production,
    /// purchased, no offer).
    private static func terms(_ t: PurchaseTerms, _ w: inout BinaryWriter) {
        guard !t.isEmpty else { return }
        w.message(Field.terms) { m in
            m.field(1, t.price); m.field(2, t.currency); m.field(3, t.storefront)
            if let e = t.environment { m.field(4, unsigned: UInt64(e.storedCode)) }
            if let o = t.ownership { m.field(5, unsigned: UInt64(o.storedCode)) }
            if let offer = t.offer {
                m.field(6, unsigned: UInt64(offer.type.storedCode))
                m.field(7, offer.id)
            }
            m.field(8, t.unverified)
        }
    }

    private enum Field {
        /// A purchase's or restore's terms.
        static let terms: UInt64 = 8
    }

    private static func terms(_ f: Fields) throws(Failure) -> PurchaseTerms {
        guard var m = f.messages.last(where: { $0.0 == Field.terms })?.1 else { return .none }
        let g = try read(&m)
        var t = PurchaseTerms(price: g.strings[1], currency: g.strings[2], storefront: g.strings[3])
        if let code = g.ints[4] {
            guard let e = StoreEnvironment(storedCode: code) else { throw Failure(message: "bad environment") }
            t.environment = e
        }
        if let code = g.ints[5] {
            guard let o = Ownership(storedCode: code) else { throw Failure(message: "bad ownership") }
            t.ownership = o
        }
        if let code = g.ints[6] {
            guard let type = OfferType(storedCode: code) else { throw Failure(message: "bad offer type") }
            t.offer = Offer(type: type, id: g.strings[7])
        }
        t.unverified = g.strings[8]
        return t
    }

    /// The refs a stored payload introduces, with their commitments (field 15; none in a
    /// payload that holds its personal values as text). Malformed bytes give what was read.
    static func introductions(in payload: [UInt8]) -> [(Int64, [UInt8])] {
        var found: [(Int64, [UInt8])] = []
        payload.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            do throws(Failure) {
                while !r.isAtEnd {
                    let (number, wire) = try r.key()
                    guard number == PersonalValues.introductionsField, wire == 2 else {
                        try r.skip(wire: wire)
                        continue
                    }
                    found += try commitments(in: r.message()).map { (Int64(truncatingIfNeeded: $0.0), $0.1) }
                }
            } catch {}
        }
        return found
    }

    /// The commitment `introductions` holds for `ref` (nil: none, a user id introduced earlier).
    static func commitment(of ref: UInt64, in introductions: BinaryReader?) throws(Failure) -> [UInt8]? {
        guard let introductions else { return nil }
        return try commitments(in: introductions).first { $0.0 == ref }?.1
    }

    /// The (ref, commitment) pairs of an introductions message: a varint and 16 bytes each.
    private static func commitments(in introductions: BinaryReader) throws(Failure) -> [(UInt64, [UInt8])] {
        var m = introductions
        var pairs: [(UInt64, [UInt8])] = []
        while !m.isAtEnd {
            let ref = try m.varint()
            let span = try m.fixed(PersonalValues.commitmentSize)
            pairs.append((ref, Array(m.base[span])))
        }
        return pairs
    }

    // MARK: - Decoding

    package typealias Failure = BinaryReader.Failure

    /// Collected fields of one payload, by number. Repeated fields keep their order.
    private struct Fields {
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
            return PersonalValues.erasedMarker(ref: ref, commitment: try PayloadCodec.commitment(of: ref, in: introductions ?? self.introductions))
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
    private struct Slots<T> {
        private var s1, s2, s3, s4, s5, s6, s7, s8: T?

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
    private static func read(
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
                if number == PersonalValues.introductionsField {
                    f.introductions = try r.message()
                } else if number == nested || (withTerms && number == Field.terms) {
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

    private static func storeError(_ f: Fields, _ p: PersonalValues) throws(Failure) -> StoreError {
        guard var m = f.messages.last(where: { $0.0 == 2 })?.1 else { throw Failure(message: "missing error") }
        let g = try read(&m)
        guard let code = g.signed(2) else { throw Failure(message: "missing error code") }
        return StoreError(
            domain: try g.string(1, "error domain"), code: code, message: try g.personal(3, "error message", p, introductions: f.introductions))
    }

    private static func downloads(_ f: Fields) throws(Failure) -> [DownloadSpec]? {
        var specs: [DownloadSpec] = []
        for (number, reader) in f.messages where number == 6 {
            var m = reader
            let g = try read(&m)
            guard let length = g.signed(4) else { throw Failure(message: "missing contentLength") }
            specs.append(
                DownloadSpec(
                    download: try g.string(1, "download"), content: try g.string(2, "content"),
                    contentVersion: try g.version(3), contentLength: length))
        }
        if specs.isEmpty && f.ints[7] != 1 { return nil }
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
                switch (number, wire) {
                case (1, 2): download = try r.string()
                case (2, 1): progress = try r.double()
                case (3, 0): progress = Double(try r.zigzag()) / 1_000_000
                case (4, 0): bytes = try r.zigzag()
                case (5, 1): remaining = try r.double()
                case (6, 0): remaining = Double(try r.zigzag()) / 1000
                default: try r.skip(wire: wire)
                }
            }
            guard let download, let progress else { throw Failure(message: "missing download or progress") }
            return .downloadProgressed(download: download, progress: progress, bytesWritten: bytes, timeRemaining: remaining)
        }
        let nested: UInt64? =
            switch type {
            case .productRegistered, .transactionPurchased, .transactionRestored: 6
            case .transactionFailed, .downloadFailed, .restoreFailed, .assetPackFailed: 2
            case .contentVersionPublished, .paymentQueued, .transactionDeferred, .transactionRevoked, .transactionFinished,
                .downloadStarted, .downloadProgressed, .downloadPaused, .downloadResumed, .downloadCancelled, .downloadFinished,
                .contentCopiedOut, .contentDeleted, .restoreStarted, .restoreCompleted, .contentRegistered, .assetPackPublished,
                .assetPackBegan, .assetPackProgressed, .assetPackPaused, .assetPackFinished, .assetPackRemoved, .assetPackOpened,
                .storePaymentPromoted, .personalDataErased:
                nil
            }
        let f = try read(
            &r, nested: nested, repeatedString: type == .productRegistered ? 7 : type == .assetPackPublished ? 3 : nil,
            repeatedInt: type == .personalDataErased ? 1 : nil,
            withTerms: type == .transactionPurchased || type == .transactionRestored)
        switch type {
        case .downloadProgressed:
            throw Failure(message: "unreachable")
        case .productRegistered:
            guard let code = f.ints[2], let kind = ProductKind(storedCode: code) else { throw Failure(message: "bad kind") }
            var contents: [ContentSpec] = []
            for (_, reader) in f.messages {
                var m = reader
                let g = try read(&m)
                guard let length = g.signed(3) else { throw Failure(message: "missing contentLength") }
                contents.append(ContentSpec(content: try g.string(1, "content"), contentVersion: try g.version(2), contentLength: length))
            }
            return .productRegistered(
                ProductRegistration(
                    product: try f.string(1, "product"), kind: kind, price: try f.string(3, "price"),
                    currency: try f.string(4, "currency"), downloadable: f.ints[5] == 1, contents: contents,
                    relatedProducts: f.repeatedStrings, title: f.strings[8]))
        case .transactionPurchased:
            return .transactionPurchased(
                transaction: try f.string(1, "transaction"), product: f.strings[2], user: try f.personal(4, p, user: true),
                storeTransactionId: try f.personal(5, p), downloads: try downloads(f), terms: try terms(f))
        case .transactionRestored:
            return .transactionRestored(
                transaction: try f.string(1, "transaction"), originalTransaction: try f.personal(3, "originalTransaction", p),
                product: try f.string(2, "product"), user: try f.personal(4, p, user: true), storeTransactionId: try f.personal(5, p),
                downloads: try downloads(f), terms: try terms(f))
        case .transactionFailed:
            return .transactionFailed(transaction: try f.string(1, "transaction"), error: try storeError(f, p))
        case .downloadFailed:
            return .downloadFailed(download: try f.string(1, "download"), error: try storeError(f, p))
        case .restoreFailed:
            return .restoreFailed(error: try storeError(f, p))
        case .contentVersionPublished:
            return .contentVersionPublished(product: try f.string(1, "product"), content: try f.string(2, "content"), contentVersion: try f.version(3))
        case .paymentQueued:
            let quantity = f.ints[3] ?? 1
            guard (1...10).contains(quantity) else { throw Failure(message: "bad quantity") }
            return .paymentQueued(
                transaction: try f.string(1, "transaction"), product: try f.string(2, "product"),
                quantity: Int(quantity), user: try f.personal(4, p, user: true))
        case .transactionDeferred:
            return .transactionDeferred(transaction: try f.string(1, "transaction"))
        case .transactionRevoked:
            return .transactionRevoked(transaction: try f.string(1, "transaction"), reason: try f.personal(2, "reason", p))
        case .transactionFinished:
            return .transactionFinished(transaction: try f.string(1, "transaction"), discardContent: f.ints[2] == 1)
        case .downloadStarted:
            return .downloadStarted(download: try f.string(1, "download"))
        case .downloadPaused:
            return .downloadPaused(download: try f.string(1, "download"))
        case .downloadResumed:
            return .downloadResumed(download: try f.string(1, "download"))
        case .downloadCancelled:
            guard let reason = CancelReason(storedCode: f.ints[2] ?? 0) else { throw Failure(message: "bad cancel reason") }
            return .downloadCancelled(download: try f.string(1, "download"), reason: reason)
        case .downloadFinished:
            return .downloadFinished(download: try f.string(1, "download"), contentURL: try f.personal(2, "contentURL", p))
        case .contentCopiedOut:
            return .contentCopiedOut(
                download: try f.string(1, "download"), destination: try f.personal(2, "destination", p),
                checksum: f.strings[3], bytesCopied: f.signed(4))
        case .contentDeleted:
            return .contentDeleted(product: try f.string(1, "product"))
        case .restoreStarted:
            return .restoreStarted(user: try f.personal(1, p, user: true))
        case .restoreCompleted:
            return .restoreCompleted
        case .contentRegistered:
            return .contentRegistered(url: try f.personal(1, "url", p), download: try f.string(2, "download"), contentLength: f.signed(3))
        case .assetPackPublished:
            return .assetPackPublished(pack: try f.string(1, "pack"), version: try f.version(int: 2), unlockedBy: f.repeatedStrings)
        case .assetPackBegan:
            return .assetPackBegan(pack: try f.string(1, "pack"), version: try f.version(int: 2))
        case .assetPackPaused:
            return .assetPackPaused(pack: try f.string(1, "pack"), version: try f.version(int: 2))
        case .assetPackFinished:
            return .assetPackFinished(pack: try f.string(1, "pack"), version: try f.version(int: 2))
        case .assetPackOpened:
            return .assetPackOpened(pack: try f.string(1, "pack"), version: try f.version(int: 2))
        case .assetPackProgressed:
            guard let progress = f.doubles[3] else { throw Failure(message: "missing progress") }
            return .assetPackProgressed(pack: try f.string(1, "pack"), version: try f.version(int: 2), progress: progress)
        case .assetPackFailed:
            return .assetPackFailed(pack: try f.string(1, "pack"), version: try f.version(int: 3), error: try storeError(f, p))
        case .assetPackRemoved:
            return .assetPackRemoved(pack: try f.string(1, "pack"))
        case .storePaymentPromoted:
            return .storePaymentPromoted(product: try f.string(1, "product"), accepted: f.ints[2] == 1)
        case .personalDataErased:
            return .personalDataErased(refs: f.repeatedInts.map(ZigZag.decode))
        }
    }
}
