/// The reducer state as pages of records, for snapshots (docs/format.md).
///
/// Each kind of record (transactions, downloads, ...) is sorted by key and cut into pages where a
/// key's hash says so, so a change touches only the page holding it: consecutive snapshots share
/// their unchanged pages. Records are sequential, not tagged: a snapshot is only read by the same
/// ``Reducer/version`` and ``format`` that wrote it; any other is ignored and the log replayed.
enum SnapshotCodec {
    static let format = 3

    typealias Failure = BinaryReader.Failure

    /// The kinds of record, in manifest order.
    enum Kind: Int, CaseIterable {
        case products, publishedVersions, transactions, downloads, copiedContent, registeredURLs, owners, orphanStreams
    }

    /// Pages hold about 256 records; a key whose hash ends in eight zero bits closes one.
    static let boundaryMask: UInt64 = 255
    static let maxPageBytes = 256 * 1024

    struct Paged {
        var scalars: [UInt8]
        /// The raw pages of each kind, in order.
        var pages: [[[UInt8]]]
    }

    static func encode(_ s: LedgerState) -> Paged {
        var scalars = BinaryWriter()
        scalars.varint(UInt64(s.seq))
        scalars.varint(s.restoreInProgress ? 1 : 0)
        scalars.varint(UInt64(s.anomalies))
        scalars.varint(UInt64(s.catalogEvents))
        scalars.varint(UInt64(s.restoreEvents))
        var pages: [[[UInt8]]] = []
        for kind in Kind.allCases {
            var records: [(key: String, write: (inout BinaryWriter) -> Void)] = []
            switch kind {
            case .products:
                records = s.products.map { key, p in (key, { w in
                    var inner = BinaryWriter()
                    PayloadCodec.encode(.productRegistered(p.registration), into: &inner)
                    w.lengthPrefixed(inner.bytes)
                    w.zigzag(p.registeredAt.nanosecondsSinceEpoch)
                }) }
            case .publishedVersions:
                records = s.publishedVersions.map { key, v in (key.product + "\u{0}" + key.content, { w in
                    w.lengthPrefixed(key.product); w.lengthPrefixed(key.content); w.lengthPrefixed(v.text)
                }) }
            case .transactions:
                records = s.transactions.map { key, t in (key, { w in transaction(t, &w) }) }
            case .downloads:
                records = s.downloads.map { key, d in (key, { w in download(d, &w) }) }
            case .copiedContent:
                records = s.copiedContent.map { key, o in (key.product + "\u{0}" + key.content, { w in
                    w.lengthPrefixed(o.product); w.lengthPrefixed(o.content); w.lengthPrefixed(o.contentVersion.text)
                    w.lengthPrefixed(o.destination); w.lengthPrefixed(o.transaction); w.lengthPrefixed(o.download)
                    w.zigzag(o.copiedAt.nanosecondsSinceEpoch)
                }) }
            case .registeredURLs:
                records = s.registeredURLs.map { url, d in (url, { w in w.lengthPrefixed(url); w.lengthPrefixed(d) }) }
            case .owners:
                records = s.owners.map { p, n in (p, { w in w.lengthPrefixed(p); w.zigzag(Int64(n)) }) }
            case .orphanStreams:
                records = s.orphanStreamEvents.map { stream, n in (stream, { w in w.lengthPrefixed(stream); w.varint(UInt64(n)) }) }
            }
            records.sort { $0.key < $1.key }
            var kindPages: [[UInt8]] = []
            var page = BinaryWriter(capacity: 4096)
            var count = 0
            func close() {
                guard count > 0 else { return }
                var framed = BinaryWriter(capacity: page.bytes.count + 4)
                framed.varint(UInt64(count))
                framed.bytes.append(contentsOf: page.bytes)
                kindPages.append(framed.bytes)
                page = BinaryWriter(capacity: 4096)
                count = 0
            }
            for record in records {
                record.write(&page)
                count += 1
                if fnv1a(record.key) & boundaryMask == 0 || page.bytes.count >= maxPageBytes { close() }
            }
            close()
            pages.append(kindPages)
        }
        return Paged(scalars: scalars.bytes, pages: pages)
    }

