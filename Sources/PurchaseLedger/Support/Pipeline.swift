import Foundation

/// Runs a list of jobs on background threads, started in order, `width` at a time, while the
/// caller takes their results in the same order as each is ready: the caller works on result `i`
/// while the jobs after it run.
final class Pipeline<Result: Sendable>: @unchecked Sendable {
    private var results: [Result?]
    private let ready: [DispatchSemaphore]
    private let lock = NSLock()

    init(_ jobs: [@Sendable () -> Result], width: Int = 1) {
        results = Array(repeating: nil, count: jobs.count)
        ready = jobs.map { _ in DispatchSemaphore(value: 0) }
        let lanes = (0..<max(1, width)).map { DispatchQueue(label: "purchase-ledger.pipeline.\($0)", qos: .userInitiated) }
        for (i, job) in jobs.enumerated() {
            lanes[i % lanes.count].async { [self] in
                let result = job()
                lock.withLock { results[i] = result }
                ready[i].signal()
            }
        }
    }

    /// The result of job `index`, waiting for it to finish. Each result is taken once.
    func take(_ index: Int) -> Result {
        ready[index].wait()
        return lock.withLock {
            defer { results[index] = nil }
            return results[index]!
        }
    }
}

/// Frees `value` on a background queue. Freeing a large state (or its rows) record by record
/// takes long enough to show in the call that drops it. Freed there if the caller hands over its
/// last reference (`consume`) or drops it before the queue gets to it.
func releaseInBackground<T: Sendable>(_ value: consuming T) {
    let last = value
    DispatchQueue.global(qos: .utility).async { withExtendedLifetime(last) {} }
}
