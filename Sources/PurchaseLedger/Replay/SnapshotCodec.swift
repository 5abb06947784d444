/// The reducer state as bytes, for snapshots. Sequential, not tagged: a snapshot is only ever read
/// by the same ``Reducer/version`` and ``format`` that wrote it; any other is ignored and the state
/// is replayed from the log instead.
enum SnapshotCodec {
    static let format = 1

    typealias Failure = BinaryReader.Failure

    static func encode(_ s: LedgerState) -> [UInt8] {
        var w = BinaryWriter(capacity: 64 + s.transactions.count * 64 + s.downloads.count * 96)
        w.varint(UInt64(s.seq))
        w.varint(s.restoreInProgress ? 1 : 0)
        w.varint(UInt64(s.anomalies))

        w.varint(UInt64(s.products.count))
        for (_, p) in s.products.sorted(by: { $0.key < $1.key }) {
            var inner = BinaryWriter()
            PayloadCodec.encode(.productRegistered(p.registration), into: &inner)
            w.lengthPrefixed(inner.bytes)
            w.zigzag(p.registeredAt.nanosecondsSinceEpoch)
        }
        w.varint(UInt64(s.publishedVersions.count))
        for (key, version) in s.publishedVersions {
            w.lengthPrefixed(key.product); w.lengthPrefixed(key.content); w.lengthPrefixed(version.text)
        }
        w.varint(UInt64(s.transactions.count))
        for (_, t) in s.transactions {
            w.lengthPrefixed(t.transaction); w.lengthPrefixed(t.product); string(t.user, &w)
            w.varint(UInt64(t.quantity))
            w.varint(UInt64(TransactionStatus.allCases.firstIndex(of: t.state)!))
            w.varint((t.finished ? 1 : 0) | (t.revoked ? 2 : 0) | (t.wasDeferred ? 4 : 0) | (t.discardedContent ? 8 : 0))
            string(t.revocationReason, &w); string(t.originalTransaction, &w); string(t.storeTransactionId, &w)
            w.varint(UInt64(t.downloads.count))
            for d in t.downloads { w.lengthPrefixed(d) }
            error(t.error, &w)
            time(t.queuedAt, &w); time(t.purchasedAt, &w); time(t.failedAt, &w); time(t.finishedAt, &w); time(t.revokedAt, &w)
        }
        w.varint(UInt64(s.downloads.count))
        for (_, d) in s.downloads {
            w.lengthPrefixed(d.download); string(d.transaction, &w); string(d.url, &w); string(d.content, &w)
            string(d.contentVersion?.text, &w); int(d.contentLength, &w)
            w.varint(UInt64(DownloadStatus.allCases.firstIndex(of: d.state)!))
            w.varint((d.started ? 1 : 0) | (d.copiedOut ? 2 : 0) | (d.discarded ? 4 : 0))
            w.double(d.progress); int(d.bytesWritten, &w)
            if let r = d.timeRemaining { w.varint(1); w.double(r) } else { w.varint(0) }
            string(d.contentURL, &w); string(d.destination, &w); string(d.checksum, &w); int(d.bytesCopied, &w)
            error(d.error, &w)
            w.varint(d.cancelReason.map { UInt64(CancelReason.allCases.firstIndex(of: $0)! + 1) } ?? 0)
            w.varint(UInt64(d.attempts))
            time(d.startedAt, &w); time(d.lastActivityAt, &w); time(d.finishedAt, &w); time(d.copiedOutAt, &w)
        }
        w.varint(UInt64(s.copiedContent.count))
        for (_, o) in s.copiedContent {
            w.lengthPrefixed(o.product); w.lengthPrefixed(o.content); w.lengthPrefixed(o.contentVersion.text)
            w.lengthPrefixed(o.destination); w.lengthPrefixed(o.transaction); w.lengthPrefixed(o.download)
            w.zigzag(o.copiedAt.nanosecondsSinceEpoch)
        }
        w.varint(UInt64(s.registeredURLs.count))
        for (url, d) in s.registeredURLs { w.lengthPrefixed(url); w.lengthPrefixed(d) }
        w.varint(UInt64(s.owners.count))
        for (p, n) in s.owners { w.lengthPrefixed(p); w.zigzag(Int64(n)) }
        w.varint(UInt64(s.streamVersions.count))
        for (stream, v) in s.streamVersions { w.lengthPrefixed(stream); w.varint(UInt64(v)) }
        return w.bytes
    }