    /// Rebuilds a state from its scalars and raw pages.
    static func decode(scalars: [UInt8], pages: [[[UInt8]]]) throws -> LedgerState {
        var s = LedgerState()
        try scalars.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer)
            s.seq = Int64(try r.int(max: Int(Int64.max)))
            s.restoreInProgress = try r.varint() == 1
            s.anomalies = try r.int(max: Int.max)
            s.catalogEvents = Int64(try r.int(max: Int(Int64.max)))
            s.restoreEvents = Int64(try r.int(max: Int(Int64.max)))
        }
        guard pages.count == Kind.allCases.count else { throw Failure(message: "wrong number of kinds") }
        for kind in Kind.allCases {
            for page in pages[kind.rawValue] {
                try page.withUnsafeBytes { buffer in
                    var r = BinaryReader(buffer)
                    let count = try r.int(max: buffer.count)
                    for _ in 0..<count { try decodeRecord(kind, &r, into: &s) }
                    guard r.isAtEnd else { throw Failure(message: "trailing bytes in a page") }
                }
            }
        }
        return s
    }

    private static func decodeRecord(_ kind: Kind, _ r: inout BinaryReader, into s: inout LedgerState) throws {
        switch kind {
        case .products:
            var inner = try r.message()
            let body = try PayloadCodec.decode(.productRegistered, &inner)
            guard case .productRegistered(let registration) = body else { throw Failure(message: "bad product") }
            s.products[registration.product] = ProductRecord(registration: registration, registeredAt: Timestamp(nanosecondsSinceEpoch: try r.zigzag()))
        case .publishedVersions:
            let key = ContentKey(product: try r.string(), content: try r.string())
            s.publishedVersions[key] = try version(&r)
        case .transactions:
            let t = try transaction(&r)
            s.transactions[t.transaction] = t
        case .downloads:
            let d = try download(&r)
            s.downloads[d.download] = d
        case .copiedContent:
            let o = OwnedContent(product: try r.string(), content: try r.string(), contentVersion: try version(&r),
                                 destination: try r.string(), transaction: try r.string(), download: try r.string(),
                                 copiedAt: Timestamp(nanosecondsSinceEpoch: try r.zigzag()))
            s.copiedContent[ContentKey(product: o.product, content: o.content)] = o
        case .registeredURLs:
            s.registeredURLs[try r.string()] = try r.string()
        case .owners:
            s.owners[try r.string()] = Int(try r.zigzag())
        case .orphanStreams:
            s.orphanStreamEvents[try r.string()] = Int64(try r.int(max: Int(Int64.max)))
        }
    }

    private static func transaction(_ t: TransactionRecord, _ w: inout BinaryWriter) {
        w.lengthPrefixed(t.transaction); w.lengthPrefixed(t.product); string(t.user, &w)
        w.varint(UInt64(t.quantity))
        w.varint(UInt64(TransactionStatus.allCases.firstIndex(of: t.state)!))
        w.varint((t.finished ? 1 : 0) | (t.revoked ? 2 : 0) | (t.wasDeferred ? 4 : 0) | (t.discardedContent ? 8 : 0))
        string(t.revocationReason, &w); string(t.originalTransaction, &w); string(t.storeTransactionId, &w)
        w.varint(UInt64(t.downloads.count))
        for d in t.downloads { w.lengthPrefixed(d) }
        error(t.error, &w)
        time(t.queuedAt, &w); time(t.purchasedAt, &w); time(t.failedAt, &w); time(t.finishedAt, &w); time(t.revokedAt, &w)
        w.varint(UInt64(t.events))
    }

    private static func transaction(_ r: inout BinaryReader) throws(Failure) -> TransactionRecord {
        var t = TransactionRecord(transaction: try r.string(), product: try r.string(), user: try string(&r),
                                  quantity: try r.int(max: 10), state: try pick(TransactionStatus.allCases, &r))
        let flags = try r.varint()
        t.finished = flags & 1 != 0; t.revoked = flags & 2 != 0; t.wasDeferred = flags & 4 != 0; t.discardedContent = flags & 8 != 0
        t.revocationReason = try string(&r); t.originalTransaction = try string(&r); t.storeTransactionId = try string(&r)
        let count = try r.int(max: r.end)
        t.downloads.reserveCapacity(count)
        for _ in 0..<count { t.downloads.append(try r.string()) }
        t.error = try error(&r)
        t.queuedAt = try time(&r); t.purchasedAt = try time(&r); t.failedAt = try time(&r); t.finishedAt = try time(&r); t.revokedAt = try time(&r)
        t.events = Int64(try r.int(max: Int(Int64.max)))
        return t
    }

    private static func download(_ d: DownloadRecord, _ w: inout BinaryWriter) {
        w.lengthPrefixed(d.download); string(d.transaction, &w); string(d.url, &w); string(d.content, &w)
        string(d.contentVersion?.text, &w); int(d.contentLength, &w)
        w.varint(UInt64(DownloadStatus.allCases.firstIndex(of: d.state)!))
        w.varint((d.started ? 1 : 0) | (d.copiedOut ? 2 : 0) | (d.discarded ? 4 : 0))
        w.double(d.progress); int(d.bytesWritten, &w)
        if let r = d.timeRemaining { w.varint(1); w.double(r) } else { w.varint(0) }
        string(d.contentURL, &w); string(d.destination, &w); int(d.bytesCopied, &w)
        error(d.error, &w)
        w.varint(d.cancelReason.map { UInt64(CancelReason.allCases.firstIndex(of: $0)! + 1) } ?? 0)
        w.varint(UInt64(d.attempts))
        time(d.startedAt, &w); time(d.lastActivityAt, &w); time(d.finishedAt, &w); time(d.copiedOutAt, &w)
        w.varint(UInt64(d.events))
    }

    private static func download(_ r: inout BinaryReader) throws(Failure) -> DownloadRecord {
        var d = DownloadRecord(download: try r.string(), transaction: try string(&r), url: try string(&r), content: try string(&r))
        if let text = try string(&r) {
            guard let v = ContentVersion(text) else { throw Failure(message: "bad version") }
            d.contentVersion = v
        }
        d.contentLength = try int(&r)
        d.state = try pick(DownloadStatus.allCases, &r)
        let flags = try r.varint()
        d.started = flags & 1 != 0; d.copiedOut = flags & 2 != 0; d.discarded = flags & 4 != 0
        d.progress = try r.double(); d.bytesWritten = try int(&r)
        d.timeRemaining = try r.varint() == 1 ? try r.double() : nil
        d.contentURL = try string(&r); d.destination = try string(&r); d.bytesCopied = try int(&r)
        d.error = try error(&r)
        let reason = try r.int(max: CancelReason.allCases.count)
        d.cancelReason = reason == 0 ? nil : CancelReason.allCases[reason - 1]
        d.attempts = try r.int(max: Int.max)
        d.startedAt = try time(&r); d.lastActivityAt = try time(&r); d.finishedAt = try time(&r); d.copiedOutAt = try time(&r)
        d.events = Int64(try r.int(max: Int(Int64.max)))
        return d
    }

    /// FNV-1a of the key's bytes: stable across runs and platforms, unlike `Hasher`.
    static func fnv1a(_ key: String) -> UInt64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in key.utf8 {
            hash ^= UInt64(byte)
            hash = hash &* 0x100_0000_01b3
        }
        return hash
    }

    private static func string(_ s: String?, _ w: inout BinaryWriter) {
        if let s { w.varint(1); w.lengthPrefixed(s) } else { w.varint(0) }
    }

    private static func string(_ r: inout BinaryReader) throws(Failure) -> String? {
        try r.varint() == 1 ? try r.string() : nil
    }

    private static func int(_ v: Int64?, _ w: inout BinaryWriter) {
        if let v { w.varint(1); w.zigzag(v) } else { w.varint(0) }
    }

    private static func int(_ r: inout BinaryReader) throws(Failure) -> Int64? {
        try r.varint() == 1 ? try r.zigzag() : nil
    }

    /// 0 for none; `zigzag(ms) << 1 | 1` for whole milliseconds (the usual case); else
    /// `zigzag(ns) << 1`, shifted by one more bit so 0 stays free.
    private static func time(_ t: Timestamp?, _ w: inout BinaryWriter) {
        guard let ns = t?.nanosecondsSinceEpoch else { w.varint(0); return }
        let zig = { (v: Int64) in UInt64(bitPattern: (v << 1) ^ (v >> 63)) }
        if ns % 1_000_000 == 0 {
            w.varint(zig(ns / 1_000_000) << 2 | 1)
        } else if abs(ns) < Int64.max >> 3 {
            w.varint(zig(ns) << 2 | 2)
        } else {
            w.varint(3)
            w.zigzag(ns)
        }
    }

    private static func time(_ r: inout BinaryReader) throws(Failure) -> Timestamp? {
        let raw = try r.varint()
        if raw == 0 { return nil }
        if raw == 3 { return Timestamp(nanosecondsSinceEpoch: try r.zigzag()) }
        let zig = raw >> 2
        let value = Int64(bitPattern: (zig >> 1) ^ (0 &- (zig & 1)))
        return Timestamp(nanosecondsSinceEpoch: raw & 3 == 1 ? value &* 1_000_000 : value)
    }

    private static func error(_ e: StoreError?, _ w: inout BinaryWriter) {
        guard let e else { w.varint(0); return }
        w.varint(1); w.lengthPrefixed(e.domain); w.zigzag(e.code); w.lengthPrefixed(e.message)
    }

    private static func error(_ r: inout BinaryReader) throws(Failure) -> StoreError? {
        guard try r.varint() == 1 else { return nil }
        return StoreError(domain: try r.string(), code: try r.zigzag(), message: try r.string())
    }

    private static func version(_ r: inout BinaryReader) throws(Failure) -> ContentVersion {
        guard let v = ContentVersion(try r.string()) else { throw Failure(message: "bad version") }
        return v
    }

    private static func pick<T>(_ all: [T], _ r: inout BinaryReader) throws(Failure) -> T {
        all[try r.int(max: all.count - 1)]
    }
}
