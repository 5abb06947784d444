/// Every payload's field numbers (docs/format.md), named once: the encoder and the decoder use the
/// same names, and `PayloadGoldenTests` pins the bytes they make. A number, once written, keeps its
/// meaning for ever; a new field takes a new number.
enum PayloadField {
    /// The id an event is about (a transaction, download, product or asset pack): field 1 of
    /// every event that has one.
    static let subject: UInt64 = 1
    /// The store error of `transactionFailed`, `downloadFailed`, `restoreFailed` and
    /// `assetPackFailed`: a ``StoreErrorMessage`` message.
    static let error: UInt64 = 2
    /// The refs a payload introduces (``PersonalValues``): a message of (ref, commitment) pairs,
    /// each a varint and 16 bytes.
    static let introductions: UInt64 = 15

    enum Product {
        static let kind: UInt64 = 2, price: UInt64 = 3, currency: UInt64 = 4, downloadable: UInt64 = 5
        /// Repeated ``Content`` messages.
        static let content: UInt64 = 6
        /// Repeated.
        static let related: UInt64 = 7
        static let title: UInt64 = 8
    }

    /// A product's content, and a published version.
    enum Content {
        static let content: UInt64 = 1, version: UInt64 = 2, length: UInt64 = 3
    }

    enum Published {
        static let content: UInt64 = 2, version: UInt64 = 3
    }

    enum Queued {
        static let product: UInt64 = 2, quantity: UInt64 = 3, user: UInt64 = 4
    }

    /// `transactionPurchased` and `transactionRestored`.
    enum Purchase {
        static let product: UInt64 = 2, original: UInt64 = 3, user: UInt64 = 4, store: UInt64 = 5
        /// Repeated ``Delivered`` messages.
        static let download: UInt64 = 6
        /// 1 when the download list is given and empty.
        static let noDownloads: UInt64 = 7
        /// A ``Terms`` message.
        static let terms: UInt64 = 8
    }

    /// A download a purchase or restore delivers.
    enum Delivered {
        static let download: UInt64 = 1, content: UInt64 = 2, version: UInt64 = 3, length: UInt64 = 4
    }

    enum Terms {
        static let price: UInt64 = 1, currency: UInt64 = 2, storefront: UInt64 = 3, environment: UInt64 = 4, ownership: UInt64 = 5
        static let offerType: UInt64 = 6, offerID: UInt64 = 7, unverified: UInt64 = 8
        /// A ``Signed`` message.
        static let signed: UInt64 = 9
    }

    /// A signed transaction (``SignedParts``): the SHA-256 of its header (32 bytes; the header's
    /// text is in `signing_headers`) and its body as a personal field; or, in a payload that
    /// holds its personal values as text, the whole JWS.
    enum Signed {
        static let header: UInt64 = 1, body: UInt64 = 2, text: UInt64 = 3
    }

    /// `transactionRevoked`'s signed transaction: a ``Signed`` message (its reason is field 2).
    enum Revoked {
        static let signed: UInt64 = 3
    }

    enum StoreErrorMessage {
        static let domain: UInt64 = 1, code: UInt64 = 2, message: UInt64 = 3
    }

    /// The second field of `transactionRevoked` (reason), `transactionFinished` (discard),
    /// `downloadCancelled` (reason), `downloadFinished` (content URL), `contentCopiedOut`
    /// (destination) and `storePaymentPromoted` (accepted).
    enum Second {
        static let value: UInt64 = 2
    }

    enum Progress {
        /// As a double, or in millionths (`progressMicros`) when that is exact.
        static let progress: UInt64 = 2, progressMicros: UInt64 = 3, bytes: UInt64 = 4
        /// As a double, or in milliseconds (`remainingMillis`) when that is exact.
        static let remaining: UInt64 = 5, remainingMillis: UInt64 = 6
    }

    enum CopiedOut {
        static let destination: UInt64 = 2, checksum: UInt64 = 3, bytes: UInt64 = 4
    }

    enum RestoreStarted {
        static let user: UInt64 = 1
    }

    enum Registered {
        static let url: UInt64 = 1, download: UInt64 = 2, length: UInt64 = 3
    }

    enum Pack {
        static let version: UInt64 = 2
        /// Repeated, in `assetPackPublished`.
        static let unlockedBy: UInt64 = 3
        static let progress: UInt64 = 3
        /// In `assetPackFailed`, where field 2 is the error.
        static let failedVersion: UInt64 = 3
    }

