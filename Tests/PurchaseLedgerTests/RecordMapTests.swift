import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// The paged record map behind a state's transactions and downloads, and the incremental
/// snapshots built on it.
@Suite struct RecordMapTests {
    /// A snapshot manifest written before store product views existed ends after the orphan
    /// streams; it still loads, with no views (so a ledger's snapshots survive the upgrade), and
    /// one written now carries its views.
    @Test func aManifestFromBeforeProductViewsStillLoads() throws {
        var state = LedgerState()
        for e in [E.product("p1"), E.queued("t1"), E.purchased("t1")] { _ = try Reducer.reduce(&state, e) }
        let encoded = try SnapshotCodec.encode(state) { _ in false }
        let pages = Dictionary(encoded.pages.map { ($0.address, $0.data) }, uniquingKeysWith: { a, _ in a })
        #expect(encoded.manifest.last == 0, "no views: the manifest ends with their count, 0")
        let old = try SnapshotCodec.decode(manifest: Array(encoded.manifest.dropLast()), cache: SnapshotPageCache()) { pages[$0] }
        #expect(old.transactions["t1"] == state.transactions["t1"] && old.productViews.isEmpty && old.seq == state.seq)
        #expect(throws: (any Error).self) {
            try SnapshotCodec.decode(manifest: Array(encoded.manifest.dropLast(2)), cache: SnapshotPageCache()) { pages[$0] }
        }
        for e in [E.viewPresented("v1", campaign: "spring"), E.viewLoaded("v1")] { _ = try Reducer.reduce(&state, e) }
        let withViews = try SnapshotCodec.encode(state) { _ in false }
        let more = Dictionary(withViews.pages.map { ($0.address, $0.data) }, uniquingKeysWith: { a, _ in a })
        let back = try SnapshotCodec.decode(manifest: withViews.manifest, cache: SnapshotPageCache()) { more[$0] }
        #expect(back.productViews == state.productViews && back.productViews["v1"]?.campaignToken == "spring")
    }

    static func record(_ id: String, _ product: String = "p1") -> TransactionRecord {
        TransactionRecord(transaction: id, product: product, user: nil, quantity: 1, state: .purchasing)
    }

    /// A map with a snapshot base, as a loaded state has: changes, additions and removals on top
    /// read like a plain dictionary with the same operations.
    @Test func aBaseWithChangesReadsLikeADictionary() throws {
        var plain = RecordMap<TransactionRecord>()
        for i in 0..<1000 { plain["t\(i)"] = Self.record("t\(i)") }
        var state = LedgerState()
        state.transactions = plain
        let encoded = try SnapshotCodec.encode(state) { _ in false }
        #expect(encoded.transactions.base!.pages.count > 1, "1,000 records span several pages")
        var paged = encoded.transactions
        var reference: [String: TransactionRecord] = [:]
        for i in 0..<1000 { reference["t\(i)"] = Self.record("t\(i)") }
        #expect(paged == plain && paged.count == 1000)

        var generator = SystemRandomNumberGenerator()
        for step in 0..<3000 {
            let id = "t\(Int.random(in: 0..<1200, using: &generator))"
            switch step % 4 {
            case 0: paged[id] = nil; reference[id] = nil
            case 1: paged[id] = Self.record(id, "p\(step)"); reference[id] = Self.record(id, "p\(step)")
            case 2:
                paged[id]?.quantity += 1
                reference[id]?.quantity += 1
            default:
                _ = paged.update(id) { $0.events += 1 }
                if reference[id] != nil { reference[id]!.events += 1 }
            }
            #expect(paged[id] == reference[id])
            #expect(paged.count == reference.count)
        }
        #expect(paged.keys == reference.keys.sorted())
        #expect(paged.values == reference.keys.sorted().map { reference[$0]! })
        #expect(paged.mapValues(\.quantity) == reference.mapValues(\.quantity))
        #expect(paged.contains("t1") == (reference["t1"] != nil))
    }

    /// A map handed to the snapshot encoder on another thread and changed meanwhile
    /// (`SnapshotEncoder`, forget's replay): carried onto the encoded map, it reads as the map
    /// changed, whatever the changes (records changed, added, removed, removed and added again),
    /// and the next snapshot of it loads back equal.
    @Test func aMapCarriedOntoItsSnapshotReadsAsItWasChanged() throws {
        var plain = RecordMap<TransactionRecord>()
        for i in 0..<1000 { plain["t\(i)"] = Self.record("t\(i)") }
        var state = LedgerState()
        state.transactions = plain
        var generator = LZ4CodecTests.SplitMix(state: 11)
        func change(_ map: inout RecordMap<TransactionRecord>, _ steps: Int) {
            for step in 0..<steps {
                let id = "t\(Int.random(in: 0..<1200, using: &generator))"
                switch step % 4 {
                case 0: map[id] = nil
                case 1: map[id] = Self.record(id, "p\(step)")
                case 2: map[id]?.quantity += 1
                default: _ = map.update(id) { $0.events += 1 }
                }
            }
        }
        // A snapshot base with changes on top: the map as the replay hands it over.
        var handedOver = try SnapshotCodec.encode(state) { _ in false }.transactions
        change(&handedOver, 400)
        state.transactions = handedOver
        let encoded = try SnapshotCodec.encode(state) { _ in false }.transactions
        #expect(encoded == handedOver)
        for steps in [0, 1, 50, 2000] {
            var current = handedOver
            change(&current, steps)
            let carried = RecordMap.carrying(current, since: handedOver, onto: encoded)
            #expect(carried == current && carried.count == current.count, "\(steps) changes")
            var next = state
            next.transactions = carried
            let reloaded = try SnapshotCodec.encode(next) { _ in false }.transactions
            #expect(reloaded == current, "\(steps) changes, snapshot again")
        }
    }

    /// Records round-trip through a snapshot's pages byte for byte, whatever their times (kept
    /// as differences within a record) and ids (a download id after its transaction's, a
    /// transaction id at the start of its download's, kept as a suffix and a length).
    @Test func recordsRoundTripThroughPagesExactly() throws {
        let times: [Timestamp?] = [
            nil, Timestamp(nanosecondsSinceEpoch: 1_709_251_247_942_000_000), Timestamp(nanosecondsSinceEpoch: 1_709_251_247_942_000_001),
            Timestamp(nanosecondsSinceEpoch: .min), Timestamp(nanosecondsSinceEpoch: .max), Timestamp(nanosecondsSinceEpoch: 0),
            Timestamp(nanosecondsSinceEpoch: -5), Timestamp(nanosecondsSinceEpoch: .max - 999_999),
        ]
        // "e" then a combining accent: a prefix in bytes of "e\u{301}...", not in characters.
        let ids = ["t1", "", "e", "e\u{301}x", "\u{1F600}", "tx-0000001"]
        var state = LedgerState()
        var generator = SystemRandomNumberGenerator()
        func time() -> Timestamp? { times.randomElement(using: &generator)! }
        for i in 0..<600 {
            let id = ids[i % ids.count] + (i < ids.count ? "" : "\(i)")
            var t = TransactionRecord(transaction: id, product: "p", user: nil, quantity: 1, state: .purchased)
            t.queuedAt = time(); t.purchasedAt = time(); t.failedAt = time(); t.finishedAt = time(); t.revokedAt = time()
            t.downloads = [id + "-d1", id, ids.randomElement(using: &generator)! + "-x", id + "\u{301}"]
            state.transactions[id] = t
            for (n, download) in t.downloads.enumerated() where state.downloads[download] == nil {
                let transaction: String? = [nil, id, "other", download, String(download.prefix(1))][(n + i) % 5]
                var d = DownloadRecord(download: download, transaction: transaction)
                d.startedAt = time(); d.lastActivityAt = time(); d.finishedAt = time(); d.copiedOutAt = time()
                state.downloads[download] = d
            }
        }
        let encoded = try SnapshotCodec.encode(state) { _ in false }
        let pages = Dictionary(encoded.pages.map { ($0.address, $0.data) }, uniquingKeysWith: { a, _ in a })
        let decoded = try SnapshotCodec.decode(manifest: encoded.manifest, cache: SnapshotPageCache()) { pages[$0] }
        #expect(decoded.transactions.count == state.transactions.count && decoded.downloads.count == state.downloads.count)
        for (id, t) in state.transactions.values.map({ ($0.transaction, $0) }) {
            let back = try #require(decoded.transactions[id])
            #expect(back == t)
            #expect(Array(back.transaction.utf8) == Array(t.transaction.utf8))
            #expect(back.downloads.map { Array($0.utf8) } == t.downloads.map { Array($0.utf8) })
            let backTimes: [Timestamp?] = [back.queuedAt, back.purchasedAt, back.failedAt, back.finishedAt, back.revokedAt]
            let wroteTimes: [Timestamp?] = [t.queuedAt, t.purchasedAt, t.failedAt, t.finishedAt, t.revokedAt]
            #expect(backTimes.map { $0?.nanosecondsSinceEpoch } == wroteTimes.map { $0?.nanosecondsSinceEpoch })
        }
        for d in state.downloads.values {
            let back = try #require(decoded.downloads[d.download])
            #expect(back == d)
            let backTransaction: [UInt8]? = back.transaction.map { Array($0.utf8) }
            #expect(backTransaction == d.transaction.map { Array($0.utf8) })
            let backTimes: [Timestamp?] = [back.startedAt, back.lastActivityAt, back.finishedAt, back.copiedOutAt]
            let wroteTimes: [Timestamp?] = [d.startedAt, d.lastActivityAt, d.finishedAt, d.copiedOutAt]
            #expect(backTimes.map { $0?.nanosecondsSinceEpoch } == wroteTimes.map { $0?.nanosecondsSinceEpoch })
        }
    }

    /// A page written with each record's length (format 10) gives one record by decoding it
    /// alone, and a page written without (format 9) still gives every record: the same records,
    /// the same misses, whichever layout, whichever is read first (one record or all).
    @Test func aRecordIsReadAloneFromAPageWithLengthsAndEitherLayoutLoads() throws {
        var records: [(key: String, value: TransactionRecord)] = []
        for i in 0..<300 {
            var t = TransactionRecord(transaction: "tx-\(1000 + 2 * i)", product: "p\(i % 7)", user: i % 3 == 0 ? nil : "u-\(i)", quantity: 1, state: .purchased)
            t.purchasedAt = Timestamp(nanosecondsSinceEpoch: 1_709_251_247_942_000_000 + Int64(i))
            records.append((t.transaction, t))
        }
        for indexed in [false, true] {
            let raws = SnapshotCodec.cut(records, key: \.key, indexed: indexed) { r, w in r.value.writeSnapshot(to: &w) }
            #expect(raws.count == 1, "one page (no key closes one early here)")
            let raw = try #require(raws.first).raw
            #expect(try raw.withUnsafeBytes { try SnapshotCodec.pageIndex($0) != nil } == indexed)
            // The records the page decodes, counted.
            let decodes = Locked(0)
            let reader: SnapshotCodec.RecordReader<TransactionRecord> = { (r: inout BinaryReader) throws(BinaryReader.Failure) in
                decodes.withLock { $0 += 1 }
                return try SnapshotCodec.keyedTransaction(&r)
            }
            func page() throws -> StoredRecordPage<TransactionRecord> {
                let stored = try SnapshotCodec.store(raw)
                return StoredRecordPage(
                    address: stored.address, rawSize: raw.count, firstID: records[0].key, count: records.count, storage: .encoded(stored.data, reader))
            }
            let lookedUp = try page()
            #expect(lookedUp.page.value(for: "tx-1100") == records[50].value)
            #expect(decodes.withLock { $0 } == (indexed ? 1 : records.count), "one record decoded, or (without lengths) the page")
            #expect(lookedUp.page.value(for: "tx-1102") == records[51].value)
            #expect(decodes.withLock { $0 } == (indexed ? 2 : records.count))
            for (key, value) in records.shuffled() { #expect(lookedUp.page.value(for: key) == value) }
            // Read many times, a page with lengths is decoded whole once, then searched.
            #expect(decodes.withLock { $0 } == (indexed ? 75 + records.count : records.count))
            for missing in ["tx-1001", "tx-0", "tx-9999", "", "tx-1000 "] { #expect(lookedUp.page.value(for: missing) == nil) }
            #expect(lookedUp.records.map(\.key) == records.map(\.key))
            #expect(lookedUp.records.map(\.value) == records.map(\.value))
            let readWhole = try page()
            #expect(readWhole.records.map(\.value) == records.map(\.value))
            #expect(readWhole.page.value(for: "tx-1100") == records[50].value)
        }
        // A record that does not end where its length says is refused.
        var bad = SnapshotCodec.cut(records, key: \.key, indexed: true) { r, w in r.value.writeSnapshot(to: &w) }[0].raw
        let (at, length) = try bad.withUnsafeBytes { buffer in
            var r = BinaryReader(buffer, offset: 1)
            _ = try r.varint()
            let length = try r.varint()
            return (r.offset - 1, length)
        }
        #expect(length < 127, "a one-byte length")
        bad[at] = UInt8(length + 1)
        #expect(throws: BinaryReader.Failure.self) {
            try bad.withUnsafeBytes { buffer in _ = try SnapshotCodec.decodePage(buffer, SnapshotCodec.keyedTransaction) }
        }
    }

    /// A state whose pages were written without record lengths (format 9) loads equal, and a
    /// later snapshot that keeps some of those pages and writes others with lengths loads equal.
    @Test func pagesWithoutLengthsStillLoadBesidePagesWithThem() throws {
        var state = LedgerState()
        for i in 0..<2_000 {
            let id = "t\(i)"
            state.transactions[id] = TransactionRecord(transaction: id, product: "p", user: "u\(i % 50)", quantity: 1, state: .purchased)
            state.downloads["d\(i)"] = DownloadRecord(download: "d\(i)", transaction: id)
        }
        let old = try SnapshotCodec.encode(state, indexedPages: false) { _ in false }
        var pages = Dictionary(old.pages.map { ($0.address, $0.data) }, uniquingKeysWith: { a, _ in a })
        let loaded = try SnapshotCodec.decode(manifest: old.manifest, cache: SnapshotPageCache()) { pages[$0] }
        #expect(loaded == state)
        #expect(loaded.transactions["t1234"] == state.transactions["t1234"] && loaded.downloads["d7"] == state.downloads["d7"])
        // The transactions whose ids start "t1" change, nearly every record of their pages (so
        // those are written again, with lengths); the other pages are kept as they are.
        var next = loaded
        var changed = state
        for i in 0..<2_000 where String(i).hasPrefix("1") {
            next.transactions["t\(i)"]?.finished = true
            changed.transactions["t\(i)"]?.finished = true
        }
        let mixed = try SnapshotCodec.encode(next) { pages[$0] != nil }
        for page in mixed.pages { pages[page.address] = page.data }
        let raws = try mixed.pages.map { page in try LZ4.decompressStored(page.data, originalSize: page.rawSize, "a page") }
        #expect(raws.contains { raw in (try? raw.withUnsafeBytes { try SnapshotCodec.pageIndex($0) }) != nil }, "some pages written with lengths")
        #expect(mixed.pages.count < old.pages.count, "some pages kept from the first snapshot")
        let back = try SnapshotCodec.decode(manifest: mixed.manifest, cache: SnapshotPageCache()) { pages[$0] }
        #expect(back == changed)
    }

    /// A record read from a shared page and changed is copied: the page, and every other state
    /// loaded from it, still see the old record.
    @Test func changingARecordNeverChangesTheSharedPage() throws {
        var state = LedgerState()
        state.transactions["t1"] = Self.record("t1")
        let encoded = try SnapshotCodec.encode(state) { _ in false }
        let a = encoded.transactions
        var b = a
        b["t1"]?.state = .purchased
        #expect(a["t1"]?.state == .purchasing)
        #expect(b["t1"]?.state == .purchased)
        #expect(encoded.transactions["t1"]?.state == .purchasing)
    }

    /// A snapshot taken after a few changes writes only the pages holding them; the rest are
    /// referred to by address. Every state, at every seq, still equals a fold of the log.
    @Test func laterSnapshotsWriteOnlyChangedPages() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("incremental.ledger")
        let (ledger, c) = try threeThousandPurchases(at: path, snapshotInterval: 6002)
        try ledger.append(E.queued("t3000"))  // seq 6002: the first snapshot, every page new
        let first = try pageCount(path)
        for i in 3001..<3005 { try ledger.append(contentsOf: [E.queued("t\(i)"), E.purchased("t\(i)")]) }
        try ledger.append(contentsOf: [E.purchased("t3000"), E.finished("t5")])
        // Re-registrations change no record; seq 12004 takes the second snapshot.
        try ledger.append(contentsOf: Array(repeating: E.product("p1"), count: 12004 - 6012))
        let second = try pageCount(path)
        #expect(first >= 10, "3,001 transactions span about 12 pages")
        #expect(second - first <= 5, "the second snapshot wrote \(second - first) new pages next to \(first)")
        let log = try ledger.events(limit: 20_000)
        var folded = LedgerState()
        for e in log { LogReplay.step(&folded, e.event, seq: e.seq) }
        #expect(try ledger.state(atSeq: Int64(log.count)) == folded)
        #expect(ledger.currentState == folded)
        // The pages the writer just wrote are remembered: the state at that snapshot reads none.
        let live = try ledger.state(atSeq: 12004)
        #expect(shared(live, ledger.currentState) == ledger.currentState.transactions.base?.pages.count)
        let reopened = try Ledger(path: path, configuration: c)
        #expect(reopened.currentState == folded)
        // Opening loaded the latest snapshot through the page cache, so the state at the first
        // snapshot reuses every page the two share instead of reading and checking it again.
        let earlier = try reopened.state(atSeq: 6002)
        #expect(shared(earlier, reopened.currentState) >= first - 5, "pages shared with the open state")
        var foldedEarlier = LedgerState()
        for e in log.prefix(6002) { LogReplay.step(&foldedEarlier, e.event, seq: e.seq) }
        #expect(earlier == foldedEarlier)
    }

    /// An old record changed here and there goes to the snapshot's overlay, its page kept as it
    /// was; a page with more than `perPage` changed records is rewritten. A state loaded from
    /// such a snapshot, with nothing cached, equals a fold of the log at every snapshot and between.
    @Test func scatteredChangesGoToTheOverlayAndLoadBackEqual() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("overlay.ledger")
        var (ledger, c): (Ledger?, LedgerConfiguration) = try threeThousandPurchases(
            at: path, snapshotInterval: 500, overlay: .init(perPage: 4, total: 1000))
        // Rounds of 500 events, each ending in a snapshot: a few scattered finishes (kept in the
        // overlay, which grows from round to round), in round 3 six neighbours (one page
        // rewritten), padded with re-registrations that change no record.
        var seq = try ledger!.lastSeq()
        var overlaid: [Int] = []
        for round in 0..<5 {
            var batch: [Event] = (0..<3).map { E.finished("t\((round * 331 + $0 * 997 + 11) % 3000)") }
            if round == 3 { batch += (0..<6).map { E.finished("t\(2100 + $0)") } }
            // New ids that sort between old ones: in the overlay, counted as added.
            if round == 1 || round == 2 { batch.append(E.queued("t\(round)500a")) }
            let next = (seq / 500 + 1) * 500
            batch += Array(repeating: E.product("p1"), count: Int(next - seq) - batch.count)
            try ledger!.append(contentsOf: batch)
            seq = next
            overlaid.append(try latestOverlay(path).records)
        }
        #expect(overlaid[0] == 0 && overlaid.dropFirst().allSatisfy { $0 > 0 }, "every snapshot after the first (all new pages) has an overlay: \(overlaid)")
        #expect(overlaid[2] > overlaid[1], "the overlay grows with the changes it keeps: \(overlaid)")
        #expect(overlaid[3] - overlaid[2] < 2 * (overlaid[2] - overlaid[1]), "the six neighbours rewrote their page instead: \(overlaid)")
        let log = try ledger!.events(limit: 20_000)
        ledger = nil
        let reopened = try Ledger(path: path, configuration: c)
        let snapshotSeqs = try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        #expect(snapshotSeqs.count >= 5)
        let targets = Set(snapshotSeqs.flatMap { [$0, $0 + 1, $0 + 250] }).filter { $0 <= Int64(log.count) }
        var folded = LedgerState()
        for e in log {
            LogReplay.step(&folded, e.event, seq: e.seq)
            if targets.contains(e.seq) {
                let fresh = try Ledger(path: path, configuration: c).state(atSeq: e.seq)
                #expect(fresh == folded, "state at seq \(e.seq), loaded from its snapshot")
                #expect(fresh.transactions.count == folded.transactions.count)
            }
        }
        #expect(reopened.currentState == folded)
    }

    /// A replay from a snapshot decodes, on the scan's decoding thread, the pages the reducer
    /// will read (LogReplay.prefetcher): what a lookup finds in the snapshot's overlay is left
    /// alone (its page holds an older copy), every other record reads as the state holds it,
    /// and a state in memory has no pages to read ahead. States loaded so, several blocks past
    /// their snapshot, equal a fold of the log (scatteredChangesGoToTheOverlayAndLoadBackEqual).
    @Test func pagesReadAheadSkipWhatTheOverlayHolds() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("ahead.ledger")
        let (ledger, c) = try threeThousandPurchases(at: path, snapshotInterval: 500, overlay: .init(perPage: 4, total: 1000))
        // A first snapshot writes every page; then scattered finishes, padded to the next one,
        // go to that one's overlay, their pages kept as they were (unfinished).
        let finished = ["t11", "t1008", "t2005"]
        var seq = try ledger.lastSeq()
        for changes in [[], finished.map { E.finished($0) }] {
            let next = (seq / 500 + 1) * 500
            try ledger.append(contentsOf: changes + Array(repeating: E.product("p1"), count: Int(next - seq) - changes.count))
            seq = next
        }
        #expect(try latestOverlay(path).records == finished.count)
        let state = try Ledger(path: path, configuration: c).state(atSeq: seq)
        let reader = try #require(state.transactions.pageReader, "a state loaded from a snapshot reads its transactions from pages")
        for id in finished {
            #expect(state.transactions[id]?.finished == true)
            #expect(reader.value(for: id) == nil, "\(id) is in the overlay: its page's copy is not read")
        }
        for id in ["t0", "t1500", "t2999"] {
            #expect(reader.value(for: id) == state.transactions[id], "\(id) reads from its page as the state holds it")
        }
        #expect(LogReplay.prefetcher(state) != nil)
        #expect(LogReplay.prefetcher(try ledger.replayFromLog()) == nil, "a state replayed from the first event has no pages")
    }

    /// The overlay is written again by every snapshot, so it is bounded: once the changes it
    /// would keep pass `total`, the pages holding the most of them are rewritten, whatever the
    /// per-page limit. Each snapshot still loads back equal to a fold of the log.
    @Test func theOverlayStaysWithinItsTotalAndLoadsBackEqual() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("budget.ledger")
        let limits = SnapshotCodec.OverlayLimits(perPage: 100, total: 7)
        var (ledger, c): (Ledger?, LedgerConfiguration) = try threeThousandPurchases(at: path, snapshotInterval: 500, overlay: limits)
        var seq = try ledger!.lastSeq()
        var overlaid: [Int] = []
        for round in 0..<6 {
            // Three scattered finishes a round: within the per-page limit, past the total by the
            // third round.
            var batch: [Event] = (0..<3).map { E.finished("t\((round * 419 + $0 * 1009 + 7) % 2900)") }
            let next = (seq / 500 + 1) * 500
            batch += Array(repeating: E.product("p1"), count: Int(next - seq) - batch.count)
            try ledger!.append(contentsOf: batch)
            seq = next
            overlaid.append(try latestOverlay(path).records)
        }
        #expect(overlaid.allSatisfy { $0 <= limits.total }, "every overlay within the total: \(overlaid)")
        #expect(overlaid.contains { $0 > 0 }, "scattered finishes still go to the overlay: \(overlaid)")
        #expect(overlaid.last! < 6 * 3, "pages were rewritten rather than keeping every finish: \(overlaid)")
        ledger = nil
        try expectEverySnapshotLoadsBackEqual(path, c)
    }

    /// The overlay is stored as chunks: a snapshot refers to the earlier chunks that still hold
    /// current records and adds one chunk of the records changed since, so a few late changes
    /// cost a few records, not the whole overlay again. Chunks with no current record are
    /// dropped; past `maxChunks`, or when most of the kept chunks' records are out of date, the
    /// overlay is written as one chunk. Every snapshot loads back equal to a fold of the log.
    @Test func laterSnapshotsAddOnlyWhatChangedToTheOverlay() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("chunks.ledger")
        var (ledger, c): (Ledger?, LedgerConfiguration) = try threeThousandPurchases(at: path, snapshotInterval: 500)
        var seq = try ledger!.lastSeq()
        var rounds: [(records: Int, chunks: [OverlayChunk])] = []
        func round(_ events: [Event]) throws {
            let next = (seq / 500 + 1) * 500
            try ledger!.append(contentsOf: events + Array(repeating: E.product("p1"), count: Int(next - seq) - events.count))
            seq = next
            rounds.append(try latestOverlay(path))
        }
        // The first snapshot writes every page (with the first round's finishes in them).
        try round([E.finished("t10")])
        // None of these ids is in the last page, which is always rewritten.
        try round(["t100", "t1100", "t2100"].map { E.finished($0) })
        try round(["t1500", "t2500"].map { E.finished($0) })
        try round([E.revoked("t100")])
        try round(["t1100", "t2100"].map { E.revoked($0) })
        try round(["t1500", "t2500"].map { E.revoked($0) })
        #expect(rounds.map(\.records) == [0, 3, 5, 5, 5, 5], "current overlay records")
        #expect(rounds.map { $0.chunks.map(\.records) } == [[], [3], [3, 2], [3, 2, 1], [2, 1, 2], [1, 2, 2]])
        #expect(rounds[2].chunks[0] == rounds[1].chunks[0] && rounds[3].chunks[1] == rounds[2].chunks[1], "earlier chunks are referred to")
        // A new chunk each round until there are `maxChunks`; then one.
        for i in 0..<(SnapshotCodec.maxChunks - 3) { try round([E.finished("t\(200 + 10 * i)")]) }
        #expect(rounds.last!.chunks.count == SnapshotCodec.maxChunks)
        try round([E.finished("t290")])
        #expect(rounds.last!.chunks.map(\.records) == [5 + SnapshotCodec.maxChunks - 2])
        // Most of the one chunk's records out of date: written whole again.
        try round((0..<(SnapshotCodec.maxChunks - 3)).map { E.revoked("t\(200 + 10 * $0)") } + [E.revoked("t290")])
        #expect(rounds.last!.chunks.map(\.records) == [5 + SnapshotCodec.maxChunks - 2])
        ledger = nil
        #expect(try expectEverySnapshotLoadsBackEqual(path, c) == rounds.count)
    }

    /// Random changes between snapshots, with small overlay limits so that every path is taken:
    /// pages kept with their changes in the overlay, rewritten past the per-page limit or the
    /// total, chunks kept, dropped and written whole, new ids between old ones. Every snapshot
    /// loads back equal to a fold of the log, and so does every state between them.
    @Test(arguments: [1, 2, 3] as [UInt64])
    func randomChangesBetweenSnapshotsLoadBackEqual(seed: UInt64) throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("random.ledger")
        var (ledger, c): (Ledger?, LedgerConfiguration) = try threeThousandPurchases(
            at: path, snapshotInterval: 60, overlay: .init(perPage: 3, total: 10))
        var rng = LZ4CodecTests.SplitMix(state: seed)
        var chunks: [Int] = []
        for round in 0..<20 {
            var batch: [Event] = []
            for i in 0..<Int.random(in: 0...12, using: &rng) {
                let t = "t\(Int.random(in: 0..<3000, using: &rng))"
                switch Int.random(in: 0..<4, using: &rng) {
                case 0: batch.append(E.finished(t))
                case 1: batch.append(E.revoked(t))
                case 2: batch += [E.queued("\(t)x\(round)-\(i)"), E.purchased("\(t)x\(round)-\(i)")]
                default: batch.append(E.queued("\(t)y\(round)-\(i)"))
                }
            }
            try ledger!.append(contentsOf: batch + Array(repeating: E.product("p1"), count: 60 - batch.count % 60))
            chunks.append(try latestOverlay(path).chunks.count)
        }
        #expect(chunks.max()! >= 2 && zip(chunks, chunks.dropFirst()).contains { $0 >= 2 && $1 == 1 }, "chunks kept, then written whole: \(chunks)")
        ledger = nil
        #expect(try expectEverySnapshotLoadsBackEqual(path, c) >= 20)
        let reopened = try Ledger(path: path, configuration: c)
        var folded = LedgerState()
        for e in try reopened.events(limit: 20_000) {
            LogReplay.step(&folded, e.event, seq: e.seq)
            if e.seq % 97 == 0 { #expect(try Ledger(path: path, configuration: c).state(atSeq: e.seq) == folded, "seq \(e.seq)") }
        }
        let report = try reopened.verify(everySnapshot: true)
        #expect(report.isValid, "\(report.problems.prefix(3))")
    }

    /// An append into an empty ledger (an import) encodes its snapshots on another thread while
    /// the rules go on. They are byte for byte the snapshots the calling thread writes for the
    /// same events appended in small batches (the pages, the overlay chunks, the manifests), and
    /// each loads back equal to a fold of the log.
    @Test(arguments: [4, 5] as [UInt64])
    func aBulkAppendEncodesItsSnapshotsOnAnotherThreadAsTheSerialPathWould(seed: UInt64) throws {
        let dir = try TemporaryDirectory()
        var c = testConfiguration(blockSize: 64, snapshotInterval: 60)
        c.maxSnapshots = 100
        c.maxSnapshotShare = 1
        c.snapshotOverlay = .init(perPage: 3, total: 10)
        var rng = LZ4CodecTests.SplitMix(state: seed)
        var events = [E.product("p1")] + (0..<600).flatMap { [E.queued("t\($0)"), E.purchased("t\($0)")] }
        var finished = Set<String>(), revoked = Set<String>()
        for round in 0..<60 {
            for i in 0..<Int.random(in: 0...12, using: &rng) {
                let t = "t\(Int.random(in: 0..<600, using: &rng))"
                switch Int.random(in: 0..<4, using: &rng) {
                case 0 where finished.insert(t).inserted: events.append(E.finished(t))
                case 1 where revoked.insert(t).inserted: events.append(E.revoked(t))
                case 0, 1: break
                case 2: events += [E.queued("\(t)x\(round)-\(i)"), E.purchased("\(t)x\(round)-\(i)")]
                default: events.append(E.queued("\(t)y\(round)-\(i)"))
                }
            }
            events += Array(repeating: E.product("p1"), count: Int.random(in: 0...20, using: &rng))
        }
        let bulk = dir.path("bulk.ledger"), serial = dir.path("serial.ledger")
        try Ledger(path: bulk, configuration: c).append(contentsOf: events)
        let batches = try Ledger(path: serial, configuration: c)
        try batches.append(contentsOf: [events[0]])
        for start in stride(from: 1, to: events.count, by: 37) {
            try batches.append(contentsOf: Array(events[start..<min(start + 37, events.count)]))
        }
        func stored(_ path: String) throws -> (snapshots: [String], pages: [String]) {
            try DatabaseQueue(path: path).read { db in
                (
                    try Row.fetchAll(db, sql: "SELECT seq, hex(manifest), personal_refs FROM snapshots ORDER BY seq").map {
                        "\($0[0] as Int64) \($0[1] as String) \($0[2] as Int64?)"
                    },
                    try String.fetchAll(db, sql: "SELECT hex(hash) || ' ' || raw_size || ' ' || hex(data) FROM snapshot_pages ORDER BY hash")
                )
            }
        }
        let (a, b) = (try stored(bulk), try stored(serial))
        #expect(a.snapshots.count >= 20, "\(a.snapshots.count) snapshots")
        // (Compared as booleans: the texts are long.)
        let sameSnapshots = a.snapshots == b.snapshots, samePages = a.pages == b.pages
        #expect(sameSnapshots, "first different snapshot: \(zip(a.snapshots, b.snapshots).first { $0 != $1 }.map { $0.0.prefix(80) } ?? "none")")
        #expect(samePages, "\(a.pages.count) pages against \(b.pages.count)")
        #expect(try expectEverySnapshotLoadsBackEqual(bulk, c) == a.snapshots.count)
        #expect(try Ledger(path: bulk, configuration: c).verify(everySnapshot: true).isValid)
    }

    /// Registered URLs are paged like transactions: a URL registered after a snapshot (its key
    /// lands anywhere among the others) goes to an overlay chunk instead of rewriting the page it
    /// sorts into, so a snapshot adds the few URLs registered since, not every page again.
    @Test func registeredURLsArePagedWithAnOverlay() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("urls.ledger")
        var c = testConfiguration(blockSize: 64, snapshotInterval: 0)
        c.maxSnapshots = 100
        func url(_ i: Int) -> String { "https://cdn.example/\(Identifier.stableHash("u\(i)"))" }
        try Ledger(path: path, configuration: c).append(contentsOf: (0..<2000).map { E.registered(url($0), "k\($0)") })
        c.snapshotInterval = 500
        var ledger: Ledger? = try Ledger(path: path, configuration: c)
        var seq = try ledger!.lastSeq()
        var manifests: [(pages: [SnapshotCodec.PageEntry], chunks: [OverlayChunk])] = []
        for round in 0..<3 {
            let urls = (0..<5).map { E.registered(url(2000 + 5 * round + $0), "k\(2000 + 5 * round + $0)") }
            let next = (seq / 500 + 1) * 500
            try ledger!.append(contentsOf: urls + Array(repeating: E.product("p1"), count: Int(next - seq) - urls.count))
            seq = next
            let manifest = try DatabaseQueue(path: path).read { try Data.fetchOne($0, sql: "SELECT manifest FROM snapshots ORDER BY seq DESC LIMIT 1")! }
            let (_, kinds, overlays) = try SnapshotCodec.parse([UInt8](manifest))
            manifests.append((kinds[SnapshotCodec.Kind.registeredURLs.rawValue], overlays[.registeredURLs]?.chunks ?? []))
        }
        #expect(manifests[0].pages.count >= 4, "2,005 URLs span several pages")
        #expect(manifests.map { $0.chunks.map(\.records) }.dropFirst().allSatisfy { $0.reduce(0, +) <= 10 }, "\(manifests.map(\.chunks))")
        let kept = zip(manifests[1].pages, manifests[2].pages).filter { $0.address == $1.address }.count
        #expect(kept >= manifests[1].pages.count - 2, "the pages stay; \(kept) of \(manifests[1].pages.count) kept")
        ledger = nil
        #expect(try expectEverySnapshotLoadsBackEqual(path, c) == 3)
        #expect(try Ledger(path: path, configuration: c).currentState.registeredURLs[url(2014)] == "k2014")
    }

    /// The page cache stays within its limit by dropping the least recently used pages.
    @Test func thePageCacheDropsTheLeastRecentlyUsedPages() {
        let cache = SnapshotPageCache(limit: 4)
        func page(_ name: String) -> StoredRecordPage<TransactionRecord> {
            StoredRecordPage(address: Array(name.utf8), rawSize: 0, firstID: name, count: 0, storage: .decoded([]))
        }
        var loads: [String] = []
        func get(_ name: String) -> String {
            cache.transactionPage(Array(name.utf8)) {
                loads.append(name); return page(name)
            }.firstID
        }
        for name in ["a", "b", "c", "d"] { #expect(get(name) == name) }
        #expect(get("a") == "a" && get("d") == "d", "cached")
        #expect(loads == ["a", "b", "c", "d"])
        #expect(get("e") == "e", "a fifth page: the two least recently used (b, c) go")
        #expect(cache.count <= 4)
        #expect(get("a") == "a" && get("d") == "d" && get("e") == "e")
        #expect(loads == ["a", "b", "c", "d", "e"])
        #expect(get("b") == "b")
        #expect(loads.last == "b", "read again")
    }

    /// A ledger of 3,000 purchased transactions (6,001 events) written without snapshots, opened
    /// again with `snapshotInterval` (and `overlay`'s limits), and that configuration.
    private func threeThousandPurchases(
        at path: String, snapshotInterval: Int, overlay: SnapshotCodec.OverlayLimits = .init()
    ) throws -> (Ledger, LedgerConfiguration) {
        var c = testConfiguration(blockSize: 64, snapshotInterval: 0)
        c.maxSnapshots = 100
        c.snapshotOverlay = overlay
        try Ledger(path: path, configuration: c).append(contentsOf: [E.product("p1")] + (0..<3000).flatMap { [E.queued("t\($0)"), E.purchased("t\($0)")] })
        c.snapshotInterval = snapshotInterval
        return (try Ledger(path: path, configuration: c), c)
    }

    /// Checks that each snapshot in the file, loaded by a newly opened ledger (nothing cached),
    /// equals a fold of the log to its seq; returns how many there are.
    @discardableResult
    private func expectEverySnapshotLoadsBackEqual(_ path: String, _ c: LedgerConfiguration) throws -> Int {
        let log = try Ledger(path: path, configuration: c).events(limit: 20_000)
        let snapshotSeqs = try DatabaseQueue(path: path).read { try Int64.fetchAll($0, sql: "SELECT seq FROM snapshots ORDER BY seq") }
        var folded = LedgerState()
        for e in log {
            LogReplay.step(&folded, e.event, seq: e.seq)
            if snapshotSeqs.contains(e.seq) {
                #expect(try Ledger(path: path, configuration: c).state(atSeq: e.seq) == folded, "state at seq \(e.seq), loaded from its snapshot")
            }
        }
        return snapshotSeqs.count
    }

    /// The latest snapshot's transaction overlay, decoded from the file: its current records
    /// (changed and removed) and its chunks.
    private func latestOverlay(_ path: String) throws -> (records: Int, chunks: [OverlayChunk]) {
        try DatabaseQueue(path: path).read { db in
            let manifest = [UInt8](try Data.fetchOne(db, sql: "SELECT manifest FROM snapshots ORDER BY seq DESC LIMIT 1")!)
            let state = try SnapshotCodec.decode(manifest: manifest, cache: SnapshotPageCache()) { address in
                try Data.fetchOne(db, sql: "SELECT data FROM snapshot_pages WHERE hash = ?", arguments: [Data(address)]).map { [UInt8]($0) }
            }
            let (_, _, overlays) = try SnapshotCodec.parse(manifest)
            return (state.transactions.changes.count + state.transactions.removed.count, overlays[.transactions]?.chunks ?? [])
        }
    }

    /// Transaction pages two states hold as the same objects.
    /// How many of `b`'s pages are `a`'s: the same records in memory (the same stored source, or
    /// the same page held in memory).
    private func shared(_ a: LedgerState, _ b: LedgerState) -> Int {
        func same(_ x: RecordPage<TransactionRecord>, _ y: RecordPage<TransactionRecord>) -> Bool {
            if let s = x.source as? StoredRecordPage<TransactionRecord>, let t = y.source as? StoredRecordPage<TransactionRecord> { return s === t }
            return x === y
        }
        let mine = a.transactions.base?.pages ?? []
        return (b.transactions.base?.pages ?? []).filter { page in mine.contains { same($0, page) } }.count
    }

    private func pageCount(_ path: String) throws -> Int {
        try DatabaseQueue(path: path).read { try Int.fetchOne($0, sql: "SELECT count(*) FROM snapshot_pages")! }
    }
}
