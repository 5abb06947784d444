/// The log numbers each stored event in its stream (`transaction:<id>`, `download:<id>`,
/// `catalog`, `restore`: docs/format.md): the counters are kept in the state (and so in its
/// snapshots), and only the log's writers and replay move them on.
extension LedgerState {
    /// Counts one more stored event in the stream of `body`, and returns its version there.
    mutating func recordStreamEvent(_ body: EventBody) -> Int64 {
        if let t = body.transactionID {
            if noOrphans, let version = transactions.update(t, { $0.recordEvent(adopting: nil) }) { return version }
            guard transactions.contains(t) else { return orphan("transaction:" + t) }
            let adopted = orphanStreamEvents.removeValue(forKey: "transaction:" + t)
            return transactions.update(t) { $0.recordEvent(adopting: adopted) }!
        }
        if let d = body.downloadID {
            if noOrphans, let version = downloads.update(d, { $0.recordEvent(adopting: nil) }) { return version }
            guard downloads.contains(d) else { return orphan("download:" + d) }
            let adopted = orphanStreamEvents.removeValue(forKey: "download:" + d)
            return downloads.update(d) { $0.recordEvent(adopting: adopted) }!
        }
        switch body.subject {
        case .restore:
            restoreEvents += 1
            return restoreEvents
        case .productView(let v):
            // A view's stream counts with its record; events before it (an anomaly) wait as orphans.
            guard productViews[v] != nil else { return orphan("productView:" + v) }
            let adopted = orphanStreamEvents.isEmpty ? nil : orphanStreamEvents.removeValue(forKey: "productView:" + v)
            return productViews[v]!.recordEvent(adopting: adopted)
        case .apple:
            // Counted with the orphan streams' counters, which snapshots already keep.
            return orphan(Self.appleStream)
        case .transaction, .download, .catalog:
            break
        }
        catalogEvents += 1
        return catalogEvents
    }

    /// Events stored so far in the stream of `body`.
    func streamVersion(of body: EventBody) -> Int64 {
        if let t = body.transactionID { return transactions[t]?.events ?? orphanStreamEvents["transaction:" + t] ?? 0 }
        if let d = body.downloadID { return downloads[d]?.events ?? orphanStreamEvents["download:" + d] ?? 0 }
        switch body.subject {
        case .transaction, .download, .catalog: return catalogEvents
        case .restore: return restoreEvents
        case .apple: return orphanStreamEvents[Self.appleStream] ?? 0
        case .productView(let v): return productViews[v]?.events ?? orphanStreamEvents["productView:" + v] ?? 0
        }
    }

    static let appleStream = "apple"

    /// Whether no transaction or download stream counts events ahead of its record (the
    /// `apple` stream's counter aside).
    private var noOrphans: Bool {
        orphanStreamEvents.isEmpty || (orphanStreamEvents.count == 1 && orphanStreamEvents[Self.appleStream] != nil)
    }

    fileprivate mutating func orphan(_ stream: String) -> Int64 {
        orphanStreamEvents[stream, default: 0] += 1
        return orphanStreamEvents[stream]!
    }
}
