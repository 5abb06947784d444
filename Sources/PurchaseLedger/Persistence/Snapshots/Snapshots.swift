import Foundation
import GRDB

/// Reducer state stored at some seqs, so the state at any point comes back without replaying the
/// whole log. A snapshot is a manifest of pages; a page is stored once, by the SHA-256 of its bytes,
/// and shared by every snapshot that holds it. A snapshot from another reducer version, or one
/// whose pages do not check out, is ignored: snapshots are a cache of the log, never a source of
/// truth.
enum Snapshots {
    /// A snapshot an append has decided on: its manifest, and the pages it adds, spooled.
    struct Pending {
        var seq: Int64
        var manifest: [UInt8]
        var pages: [(address: [UInt8], rawSize: Int, data: Spool.Slice)]
        /// Refs of personal values assigned by then (nil: not known).
        var personalRefs: Int64? = nil
    }

    /// Encodes a snapshot of `state` without writing it. Pages already stored, in the file or by
    /// an earlier snapshot of the same append (`spooled`), are referred to, not added again.
    /// Returns the state as it will be stored: the same records, its transactions and downloads
    /// now held in the snapshot's pages, so the next snapshot adds only what changed.
    static func encode(
        _ state: LedgerState, _ db: Database, overlay: SnapshotCodec.OverlayLimits, spooled: inout Set<[UInt8]>, spool: Spool,
        personalRefs: Int64?
    ) throws -> (LedgerState, Pending) {
        let exists = try db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM snapshot_pages WHERE hash = ?)")
        return try encode(state, overlay: overlay, spooled: &spooled, spool: spool, personalRefs: personalRefs) { address in
            try Bool.fetchOne(exists, arguments: [Data(address)]) ?? false
        }
    }

    /// ``encode(_:_:overlay:spooled:spool:personalRefs:)`` with the file's pages known through
    /// `stored` (beside those of `spooled`), so that it can run away from the database's thread.
    static func encode(
        _ state: LedgerState, overlay: SnapshotCodec.OverlayLimits, spooled: inout Set<[UInt8]>, spool: Spool, personalRefs: Int64?,
        stored: ([UInt8]) throws -> Bool
    ) throws -> (LedgerState, Pending) {
        let known = spooled
        let encoded = try SnapshotCodec.encode(state, overlay: overlay) { address in
            try known.contains(address) || stored(address)
        }
        var pending = Pending(seq: state.seq, manifest: encoded.manifest, pages: [], personalRefs: personalRefs)
        for page in encoded.pages where spooled.insert(page.address).inserted {
            pending.pages.append((page.address, page.rawSize, try spool.append(page.data)))
        }
        var written = state
        written.transactions = encoded.transactions
        written.downloads = encoded.downloads
        written.registeredURLs = encoded.registeredURLs
        return (written, pending)
    }

    /// A snapshot encoded elsewhere (``SnapshotCodec/encode(_:overlay:stored:)``), its pages
    /// spooled, ready for ``write(_:keep:spool:chain:_:)``.
    static func pending(_ encoded: SnapshotCodec.Encoded, seq: Int64, spool: Spool, personalRefs: Int64?) throws -> Pending {
        var pending = Pending(seq: seq, manifest: encoded.manifest, pages: [], personalRefs: personalRefs)
        for page in encoded.pages {
            pending.pages.append((page.address, page.rawSize, try spool.append(page.data)))
        }
        return pending
    }

    /// What binds a snapshot to the chain at its seq (migration 0006): the chain's own link
    /// function (keyed for a keyed ledger) over the link there and the manifest's SHA-256, so a
    /// snapshot copied from another ledger, or from another seq, does not match.
    static func binding(link: [UInt8], manifest: [UInt8], chain: HashChain) -> [UInt8] {
        chain.link(after: link, frame: Array("purchase-ledger snapshot v1".utf8) + [0] + HashChain.sha256(manifest))
    }

    /// Whether the snapshot `seq` with `manifest` and `binding` belongs to this ledger's chain.
    static func isBound(seq: Int64, manifest: [UInt8], binding: [UInt8]?, chain: HashChain, _ db: Database) throws -> Bool {
        guard let binding, let link = try EventStore.link(at: seq, chain: chain, db) else { return false }
        return Snapshots.binding(link: link, manifest: manifest, chain: chain) == binding
    }

    /// Writes the snapshots an append decided on (after its events: each is bound to the chain's
    /// link at its seq), then thins older ones so at most `keep` remain, evenly spread over the log.
    static func write(_ snapshots: [Pending], keep: Int, spool: Spool, chain: HashChain, _ db: Database) throws {
        guard !snapshots.isEmpty else { return }
        // A snapshot taken again at the seq of one stored (`rebuild` retaking an earlier
        // version's) replaces it: the pages only it held are then collected below too (they were
        // left behind: 11.4 MB of a 1,000,000-event ledger an earlier version wrote).
        let taken = Set(try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots"))
        var dropped = snapshots.contains { taken.contains($0.seq) }
        // A page written again replaces a row under its address: that row's bytes may have been
        // damaged (`rebuild` retaking snapshots whose pages no load has checked).
        let insert = try db.cachedStatement(sql: "INSERT OR REPLACE INTO snapshot_pages (hash, raw_size, data) VALUES (?, ?, ?)")
        for snapshot in snapshots {
            for page in snapshot.pages {
                try insert.execute(arguments: [Data(page.address), page.rawSize, Data(try spool.read(page.data))])
            }
            guard let link = try EventStore.link(at: snapshot.seq, chain: chain, db) else {
                throw LedgerError.corrupt("event \(snapshot.seq), just written, cannot be read back", seq: snapshot.seq)
            }
            try db.execute(
                sql: "INSERT OR REPLACE INTO snapshots (seq, reducer_version, format, manifest, binding, personal_refs) VALUES (?, ?, ?, ?, ?, ?)",
                arguments: [
                    snapshot.seq, Reducer.version, SnapshotCodec.format, Data(snapshot.manifest),
                    Data(binding(link: link, manifest: snapshot.manifest, chain: chain)), snapshot.personalRefs,
                ])
        }
        // Snapshots another reducer version wrote, or in a format this code does not read, are
        // never read again.
        try db.execute(
            sql: "DELETE FROM snapshots WHERE reducer_version != ? OR format NOT IN \(SnapshotCodec.readableFormatsSQL)",
            arguments: [Reducer.version])
        dropped = dropped || db.changesCount > 0
        var kept = try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq")
        if keep >= 2 {
            while kept.count > keep, let seq = thin(&kept) {
                try db.execute(sql: "DELETE FROM snapshots WHERE seq = ?", arguments: [seq])
                dropped = true
            }
        }
        if dropped { try collectPages(db) }
    }

    /// Thins the snapshots, as `write` does, until they take at most `share` of the bytes the
    /// file holds in use, keeping the newest whatever it costs. An append calls it last, once
    /// everything it writes is in the file.
    static func keepWithin(share: Double, _ db: Database) throws {
        guard share < 1 else { return }
        let (bytes, fileBytes) = try sizes(db)
        guard bytes > Int(share * Double(fileBytes)) else { return }
        var kept = try Int64.fetchAll(db, sql: "SELECT seq FROM snapshots ORDER BY seq")
        var usage = try SnapshotUsage(db, bytes: bytes, fileBytes: fileBytes)
        var dropped = usage.unreferenced
        while usage.bytes > Int(share * Double(usage.fileBytes)), let seq = thin(&kept) {
            usage.drop(seq)
            try db.execute(sql: "DELETE FROM snapshots WHERE seq = ?", arguments: [seq])
            dropped = true
        }
        if dropped { try collectPages(db) }
    }

    /// Removes from `kept` (seqs in order) the snapshot whose neighbours are closest together,
    /// never the first nor the newest; of two, the first; of one, none. Returns its seq.
    private static func thin(_ kept: inout [Int64]) -> Int64? {
        guard kept.count > 2 else { return kept.count == 2 ? kept.removeFirst() : nil }
        var best = 1
        var bestGap = Int64.max
        for i in 1..<(kept.count - 1) where kept[i + 1] - kept[i - 1] < bestGap {
            bestGap = kept[i + 1] - kept[i - 1]
            best = i
        }
        return kept.remove(at: best)
    }

    /// The snapshots' bytes (their pages' stored bytes, which SQLite reads from each row's
    /// header, and their manifests) and the bytes the file holds in use.
    private static func sizes(_ db: Database) throws -> (snapshots: Int, file: Int) {
        let snapshots =
            try Int.fetchOne(
                db,
                sql: """
                    SELECT (SELECT coalesce(sum(length(data)), 0) FROM snapshot_pages)
                         + (SELECT coalesce(sum(length(manifest)), 0) FROM snapshots)
                    """) ?? 0
        let pages = try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0
        let free = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
        return (snapshots, (pages - free) * (try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 4096))
    }

    /// The snapshots' bytes and what dropping each would free: a page is freed with the last
    /// snapshot that refers to it. Read once, so thinning many snapshots parses each manifest once.
    private struct SnapshotUsage {
        var bytes: Int
        var fileBytes: Int
        var pageBytes: [Data: Int] = [:]
        var references: [Data: Int] = [:]
        var snapshots: [Int64: (manifest: Int, pages: Set<Data>)] = [:]
        /// Whether some stored pages belong to no snapshot (counted as freed: they are collected).
        var unreferenced = false

        /// `bytes` and `fileBytes` as ``sizes(_:)`` gives them.
        init(_ db: Database, bytes: Int, fileBytes: Int) throws {
            self.bytes = bytes
            self.fileBytes = fileBytes
            for row in try Row.fetchAll(db, sql: "SELECT hash, length(data) FROM snapshot_pages") {
                pageBytes[row[0]] = row[1]
            }
            for row in try Row.fetchAll(db, sql: "SELECT seq, manifest FROM snapshots WHERE format IN \(SnapshotCodec.readableFormatsSQL)") {
                let manifest: Data = row[1]
                let pages = addresses(manifest)
                for page in pages { references[page, default: 0] += 1 }
                snapshots[row[0]] = (manifest.count, pages)
            }
            for (page, size) in pageBytes where references[page] == nil {
                self.bytes -= size
                self.fileBytes -= size
                unreferenced = true
            }
        }

        /// Counts `seq` as dropped: its manifest and the pages no other snapshot refers to are
        /// freed, from the snapshots and from the file.
        mutating func drop(_ seq: Int64) {
            guard let snapshot = snapshots.removeValue(forKey: seq) else { return }
            var freed = snapshot.manifest
            for page in snapshot.pages {
                references[page, default: 1] -= 1
                if references[page] == 0 { freed += pageBytes[page] ?? 0 }
            }
            bytes -= freed
            fileBytes -= freed
        }
    }

    /// The addresses of the pages and overlay chunks a manifest refers to (none when it does not
    /// parse: such a snapshot is ignored when loading, and keeps nothing).
    private static func addresses(_ manifest: Data) -> Set<Data> {
        var addresses = Set<Data>()
        guard let (_, kinds, overlays) = try? SnapshotCodec.parse([UInt8](manifest)) else { return addresses }
        for kind in kinds { for entry in kind { addresses.insert(Data(entry.address)) } }
        for overlay in overlays.values { for chunk in overlay.chunks { addresses.insert(Data(chunk.address)) } }
        return addresses
    }

    /// Deletes pages no snapshot of a format this code reads refers to any more.
    static func collectPages(_ db: Database) throws {
        var referenced = Set<Data>()
        let manifests = try Data.fetchAll(db, sql: "SELECT manifest FROM snapshots WHERE format IN \(SnapshotCodec.readableFormatsSQL)")
        for manifest in manifests { referenced.formUnion(addresses(manifest)) }
        for hash in try Data.fetchAll(db, sql: "SELECT hash FROM snapshot_pages") where !referenced.contains(hash) {
            try db.execute(sql: "DELETE FROM snapshot_pages WHERE hash = ?", arguments: [hash])
        }
    }

    /// The seqs of the snapshots this reducer and format can start from, in order (none in a
    /// ledger waiting for migration 0006: unbound snapshots are never used).
    static func seqs(_ db: Database) throws -> [Int64] {
        guard try Migrations.applied("0006_snapshot_binding", db) else { return [] }
        return try Int64.fetchAll(
            db, sql: "SELECT seq FROM snapshots WHERE reducer_version = ? AND format IN \(SnapshotCodec.readableFormatsSQL) ORDER BY seq",
            arguments: [Reducer.version])
    }

    /// The newest usable snapshot at or before `seq`: of this reducer and format, bound to this
    /// ledger's chain at its seq, and decoding whole. Any other is passed over for an older one
    /// (or the log): time travel never trusts a snapshot over the log.
    static func latest(_ db: Database, atOrBefore seq: Int64, cache: SnapshotPageCache, chain: HashChain) throws -> LedgerState? {
        try latestWithRefs(db, atOrBefore: seq, cache: cache, chain: chain)?.state
    }

    /// ``latest(_:atOrBefore:cache:chain:)``, with the refs of personal values assigned when it
    /// was taken (nil: not recorded).
    static func latestWithRefs(
        _ db: Database, atOrBefore seq: Int64, cache: SnapshotPageCache, chain: HashChain
    ) throws -> (state: LedgerState, personalRefs: Int64?)? {
        guard try Migrations.applied("0006_snapshot_binding", db) else { return nil }
        let refs = try Migrations.applied("0007_personal_values", db) ? "personal_refs" : "NULL"
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT seq, manifest, binding, \(refs) FROM snapshots
                WHERE seq <= ? AND reducer_version = ? AND format IN \(SnapshotCodec.readableFormatsSQL) ORDER BY seq DESC
                """, arguments: [seq, Reducer.version])
        let page = try db.cachedStatement(sql: "SELECT data FROM snapshot_pages WHERE hash = ?")
        while let row = try rows.next() {
            let manifest: Data = row[1]
            let binding = (row[2] as Data?).map { [UInt8]($0) }
            let key = withUnsafeBytes(of: (row[0] as Int64).littleEndian) { Array($0) } + (binding ?? []) + HashChain.sha256([UInt8](manifest))
            if !cache.isKnownBound(key) {
                guard try isBound(seq: row[0], manifest: [UInt8](manifest), binding: binding, chain: chain, db) else { continue }
                cache.rememberBound(key)
            }
            let state = try? SnapshotCodec.decode(manifest: [UInt8](manifest), cache: cache) { address in try page.fetchBlob(key: address) }
            if let state, state.seq == row[0] as Int64 { return (state, row[3]) }
        }
        return nil
    }
}

/// Snapshots of a replay encoded on another thread while the replay goes on (an erasure takes
/// every snapshot again: encoding them was about a third of the replaying thread's time, with the
/// other core mostly idle). One at a time, in order; each from the pages of the one before.
///
/// The replay hands over a copy of its state at each snapshot's seq (``snapshot(_:personalRefs:)``)
/// and goes on changing its own; at the next seq (or at ``finish(carrying:)``) it takes the
/// encoded state back: the state it holds now, over the pages the snapshot wrote, as the serial
/// path's state would be (`RecordMap.carrying`), so each snapshot adds only what changed since
/// the one before. For a replay from the first event (an erasure, a rebuild, an import into an
/// empty ledger): every page it can share is one it spooled, so the encoder never reads the
/// database.
final class SnapshotEncoder: @unchecked Sendable {  // unchecked: `spooled` is the queue's; `taken` and `encoded` are read by the caller only after `done`; the rest is the caller's
    private let queue = DispatchQueue(label: "purchase-ledger.snapshot-encoder", qos: .userInitiated)
    private let overlay: SnapshotCodec.OverlayLimits
    /// Where the pages go; ``Snapshots/write(_:keep:spool:chain:_:)`` reads them from it.
    let spool: Spool
    private var spooled = Set<[UInt8]>()
    private var taken: [Snapshots.Pending] = []
    /// The state last handed over, while its encoding is under way or not yet taken back.
    private var handedOver: LedgerState?
    private var encoded: Result<LedgerState, any Error>?
    private let done = DispatchSemaphore(value: 0)

    init(overlay: SnapshotCodec.OverlayLimits, spool: Spool) {
        self.overlay = overlay
        self.spool = spool
    }

    /// Starts encoding a snapshot of `state`, after taking back the one before into `state`.
    func snapshot(_ state: inout LedgerState, personalRefs: Int64?) throws {
        try carry(&state)
        handedOver = state
        let copy = state
        queue.async { [self] in
            encoded = Result {
                let (written, pending) = try Snapshots.encode(
                    copy, overlay: overlay, spooled: &spooled, spool: spool, personalRefs: personalRefs, stored: { _ in false })
                taken.append(pending)
                return written
            }
            done.signal()
        }
    }

    /// Waits for the snapshot under way, and makes `state` continue from its pages.
    private func carry(_ state: inout LedgerState) throws {
        guard let then = handedOver else { return }
        done.wait()
        handedOver = nil
        let written = try encoded!.get()
        encoded = nil
        state.transactions = .carrying(state.transactions, since: then.transactions, onto: written.transactions)
        state.downloads = .carrying(state.downloads, since: then.downloads, onto: written.downloads)
        state.registeredURLs = .carrying(state.registeredURLs, since: then.registeredURLs, onto: written.registeredURLs)
    }

    /// Waits for the last snapshot, makes `state` (the replay's last) continue from its pages,
    /// as ``snapshot(_:personalRefs:)`` does, and returns every snapshot encoded, in order. (The
    /// next snapshot of `state` then adds only what changed since the last one here: left on
    /// the pages of the one before, the erasure's own snapshot rewrote two intervals' pages.)
    func finish(carrying state: inout LedgerState) throws -> [Snapshots.Pending] {
        try carry(&state)
        return taken
    }
}
