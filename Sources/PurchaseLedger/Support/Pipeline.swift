import Foundation

/// Runs a list of jobs on background threads, started in order, `width` at a time, while the
/// caller takes their results in the same order as each is ready: the caller works on result `i`
/// while the jobs after it run.
final class Pipeline<Result: Sendable>: @unchecked Sendable {  // unchecked: `results` only under `lock`; the rest is immutable
    private var results: [Result?]
    private let ready: [DispatchSemaphore]
    private let lock = NSLock()
    private let jobs: [@Sendable () -> Result]
    private let lanes: [DispatchQueue]
    private let ahead: Int

    /// `ahead`: how many results may wait, done or under way, beyond the one the caller takes
    /// next (so at most that many are held at once); all jobs start at once when nil.
    init(_ jobs: [@Sendable () -> Result], width: Int = 1, ahead: Int? = nil) {
        results = Array(repeating: nil, count: jobs.count)
        ready = jobs.map { _ in DispatchSemaphore(value: 0) }
        self.jobs = jobs
        lanes = (0..<max(1, width)).map { DispatchQueue(label: "purchase-ledger.pipeline.\($0)", qos: .userInitiated) }
        self.ahead = max(1, ahead ?? jobs.count)
        for i in 0..<min(jobs.count, self.ahead) { start(i) }
    }

    private func start(_ i: Int) {
        lanes[i % lanes.count].async { [self] in
            let result = jobs[i]()
            lock.withLock { results[i] = result }
            ready[i].signal()
        }
    }

    /// The result of job `index`, waiting for it to finish. Each result is taken once, in order
    /// when the pipeline has a bound on `ahead`.
    func take(_ index: Int) -> Result {
        if index + ahead < jobs.count { start(index + ahead) }
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
///
/// The value travels in a parcel the background block empties: a block that only kept the value
/// alive (`withExtendedLifetime`) often finished before `async` returned here, and then the last
/// release of the block's context, with the value in it, was this thread's (a rebuild of the
/// 1,000,000-event workload freed its whole state on the calling thread, 0.13 s, that way).
func releaseInBackground<T: Sendable>(_ value: consuming T) {
    let parcel = Parcel(value)
    DispatchQueue.global(qos: .utility).async { parcel.empty() }
}

/// A value handed to another thread, which takes it out.
private final class Parcel<T: Sendable>: @unchecked Sendable {  // unchecked: `value` is touched by one thread after `init`
    private var value: T?

    init(_ value: consuming T) {
        self.value = value
    }

    func empty() {
        value = nil
    }
}
