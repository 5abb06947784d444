import Foundation

/// Runs a producer on a thread of its own, ahead of its consumer, handing items over in batches
/// through a bounded buffer: while the consumer works on one batch, the producer fills the next.
/// An import parses its JSON this way on one core while the rules and SQLite run on the other.
///
/// Items come out in the order they were produced. A producer's error comes out where it
/// happened, after every item produced before it. At most `depth` batches wait, so memory stays
/// bounded whatever the input's size. Call ``stop()`` when done, early or not: it ends the producer
/// (its thread holds the `ReadAhead` until then) and waits for its thread, after which whatever
/// the producer reads from is the caller's again.
///
/// ```swift
/// let ahead = ReadAhead { try reader.next() }
/// defer { ahead.stop() }
/// while let item = try ahead.next() { use(item) }
/// ```
final class ReadAhead<Item>: @unchecked Sendable {  // unchecked: shared state only under `condition` (below)
    // Everything below `condition` is shared with the producer's thread and read or written
    // only while it is held; `current` and `index` belong to the consumer.
    private let condition = NSCondition()
    private var ready: [[Item]] = []
    private var failure: (any Error)?
    private var produced = false
    private var stopping = false
    private var joined = false
    private let exited = DispatchSemaphore(value: 0)
    private let produce: () throws -> Item?
    private let willWait: () -> Bool
    private let batchSize: Int
    private let depth: Int
    private var current: [Item] = []
    private var index = 0

    /// `willWait` tells whether the next `produce()` would block on its input (a pipe with
    /// nothing new in it); the batch so far is handed over first.
    init(batchSize: Int = 256, depth: Int = 8, willWait: @escaping () -> Bool = { false }, produce: @escaping () throws -> Item?) {
        self.produce = produce
        self.willWait = willWait
        self.batchSize = max(1, batchSize)
        self.depth = max(1, depth)
        let thread = Thread { [self] in run() }
        thread.name = "purchase-ledger.read-ahead"
        // The JSON parser recurses (to a fixed depth): as much stack as a main thread has.
        thread.stackSize = 8 << 20
        thread.start()
    }

    /// The next item, nil after the last, or the producer's error once every item before it
    /// has been taken.
    func next() throws -> Item? {
        if index < current.count {
            defer { index += 1 }
            return current[index]
        }
        condition.lock()
        while ready.isEmpty && !produced { condition.wait() }
        guard !ready.isEmpty else {
            let failure = self.failure
            condition.unlock()
            if let failure { throw failure }
            return nil
        }
        current = ready.removeFirst()
        condition.broadcast()
        condition.unlock()
        index = 1
        return current[0]
    }

    /// Stops the producer (at its next item) and, when `waiting`, waits until its thread has
    /// ended. Not waiting suits a consumer giving up on an error: a producer blocked reading a pipe
    /// that stays open would hold it until the next line; its thread ends by itself then, keeping
    /// what it reads from alive until it does. Idempotent.
    func stop(waiting: Bool = true) {
        condition.lock()
        stopping = true
        condition.broadcast()
        let wait = waiting && !joined
        if waiting { joined = true }
        condition.unlock()
        if wait { exited.wait() }
    }

    private func run() {
        defer { exited.signal() }
        var batch: [Item] = []
        batch.reserveCapacity(batchSize)
        do {
            while let item = try produce() {
                batch.append(item)
                // A batch goes over when full, and before the producer would wait on its input:
                // input that trickles in (a pipe) is decided as it comes, not a batch later.
                if batch.count == batchSize || willWait() {
                    guard hand(batch) else { return }
                    batch = []
                    batch.reserveCapacity(batchSize)
                }
            }
            finish(batch, failure: nil)
        } catch {
            finish(batch, failure: error)
        }
    }

    /// Queues a batch, waiting while `depth` are queued; false once the consumer stopped.
    private func hand(_ batch: [Item]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while ready.count >= depth && !stopping { condition.wait() }
        guard !stopping else { return false }
        ready.append(batch)
        condition.broadcast()
        return true
    }

    private func finish(_ batch: [Item], failure: (any Error)?) {
        condition.lock()
        defer { condition.unlock() }
        if !batch.isEmpty { ready.append(batch) }
        self.failure = failure
        produced = true
        condition.broadcast()
    }
}
