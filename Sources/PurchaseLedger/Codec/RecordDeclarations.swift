// Each persisted record's fields, declared once (``RecordSchema``): the projection table's
// columns and rows, the decoding of those rows (SQLite's and the fleet's), the JSON of
// `replay --json`, and the snapshot record all come from these lists. Adding a field is a line
// here, a migration for each store (`RecordSchemaTests` holds the two together), and the
// reducer line that sets it.
//
// Fields are listed in the order of their JSON members; the key comes first.

/// A record's fields kept as a declared list: what the snapshot codec and the projection
/// readers make and read through its ``schema``.
package protocol DeclaredFields: Sendable, Hashable {
    associatedtype Source: RecordSource where Source.Fields == Self
    static var schema: RecordSchema<Source> { get }
    /// A record with every field at its default, for a decoder to fill in.
    static var blank: Self { get }
}

extension Record where RecordFields: DeclaredFields {
    /// The record's one declaration.
    package static var schema: RecordSchema<Fields.Source> { Fields.schema }
    static var blank: Fields { Fields.blank }

    /// The record a snapshot holds at `r`.
    init(snapshot r: inout BinaryReader) throws(BinaryReader.Failure) {
        var f = Fields.blank
        try Fields.schema.readSnapshot(into: &f, &r)
        self.init(fields: f)
    }

    func writeSnapshot(to w: inout BinaryWriter) {
        Fields.schema.writeSnapshot(fields, to: &w)
    }

    /// The fields a projection row gives back (SQLite's, or the fleet store's).
    static func fields(columns c: some ProjectionColumns) -> Fields {
        var f = Fields.blank
        Fields.schema.read(&f, from: c)
        return f
    }
}

/// A transaction's projection row and JSON: its fields, read in place from the record.
package struct TransactionRow: RecordSource {
    let record: TransactionRecord

    package var fields: TransactionRecord.Fields {
        _read { yield record.fields }
    }
}

/// A download's projection row and JSON: its fields, and what only the state knows.
package struct DownloadRow: RecordSource {
    let record: DownloadRecord
    /// Its place in its transaction's delivery (0 when standalone).
    var position = 0
    /// Its content URL as the state shows it: nil once its transaction has finished.
    var contentURL: String?

    package var fields: DownloadRecord.Fields {
        _read { yield record.fields }
    }

    /// `record` as `state` holds it.
    init(_ record: DownloadRecord, state: LedgerState) {
        self.record = record
        position = record.transaction.flatMap { state.transactions[$0]?.downloads.firstIndex(of: record.download) } ?? 0
        contentURL = state.contentURL(for: record.download)
    }

    init(_ record: DownloadRecord, contentURL: String?) {
        self.record = record
        self.contentURL = contentURL
    }
}

extension TransactionFields: DeclaredFields {
    package typealias Source = TransactionRow
    typealias Field = RecordField<TransactionRow>

    package static var blank: Self { Self(transaction: "", product: "", user: nil, quantity: 0, state: .purchasing) }

