import GRDB

/// Reading the log: its events in order, one stream's, and a live feed for observers.
extension Ledger {
    /// The seq of the last stored event (0 when empty).
    public func lastSeq() throws -> Int64 {
        try read { db in try EventStore.lastSeq(db) }
    }

    /// Calls `body` with every stored event from `seq` through `last`, in order, streaming:
    /// memory stays flat whatever the ledger's size. Return false to stop early.
    public func forEachEvent(from seq: Int64 = 1, through last: Int64 = .max, _ body: (RecordedEvent) throws -> Bool) throws {
        try read { db in
            try EventStore.scan(db, from: seq, through: last) { try body($0.event) }
        }
    }

    /// Up to `limit` stored events from `seq` on.
    public func events(from seq: Int64 = 1, limit: Int = 1000) throws -> [RecordedEvent] {
        var page: [RecordedEvent] = []
        try forEachEvent(from: seq) { event in
            page.append(event)
            return page.count < limit
        }
        return page
    }

    /// The events of one stream (`transaction:<id>`, `download:<id>`, `catalog`, `restore`), in order.
    /// A transaction's or a download's stream is read from the latest snapshot before its first
    /// event, not from the start of the log.
    public func events(inStream stream: String) throws -> [RecordedEvent] {
        var found: [RecordedEvent] = []
        try read { db in
            var start: Int64 = 1
            if stream.hasPrefix("transaction:") {
                start = try Ledger.stateBefore(transactions: [String(stream.dropFirst("transaction:".count))], db, cache: pageCache, chain: chain).seq + 1
            } else if stream.hasPrefix("download:") {
                start = try Ledger.stateBefore(download: String(stream.dropFirst("download:".count)), db, cache: pageCache, chain: chain).seq + 1
            }
            try EventStore.scan(db, from: start, through: .max) { step in
                if step.event.stream == stream { found.append(step.event) }
                return true
            }
        }
        return found
    }

    /// Calls `body` with the events of one transaction and of the downloads its purchase or
    /// restore named, in order, from `seq` on (`purchase-ledger events --transaction`). The log is
    /// read from the latest snapshot before the transaction's first event: in a large ledger a
    /// recent transaction costs a few blocks, not the whole log. Return false to stop early.
    ///
    /// ```swift
    /// try ledger.forEachEvent(ofTransaction: "tx-0120000") { e in
    ///     print(e.seq, e.event.type.name)
    ///     return true
    /// }
    /// ```
    public func forEachEvent(ofTransaction id: String, from seq: Int64 = 1, _ body: (RecordedEvent) throws -> Bool) throws {
        let id = Identifier.normalize(id)
        try read { db in
            let start = try Ledger.stateBefore(transactions: [id], db, cache: pageCache, chain: chain).seq + 1
            var downloads = Set<String>()
            try EventStore.scan(db, from: start, through: .max) { step in
                let e = step.event
                let event = e.event.body
                if event.transactionID == id {
                    if case .transactionPurchased(_, _, _, _, let specs?, _) = event { downloads.formUnion(specs.map(\.download)) }
                    if case .transactionRestored(_, _, _, _, _, let specs?, _) = event { downloads.formUnion(specs.map(\.download)) }
                }
                guard e.seq >= seq, event.transactionID == id || event.downloadID.map(downloads.contains) == true else { return true }
                return try body(e)
            }
        }
    }

    /// Calls `body` with the events of one download, in order, from `seq` on, reading the log from
    /// the latest snapshot before its first event. Return false to stop early.
    public func forEachEvent(ofDownload id: String, from seq: Int64 = 1, _ body: (RecordedEvent) throws -> Bool) throws {
        let id = Identifier.normalize(id)
        try read { db in
            let start = try Ledger.stateBefore(download: id, db, cache: pageCache, chain: chain).seq + 1
            try EventStore.scan(db, from: max(start, seq), through: .max) { step in
                step.event.event.body.downloadID == id ? try body(step.event) : true
            }
        }
    }

    /// The stored events from `seq` on, then each new one as it is appended (by this process or
    /// another), for UI observers. Other processes' appends are noticed within `pollInterval`.
    public func observe(from seq: Int64 = 1, pollInterval: Duration = .milliseconds(250)) -> AsyncThrowingStream<RecordedEvent, any Error> {
        AsyncThrowingStream { continuation in
            let task = Task {
                var next = seq
                do {
                    while !Task.isCancelled {
                        let seen = commitCount
                        let page = try events(from: next, limit: 1024)
                        for event in page { continuation.yield(event) }
                        if let last = page.last { next = last.seq + 1 }
                        if page.count == 1024 { continue }
                        // Wake early when this process appends; poll for other processes.
                        let step = Duration.milliseconds(10)
                        var waited = Duration.zero
                        while waited < pollInterval, commitCount == seen, !Task.isCancelled {
                            try await Task.sleep(for: step)
                            waited += step
                        }
                    }
                    continuation.finish()
                } catch is CancellationError {
                    continuation.finish()
                } catch {
                    continuation.finish(throwing: error)
                }
            }
            continuation.onTermination = { _ in task.cancel() }
        }
    }
}