    static func decode(_ bytes: [UInt8]) throws -> LedgerState {
        try bytes.withUnsafeBytes { buffer throws -> LedgerState in
            var r = BinaryReader(buffer)
            var s = LedgerState()
            s.seq = Int64(try r.int(max: Int(Int64.max)))
            s.restoreInProgress = try r.varint() == 1
            s.anomalies = try r.int(max: Int.max)
            let limit = buffer.count
            for _ in 0..<(try r.int(max: limit)) {
                var inner = try r.message()
                let body = try PayloadCodec.decode(.productRegistered, &inner)
                guard case .productRegistered(let registration) = body else {
                    throw Failure(message: "bad product")
                }
                s.products[registration.product] = ProductRecord(registration: registration, registeredAt: Timestamp(nanosecondsSinceEpoch: try r.zigzag()))
            }
            for _ in 0..<(try r.int(max: limit)) {
                let key = ContentKey(product: try r.string(), content: try r.string())
                s.publishedVersions[key] = try version(&r)
            }
            s.transactions.reserveCapacity(try peekCount(r))
            for _ in 0..<(try r.int(max: limit)) {
                var t = TransactionRecord(transaction: try r.string(), product: try r.string(), user: try string(&r),
                                          quantity: try r.int(max: 10), state: try pick(TransactionStatus.allCases, &r))
                let flags = try r.varint()
                t.finished = flags & 1 != 0; t.revoked = flags & 2 != 0; t.wasDeferred = flags & 4 != 0; t.discardedContent = flags & 8 != 0
                t.revocationReason = try string(&r); t.originalTransaction = try string(&r); t.storeTransactionId = try string(&r)
                for _ in 0..<(try r.int(max: limit)) { t.downloads.append(try r.string()) }
                t.error = try error(&r)
                t.queuedAt = try time(&r); t.purchasedAt = try time(&r); t.failedAt = try time(&r); t.finishedAt = try time(&r); t.revokedAt = try time(&r)
                s.transactions[t.transaction] = t
            }
            s.downloads.reserveCapacity(try peekCount(r))
            for _ in 0..<(try r.int(max: limit)) {
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
                d.contentURL = try string(&r); d.destination = try string(&r); d.checksum = try string(&r); d.bytesCopied = try int(&r)
                d.error = try error(&r)
                let reason = try r.int(max: CancelReason.allCases.count)
                d.cancelReason = reason == 0 ? nil : CancelReason.allCases[reason - 1]
                d.attempts = try r.int(max: Int.max)
                d.startedAt = try time(&r); d.lastActivityAt = try time(&r); d.finishedAt = try time(&r); d.copiedOutAt = try time(&r)
                s.downloads[d.download] = d
            }
            for _ in 0..<(try r.int(max: limit)) {
                let o = OwnedContent(product: try r.string(), content: try r.string(), contentVersion: try version(&r),
                                     destination: try r.string(), transaction: try r.string(), download: try r.string(),
                                     copiedAt: Timestamp(nanosecondsSinceEpoch: try r.zigzag()))
                s.copiedContent[ContentKey(product: o.product, content: o.content)] = o
            }
            for _ in 0..<(try r.int(max: limit)) { s.registeredURLs[try r.string()] = try r.string() }
            for _ in 0..<(try r.int(max: limit)) { s.owners[try r.string()] = Int(try r.zigzag()) }
            s.streamVersions.reserveCapacity(try peekCount(r))
            for _ in 0..<(try r.int(max: limit)) { s.streamVersions[try r.string()] = Int64(try r.int(max: Int(Int64.max))) }
            guard r.isAtEnd else { throw Failure(message: "trailing bytes") }
            return s
        }
    }

    private static func peekCount(_ r: BinaryReader) throws(Failure) -> Int {
        var copy = r
        return try copy.int(max: r.end)
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

    private static func time(_ t: Timestamp?, _ w: inout BinaryWriter) { int(t?.nanosecondsSinceEpoch, &w) }

    private static func time(_ r: inout BinaryReader) throws(Failure) -> Timestamp? {
        try int(&r).map(Timestamp.init(nanosecondsSinceEpoch:))
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