    package static let schema = RecordSchema<TransactionRow>([
        .key("transaction", column: "transaction_id", json: "transaction", get: { $0.transaction }, set: { $0.transaction = $1 }),
        .field("product", column: "product", json: "product", get: { $0.product }, set: { $0.product = $1 }),
        .field("user", column: "user_id", json: "user", get: { $0.user }, set: { $0.user = $1 }),
        .field("quantity", column: "quantity", json: "quantity", get: { $0.quantity }, set: { $0.quantity = $1 }),
        .field("state", column: "state", json: "state", get: { $0.state }, set: { $0.state = $1 }),
        .flag("finished", column: "finished", json: "finished", get: { $0.finished }, set: { $0.finished = $1 }),
        .flag("revoked", column: "revoked", json: "revoked", get: { $0.revoked }, set: { $0.revoked = $1 }),
        .field(
            "originalTransaction", column: "original_transaction", json: "originalTransaction", get: { $0.originalTransaction },
            set: { $0.originalTransaction = $1 }),
        .field(
            "storeTransactionId", column: "store_transaction_id", json: "storeTransactionId", get: { $0.storeTransactionId },
            set: { $0.storeTransactionId = $1 }),
        Field.downloads,
        .error(json: "error", get: { $0.error }, set: { $0.error = $1 }),
        .field(
            "revocationReason", column: "revocation_reason", json: "revocationReason", .whenPresent, get: { $0.revocationReason },
            set: { $0.revocationReason = $1 }),
        Field.paid,
        .flag("wasDeferred", column: "was_deferred", get: { $0.wasDeferred }, set: { $0.wasDeferred = $1 }),
        .flag("discardedContent", column: "discarded_content", get: { $0.discardedContent }, set: { $0.discardedContent = $1 }),
        .field("queuedAt", column: "queued_at_ms", get: { $0.queuedAt }, set: { $0.queuedAt = $1 }),
        .field("purchasedAt", column: "purchased_at_ms", get: { $0.purchasedAt }, set: { $0.purchasedAt = $1 }),
        .field("failedAt", column: "failed_at_ms", get: { $0.failedAt }, set: { $0.failedAt = $1 }),
        .field("finishedAt", column: "finished_at_ms", get: { $0.finishedAt }, set: { $0.finishedAt = $1 }),
        .field("revokedAt", column: "revoked_at_ms", get: { $0.revokedAt }, set: { $0.revokedAt = $1 }),
        .field("events", column: "events", get: { $0.events }, set: { $0.events = $1 }),
    ])
}

extension DownloadFields: DeclaredFields {
    package typealias Source = DownloadRow
    typealias Field = RecordField<DownloadRow>

    package static var blank: Self { Self(download: "", transaction: nil) }

    package static let schema = RecordSchema<DownloadRow>([
        .key("download", column: "download_id", json: "download", get: { $0.download }, set: { $0.download = $1 }),
        .field(
            "transaction", column: "transaction_id", json: "transaction", get: { $0.transaction }, set: { $0.transaction = $1 },
            snapshot: Field.transactionPrefix),
        .derived("position", column: "position") { $0.position },
        .field("content", column: "content", json: "content", get: { $0.content }, set: { $0.content = $1 }),
        .field("contentVersion", column: "content_version", json: "contentVersion", get: { $0.contentVersion }, set: { $0.contentVersion = $1 }),
        .field("contentLength", column: "content_length", json: "contentLength", get: { $0.contentLength }, set: { $0.contentLength = $1 }),
        .field("state", column: "state", json: "state", get: { $0.state }, set: { $0.state = $1 }),
        .field("progress", column: "progress", json: "progress", get: { $0.progress }, set: { $0.progress = $1 }),
        Field.contentURL,
        .flag("copiedOut", column: "copied_out", json: "copiedOut", get: { $0.copiedOut }, set: { $0.copiedOut = $1 }),
        .field("destination", column: "destination", json: "destination", get: { $0.destination }, set: { $0.destination = $1 }),
        .flag("started", column: "started", json: "started", get: { $0.started }, set: { $0.started = $1 }),
        .flag("discarded", column: "discarded", json: "discarded", get: { $0.discarded }, set: { $0.discarded = $1 }),
        .derived("lost", column: "lost", json: "lost") { $0.fields.state == .cancelled && $0.fields.cancelReason == .transactionFinished },
        .field("url", column: "url", json: "url", .whenPresent, get: { $0.url }, set: { $0.url = $1 }),
        .field("bytesWritten", column: "bytes_written", get: { $0.bytesWritten }, set: { $0.bytesWritten = $1 }),
        .stored("timeRemaining", get: { $0.timeRemaining }, set: { $0.timeRemaining = $1 }),
        .stored("bytesCopied", get: { $0.bytesCopied }, set: { $0.bytesCopied = $1 }),
        .error(json: nil, get: { $0.error }, set: { $0.error = $1 }),
        .field("cancelReason", column: "cancel_reason", get: { $0.cancelReason }, set: { $0.cancelReason = $1 }),
        .field("attempts", column: "attempts", get: { $0.attempts }, set: { $0.attempts = $1 }),
        .field("startedAt", column: "started_at_ms", get: { $0.startedAt }, set: { $0.startedAt = $1 }),
        .field("lastActivityAt", column: "last_activity_at_ms", get: { $0.lastActivityAt }, set: { $0.lastActivityAt = $1 }),
        .field("finishedAt", column: "finished_at_ms", get: { $0.finishedAt }, set: { $0.finishedAt = $1 }),
        .field("copiedOutAt", column: "copied_out_at_ms", get: { $0.copiedOutAt }, set: { $0.copiedOutAt = $1 }),
        .field("events", column: "events", get: { $0.events }, set: { $0.events = $1 }),
    ])
}