    /// `storeProductViewPresented`: the view id is the subject, field 2 the error in
    /// `storeProductViewFailed`.
    enum ProductView {
        static let item: UInt64 = 3, style: UInt64 = 4, affiliate: UInt64 = 5, campaign: UInt64 = 6, provider: UInt64 = 7
    }

    enum Erased {
        /// Repeated.
        static let ref: UInt64 = 1
    }

    /// Apple's record: the signed document (a ``Signed`` message), where it came from (a code of
    /// ``AppleSource``) and the user the import matched. `appleHistoryCompleted` keeps its
    /// revision in field 1.
    enum Apple {
        static let signed: UInt64 = 2, source: UInt64 = 3, user: UInt64 = 4
    }
}

/// The binary payload of each event type (format version 1, docs/format.md).
///
/// Tagged fields: a reader skips field numbers it does not know, and optional fields may be
/// absent, so an event can gain fields without breaking old ledgers or old readers.
package enum PayloadCodec {
    static let formatVersion = 1

    /// `personal`: the append's encoder, which writes each personal value as its ref; nil writes
    /// the values themselves (a payload outside a ledger, and ledgers before migration 0007).
    static func encode(_ body: EventBody, into w: inout BinaryWriter, personal p: PersonalEncoder? = nil) {
        typealias F = PayloadField
        let id = F.subject
        switch body {
        case .productRegistered(let p):
            w.field(id, p.product)
            w.field(F.Product.kind, unsigned: UInt64(p.kind.storedCode))
            w.field(F.Product.price, p.price)
            w.field(F.Product.currency, p.currency)
            w.field(F.Product.downloadable, unsigned: p.downloadable ? 1 : 0)
            for c in p.contents {
                w.message(F.Product.content) { m in
                    m.field(F.Content.content, c.content); m.field(F.Content.version, c.contentVersion.text)
                    m.field(F.Content.length, signed: c.contentLength)
                }
            }
            for r in p.relatedProducts { w.field(F.Product.related, r) }
            w.field(F.Product.title, p.title)
        case .contentVersionPublished(let product, let content, let version):
            w.field(id, product); w.field(F.Published.content, content); w.field(F.Published.version, version.text)
        case .paymentQueued(let t, let product, let quantity, let user):
            w.field(id, t); w.field(F.Queued.product, product)
            if quantity != 1 { w.field(F.Queued.quantity, unsigned: UInt64(quantity)) }
            personal(F.Queued.user, user, user: true, &w, p)
        case .transactionDeferred(let t):
            w.field(id, t)
        case .transactionPurchased(let t, let product, let user, let store, let specs, let paid):
            w.field(id, t); w.field(F.Purchase.product, product)
            personal(F.Purchase.user, user, user: true, &w, p); personal(F.Purchase.store, store, &w, p)
            downloads(specs, &w)
            terms(paid, &w, p)
        case .transactionFailed(let t, let e):
            w.field(id, t); error(e, &w, p)
        case .transactionRestored(let t, let original, let product, let user, let store, let specs, let paid):
            w.field(id, t); w.field(F.Purchase.product, product); personal(F.Purchase.original, original, &w, p)
            personal(F.Purchase.user, user, user: true, &w, p); personal(F.Purchase.store, store, &w, p)
            downloads(specs, &w)
            terms(paid, &w, p)
        case .transactionRevoked(let t, let reason, let jws):
            w.field(id, t); personal(F.Second.value, reason, &w, p)
            signed(F.Revoked.signed, jws, &w, p)
        case .transactionFinished(let t, let discard):
            w.field(id, t)
            if discard { w.field(F.Second.value, unsigned: 1) }
        case .downloadStarted(let d), .downloadPaused(let d), .downloadResumed(let d):
            w.field(id, d)
        case .downloadProgressed(let d, let progress, let bytes, let remaining):
            w.field(id, d)
            if let micros = exactScaled(progress, 1_000_000) {
                w.field(F.Progress.progressMicros, signed: micros)
            } else {
                w.field(F.Progress.progress, double: progress)
            }
            w.field(F.Progress.bytes, signed: bytes)
            if let remaining {
                if let millis = exactScaled(remaining, 1000) {
                    w.field(F.Progress.remainingMillis, signed: millis)
                } else {
                    w.field(F.Progress.remaining, double: remaining)
                }
            }
        case .downloadCancelled(let d, let reason):
            w.field(id, d)
            if reason != .user { w.field(F.Second.value, unsigned: UInt64(reason.storedCode)) }
        case .downloadFinished(let d, let url):
            w.field(id, d); personal(F.Second.value, url, &w, p)
        case .downloadFailed(let d, let e):
            w.field(id, d); error(e, &w, p)
        case .contentCopiedOut(let d, let destination, let checksum, let bytes):
            w.field(id, d); personal(F.CopiedOut.destination, destination, &w, p); w.field(F.CopiedOut.checksum, checksum)
            w.field(F.CopiedOut.bytes, signed: bytes)
        case .contentDeleted(let product):
            w.field(id, product)
        case .restoreStarted(let user):
            personal(F.RestoreStarted.user, user, user: true, &w, p)
        case .restoreCompleted:
            break
        case .restoreFailed(let e):
            error(e, &w, p)
        case .contentRegistered(let url, let d, let length):
            personal(F.Registered.url, url, &w, p); w.field(F.Registered.download, d); w.field(F.Registered.length, signed: length)
        case .assetPackPublished(let pack, let version, let unlockedBy):
            w.field(id, pack); w.field(F.Pack.version, signed: Int64(version))
            for product in unlockedBy { w.field(F.Pack.unlockedBy, product) }
        case .assetPackBegan(let pack, let version), .assetPackPaused(let pack, let version), .assetPackFinished(let pack, let version),
            .assetPackOpened(let pack, let version):
            w.field(id, pack); w.field(F.Pack.version, signed: Int64(version))
        case .assetPackProgressed(let pack, let version, let progress):
            w.field(id, pack); w.field(F.Pack.version, signed: Int64(version)); w.field(F.Pack.progress, double: progress)
        case .assetPackFailed(let pack, let version, let e):
            // The error is field 2 in every event that has one: the version moves to 3.
            w.field(id, pack); w.field(F.Pack.failedVersion, signed: Int64(version)); error(e, &w, p)
        case .assetPackRemoved(let pack):
            w.field(id, pack)
        case .storePaymentPromoted(let product, let accepted):
            w.field(id, product)
            if accepted { w.field(F.Second.value, unsigned: 1) }
        case .personalDataErased(let refs):
            for ref in refs { w.field(F.Erased.ref, signed: ref) }
        case .appleTransactionReceived(let jws, let source, let user):
            signed(F.Apple.signed, jws, &w, p); w.field(F.Apple.source, unsigned: UInt64(source.storedCode))
            personal(F.Apple.user, user, user: true, &w, p)
        case .appleNotificationReceived(let jws, let user):
            signed(F.Apple.signed, jws, &w, p); personal(F.Apple.user, user, user: true, &w, p)
        case .appleHistoryCompleted(let revision, let user):
            w.field(id, revision); personal(F.Apple.user, user, user: true, &w, p)
        case .storeProductViewPresented(let view, let item, let style, let affiliate, let campaign, let provider):
            // The item as its number (an Apple ID is digits, checked on the way in).
            w.field(id, view); w.field(F.ProductView.item, unsigned: UInt64(item) ?? 0)
            if style != .sheet { w.field(F.ProductView.style, unsigned: UInt64(style.storedCode)) }
            w.field(F.ProductView.affiliate, affiliate); w.field(F.ProductView.campaign, campaign); w.field(F.ProductView.provider, provider)
        case .storeProductViewLoaded(let view), .storeProductViewDismissed(let view):
            w.field(id, view)
        case .storeProductViewFailed(let view, let e):
            w.field(id, view); error(e, &w, p)
        }
    }

    /// `value * scale` as an integer, when dividing it back gives exactly `value`.
    static func exactScaled(_ value: Double, _ scale: Double) -> Int64? {
        let scaled = (value * scale).rounded()
        guard abs(scaled) < 9e15, Double(Int64(scaled)) / scale == value else { return nil }
        return Int64(scaled)
    }

    static func error(_ e: StoreError, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        w.message(PayloadField.error) { m in
            m.field(PayloadField.StoreErrorMessage.domain, e.domain); m.field(PayloadField.StoreErrorMessage.code, signed: e.code)
            personal(PayloadField.StoreErrorMessage.message, e.message, &m, p)
        }
    }

    /// A personal field: its ref (a varint) when the ledger keeps personal values apart, else the
    /// text (docs/format.md).
    @inline(__always)
    static func personal(_ f: UInt64, _ value: String?, user: Bool = false, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        guard let value else { return }
        if let ref = p?.known(value, isUser: user) { w.field(f, unsigned: UInt64(ref)) } else { w.field(f, value) }
    }

    static func downloads(_ specs: [DownloadSpec]?, _ w: inout BinaryWriter) {
        guard let specs else { return }
        typealias F = PayloadField.Delivered
        for s in specs {
            w.message(PayloadField.Purchase.download) { m in
                m.field(F.download, s.download); m.field(F.content, s.content); m.field(F.version, s.contentVersion.text)
                m.field(F.length, signed: s.contentLength)
            }
        }
        // Distinguishes an empty list from no list (some wrappers treat them differently).
        if specs.isEmpty { w.field(PayloadField.Purchase.noDownloads, unsigned: 1) }
    }

    /// A purchase's or restore's terms, absent when it has none. Environment, ownership and
    /// offer type are stored codes; an absent code is the default (production, purchased, no
    /// offer).
    static func terms(_ t: PurchaseTerms, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        guard !t.isEmpty else { return }
        typealias F = PayloadField.Terms
        w.message(PayloadField.Purchase.terms) { m in
            m.field(F.price, t.price); m.field(F.currency, t.currency); m.field(F.storefront, t.storefront)
            if let e = t.environment { m.field(F.environment, unsigned: UInt64(e.storedCode)) }
            if let o = t.ownership { m.field(F.ownership, unsigned: UInt64(o.storedCode)) }
            if let offer = t.offer {
                m.field(F.offerType, unsigned: UInt64(offer.type.storedCode))
                m.field(F.offerID, offer.id)
            }
            m.field(F.unverified, t.unverified)
            signed(F.signed, t.signedTransaction, &m, p)
        }
    }

    /// A signed transaction as field `f`: a ``PayloadField/Signed`` message.
    static func signed(_ f: UInt64, _ jws: String?, _ w: inout BinaryWriter, _ p: PersonalEncoder?) {
        guard let jws else { return }
        typealias F = PayloadField.Signed
        let (header, body) = SignedTransaction.split(jws: jws)
        w.message(f) { m in
            if let p, let ref = p.known(String(body), isUser: false) {
                if header != nil, let digest = p.signingHeader {
                    m.key(F.header, .bytes)
                    m.lengthPrefixed(digest)
                }
                m.field(F.body, unsigned: UInt64(ref))
            } else {
                m.field(F.text, jws)
            }
        }
    }

    /// The signed transaction of message `reader` (nil: none): header and body joined again; an
    /// erased body reads as its marker alone.
    static func signed(_ reader: BinaryReader?, _ p: PersonalValues, introductions: BinaryReader?) throws(Failure) -> String? {
        guard var m = reader else { return nil }
        typealias F = PayloadField.Signed
        var digest: [UInt8]?
        var ref: UInt64?
        var text: String?
        while !m.isAtEnd {
            let (number, wire) = try m.key()
            switch (number, wire) {
            case (F.header, 2): digest = try m.bytes()
            case (F.body, 0): ref = try m.varint()
            case (F.text, 2): text = try m.string()
            default: try m.skip(wire: wire)
            }
        }
        if let text { return text }
        guard let ref else { throw Failure(message: "a signed transaction without its body") }
        guard let body = try p.value(ref) else {
            return PersonalValues.erasedMarker(ref: ref, commitment: try PayloadCodec.commitment(of: ref, in: introductions) ?? p.erasedCommitment(ref))
        }
        guard let digest else { return body }
        guard let header = try p.header(digest) else { return body }
        return header + "." + body
    }

    static func terms(_ f: Fields, _ p: PersonalValues) throws(Failure) -> PurchaseTerms {
        typealias F = PayloadField.Terms
        guard var m = f.messages.last(where: { $0.0 == PayloadField.Purchase.terms })?.1 else { return .none }
        let g = try read(&m, nested: F.signed)
        var t = PurchaseTerms(price: g.strings[F.price], currency: g.strings[F.currency], storefront: g.strings[F.storefront])
        if let code = g.ints[F.environment] { t.environment = try StoreEnvironment.stored(code) }
        if let code = g.ints[F.ownership] { t.ownership = try Ownership.stored(code) }
        if let code = g.ints[F.offerType] { t.offer = Offer(type: try OfferType.stored(code), id: g.strings[F.offerID]) }
        t.unverified = g.strings[F.unverified]
        t.signedTransaction = try signed(g.messages.last(where: { $0.0 == F.signed })?.1, p, introductions: f.introductions)
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
                    guard number == PayloadField.introductions, wire == 2 else {
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
    static func commitments(in introductions: BinaryReader) throws(Failure) -> [(UInt64, [UInt8])] {
        var m = introductions
        var pairs: [(UInt64, [UInt8])] = []
        while !m.isAtEnd {
            let ref = try m.varint()
            let span = try m.fixed(PersonalValues.commitmentSize)
            pairs.append((ref, Array(m.base[span])))
        }
        return pairs
    }
}
