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
    public func events(inStream stream: String) throws -> [RecordedEvent] {
        var found: [RecordedEvent] = []
        try forEachEvent { event in
            if event.stream == stream { found.append(event) }
            return true
        }
        return found
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