/// An owned content version's projection row and JSON: the copy-out, and what only the state
/// and the history know of it.
package struct OwnedRow: RecordSource {
    package var fields: OwnedContent
    /// The seq of its `owned_content_history` row.
    var historySeq: Int64 = 0
    /// Whether a newer version was published (in the JSON only).
    var updateAvailable = false
}

extension OwnedContent {
    typealias Field = RecordField<OwnedRow>

    static var blank: OwnedContent {
        OwnedContent(
            product: "", content: "", contentVersion: ContentVersion("0")!, destination: "", transaction: "", download: "",
            copiedAt: Timestamp(nanosecondsSinceEpoch: 0))
    }

    package static let schema = RecordSchema<OwnedRow>([
        .key("product", column: "product", json: "product", get: { $0.product }, set: { $0.product = $1 }),
        .field("content", column: "content", json: "content", get: { $0.content }, set: { $0.content = $1 }),
        .field("contentVersion", column: "content_version", json: "contentVersion", get: { $0.contentVersion }, set: { $0.contentVersion = $1 }),
        .field("destination", column: "destination", json: "destination", get: { $0.destination }, set: { $0.destination = $1 }),
        .field("transaction", column: "transaction_id", json: "transaction", get: { $0.transaction }, set: { $0.transaction = $1 }),
        .field("download", column: "download_id", get: { $0.download }, set: { $0.download = $1 }),
        .field("copiedAt", column: "copied_at_ms", get: { $0.copiedAt }, set: { $0.copiedAt = $1 }),
        .derived("historySeq", column: "history_seq") { $0.historySeq },
        Field.updateAvailable,
    ])
}

extension RecordField where Source == OwnedRow {
    /// In the JSON only: the state decides it when the JSON is written.
    static var updateAvailable: RecordField {
        RecordField(
            name: "updateAvailable", columns: [], row: { (_: Source, _: inout [ColumnValue]) in }, read: nil,
            json: { (o: Source, w: inout JSONWriter) in w.field("updateAvailable", o.updateAvailable) }, snapshot: .none)
    }
}

// MARK: - Fields of more than one column, or stored in their own way

extension RecordField {
    /// A store error: `error_domain`, `error_code`, `error_message` (all NULL for none); in the
    /// JSON an object under `json` when there is one.
    static func error(json: String?, get: @escaping @Sendable (Fields) -> StoreError?, set: @escaping @Sendable (inout Fields, StoreError?) -> Void)
        -> RecordField
    {
        let row = { @Sendable (s: Source, values: inout [ColumnValue]) in
            let e = get(s.fields)
            values.append((e?.domain).columnValue)
            values.append((e?.code).columnValue)
            values.append((e?.message).columnValue)
        }
        let read = { @Sendable (fields: inout Fields, c: FieldColumns) in
            guard let domain = c.string(0) else {
                set(&fields, nil)
                return
            }
            set(&fields, StoreError(domain: domain, code: c.int64(1) ?? 0, message: c.string(2) ?? ""))
        }
        var member: (@Sendable (Source, inout JSONWriter) -> Void)?
        if let key = json {
            member = { @Sendable (s: Source, w: inout JSONWriter) in
                guard let e = get(s.fields) else { return }
                w.key(key); w.beginObject(); w.field("domain", e.domain); w.field("code", e.code); w.field("message", e.message); w.endObject()
            }
        }
        let write = { @Sendable (fields: Fields, w: inout BinaryWriter, _: inout SnapshotFieldContext) in
            guard let e = get(fields) else {
                w.varint(0)
                return
            }
            w.varint(1); w.lengthPrefixed(e.domain); w.zigzag(e.code); w.lengthPrefixed(e.message)
        }
        let decode = { @Sendable (fields: inout Fields, r: inout BinaryReader, _: inout SnapshotFieldContext) throws(Failure) in
            guard try r.varint() == 1 else {
                set(&fields, nil)
                return
            }
            set(&fields, StoreError(domain: try r.string(), code: try r.zigzag(), message: try r.string()))
        }
        return RecordField(
            name: "error",
            columns: [
                ProjectionColumn("error_domain", .text, nullable: true), ProjectionColumn("error_code", .integer, nullable: true),
                ProjectionColumn("error_message", .text, nullable: true),
            ],
            row: row, read: read, json: member, snapshot: .value(write: write, read: decode))
    }
}

extension RecordField where Source == TransactionRow {
    /// Its download ids, in delivery order: no column (the `downloads` rows hold their
    /// transaction and position); in a snapshot, each id as what follows the transaction's own
    /// id when it starts with it (``SnapshotFieldContext/key``).
    static var downloads: RecordField {
        RecordField(
            name: "downloads", columns: [], row: { (_: Source, _: inout [ColumnValue]) in }, read: nil,
            json: { (t: Source, w: inout JSONWriter) in
                w.key("downloads"); w.beginArray()
                for d in t.fields.downloads { w.value(d) }
                w.endArray()
            },
            snapshot: .value(
                write: { (t: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in
                    w.varint(UInt64(t.downloads.count))
                    for d in t.downloads { SnapshotText.suffix(d, after: c.key, &w) }
                },
                read: { (t: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                    let count = try r.int(max: r.end)
                    t.downloads.reserveCapacity(count)
                    for _ in 0..<count { t.downloads.append(try SnapshotText.suffix(after: c.key, &r)) }
                }))
    }

    /// The paid terms (contract 5.1), in eight columns where NULL is the common value (a price
    /// from the catalog, production, purchased: 2.9 bytes per event less at 1,000,000 events than
    /// the names); in the JSON as `price`, `currency`, `priceSource`, `storefront`,
    /// `environment`, `ownership`, `offer`.
    static var paid: RecordField {
        RecordField(
            name: "paid",
            columns: ["price", "currency", "price_source", "storefront", "environment", "ownership", "offer_type", "offer_id"].map {
                ProjectionColumn($0, .text, nullable: true)
            },
            row: { (t: Source, values: inout [ColumnValue]) in
                let p = t.fields.paid
                values.append(p.price.columnValue)
                values.append(p.currency.columnValue)
                values.append(p.priceSource == .event ? PriceSource.event.rawValue.columnValue : .null)
                values.append(p.storefront.columnValue)
                values.append(p.environment == .production ? .null : p.environment.rawValue.columnValue)
                values.append(p.ownership == .purchased ? .null : p.ownership.rawValue.columnValue)
                values.append(p.offer?.type.rawValue.columnValue ?? .null)
                values.append((p.offer?.id).columnValue)
            },
            read: { (t: inout Fields, c: FieldColumns) in
                var p = PaidTerms()
                p.price = c.string(0)
                p.currency = c.string(1)
                p.priceSource = c.string(2) == PriceSource.event.rawValue ? .event : p.price == nil ? nil : .catalog
                p.storefront = c.string(3)
                p.environment = c.string(4).flatMap(StoreEnvironment.init(rawValue:)) ?? .production
                p.ownership = c.string(5).flatMap(Ownership.init(rawValue:)) ?? .purchased
                p.offer = c.string(6).flatMap(OfferType.init(rawValue:)).map { Offer(type: $0, id: c.string(7)) }
                t.paid = p
            },
            json: { (t: Source, w: inout JSONWriter) in
                let p = t.fields.paid
                w.field("price", p.price); w.field("currency", p.currency)
                if let source = p.priceSource { w.field("priceSource", source.rawValue) }
                if let storefront = p.storefront { w.field("storefront", storefront) }
                w.field("environment", p.environment.rawValue); w.field("ownership", p.ownership.rawValue)
                if let offer = p.offer {
                    w.key("offer"); w.beginObject(); w.field("type", offer.type.rawValue)
                    if let id = offer.id { w.field("id", id) }
                    w.endObject()
                }
            },
            // The price source's code plus one (0: no price), then the price and currency when
            // there is one; the storefront; environment, ownership and offer type codes in one
            // varint (bits 0-1, 2, 3-5; offer type 0: no offer), and the offer id when there is
            // an offer.
            snapshot: .value(
                write: { (t: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in
                    let p = t.paid
                    if let source = p.priceSource, let price = p.price, let currency = p.currency {
                        w.varint(UInt64(source.storedCode) + 1); w.lengthPrefixed(price); w.lengthPrefixed(currency)
                    } else {
                        w.varint(0)
                    }
                    p.storefront.snapshot(&w, &c)
                    w.varint(UInt64(p.environment.storedCode) | UInt64(p.ownership.storedCode) << 2 | UInt64(p.offer?.type.storedCode ?? 0) << 3)
                    if let offer = p.offer { offer.id.snapshot(&w, &c) }
                },
                read: { (t: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                    var p = PaidTerms()
                    let source = try r.varint()
                    if source != 0 {
                        p.priceSource = try PriceSource.stored(source - 1)
                        p.price = try r.string(); p.currency = try r.string()
                    }
                    p.storefront = try String?(snapshot: &r, &c)
                    let codes = try r.varint()
                    p.environment = try StoreEnvironment.stored(codes & 3)
                    p.ownership = try Ownership.stored(codes >> 2 & 1)
                    if codes >> 3 != 0 { p.offer = Offer(type: try OfferType.stored(codes >> 3), id: try String?(snapshot: &r, &c)) }
                    t.paid = p
                }))
    }
}

extension RecordField where Source == DownloadRow {
    /// The owning transaction, in a snapshot as its length when it starts the download's own id
    /// (``SnapshotFieldContext/key``): `0` for none, `1` and the text, `2` and the length.
    static var transactionPrefix: Snapshot {
        .value(
            write: { (d: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in SnapshotText.prefix(d.transaction, of: c.key, &w) },
            read: { (d: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                d.transaction = try SnapshotText.prefix(of: c.key, &r)
            })
    }

    /// Where the finished content is: the record's own in a snapshot; the state's (nil once the
    /// transaction has finished) in its row and JSON.
    static var contentURL: RecordField {
        RecordField(
            name: "contentURL", columns: [ProjectionColumn("content_url", .text, nullable: true)],
            row: { (d: Source, values: inout [ColumnValue]) in values.append(d.contentURL.columnValue) },
            read: { (d: inout Fields, c: FieldColumns) in d.contentURL = c.string() },
            json: { (d: Source, w: inout JSONWriter) in w.field("contentURL", d.contentURL) },
            snapshot: .value(
                write: { (d: Fields, w: inout BinaryWriter, c: inout SnapshotFieldContext) in d.contentURL.snapshot(&w, &c) },
                read: { (d: inout Fields, r: inout BinaryReader, c: inout SnapshotFieldContext) throws(Failure) in
                    d.contentURL = try String?(snapshot: &r, &c)
                }))
    }
}

/// Text stored relative to a record's key in snapshots.
enum SnapshotText {
    /// `s`, written as what follows `prefix` when it starts with it (a transaction's download ids
    /// start with its own id): `1` and the rest, or `0` and the whole. Bytes, not characters, so
    /// the text read back is the same bytes.
    static func suffix(_ s: String, after prefix: String, _ w: inout BinaryWriter) {
        let head = prefix.utf8.count
        if head > 0, s.utf8.starts(with: prefix.utf8) {
            w.varint(1); w.lengthPrefixed(bytes: s.utf8.dropFirst(head))
        } else {
            w.varint(0); w.lengthPrefixed(s)
        }
    }

    static func suffix(after prefix: String, _ r: inout BinaryReader) throws(BinaryReader.Failure) -> String {
        switch try r.varint() {
        case 0: return try r.string()
        case 1: return String(decoding: Array(prefix.utf8) + (try r.bytes()), as: UTF8.self)
        default: throw BinaryReader.Failure(message: "bad suffix tag")
        }
    }

    /// An optional `s`, written as its length when it is the start of `whole` (a download's
    /// transaction id starts its own id): `0` for none, `1` and the text, `2` and the length.
    static func prefix(_ s: String?, of whole: String, _ w: inout BinaryWriter) {
        guard let s else { w.varint(0); return }
        if !s.isEmpty, whole.utf8.starts(with: s.utf8) {
            w.varint(2); w.varint(UInt64(s.utf8.count))
        } else {
            w.varint(1); w.lengthPrefixed(s)
        }
    }

    static func prefix(of whole: String, _ r: inout BinaryReader) throws(BinaryReader.Failure) -> String? {
        switch try r.varint() {
        case 0: return nil
        case 1: return try r.string()
        case 2:
            let count = try r.int(max: whole.utf8.count)
            return String(decoding: whole.utf8.prefix(count), as: UTF8.self)
        default: throw BinaryReader.Failure(message: "bad prefix tag")
        }
    }
}

/// A store product view's projection row and JSON: its fields, read in place from the record.
package struct ProductViewRow: RecordSource {
    let record: ProductViewRecord

    package var fields: ProductViewRecord.Fields {
        _read { yield record.fields }
    }
}

extension ProductViewFields: DeclaredFields {
    package typealias Source = ProductViewRow

    package static var blank: Self { Self(view: "", item: "", style: .sheet) }

    package static let schema = RecordSchema<ProductViewRow>([
        .key("view", column: "view_id", json: "view", get: { $0.view }, set: { $0.view = $1 }),
        .field("item", column: "item", json: "item", get: { $0.item }, set: { $0.item = $1 }),
        .field("style", column: "style", json: "style", get: { $0.style }, set: { $0.style = $1 }),
        .derived("state", column: "state", json: "state") { $0.fields.state },
        .field("affiliateToken", column: "affiliate_token", json: "affiliateToken", .whenPresent, get: { $0.affiliateToken }, set: { $0.affiliateToken = $1 }),
        .field("campaignToken", column: "campaign_token", json: "campaignToken", .whenPresent, get: { $0.campaignToken }, set: { $0.campaignToken = $1 }),
        .field("providerToken", column: "provider_token", json: "providerToken", .whenPresent, get: { $0.providerToken }, set: { $0.providerToken = $1 }),
        .error(json: "error", get: { $0.error }, set: { $0.error = $1 }),
        .field("presentedAt", column: "presented_at_ms", json: "presentedAt", get: { $0.presentedAt }, set: { $0.presentedAt = $1 }),
        .field("loadedAt", column: "loaded_at_ms", json: "loadedAt", get: { $0.loadedAt }, set: { $0.loadedAt = $1 }),
        .field("failedAt", column: "failed_at_ms", json: "failedAt", get: { $0.failedAt }, set: { $0.failedAt = $1 }),
        .field("dismissedAt", column: "dismissed_at_ms", json: "dismissedAt", get: { $0.dismissedAt }, set: { $0.dismissedAt = $1 }),
        .field("replacedAt", column: "replaced_at_ms", json: "replacedAt", .whenPresent, get: { $0.replacedAt }, set: { $0.replacedAt = $1 }),
        .field("replaces", column: "replaces_view", json: "replaces", .whenPresent, get: { $0.replaces }, set: { $0.replaces = $1 }),
        .field("events", column: "events", get: { $0.events }, set: { $0.events = $1 }),
    ])
}

extension ProductViewStyle: CodedField { static var fallback: ProductViewStyle { .sheet } }
extension ProductViewStatus: CodedField { static var fallback: ProductViewStatus { .presented } }
