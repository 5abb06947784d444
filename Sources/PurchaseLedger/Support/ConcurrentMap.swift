import Foundation

extension Array where Element: Sendable {
    /// `transform` of each element, in order, computed on every core
    /// (`DispatchQueue.concurrentPerform`, each worker taking every n-th element): for work such
    /// as verifying signatures, where each element costs tens of microseconds.
    package func concurrentMap<T: Sendable>(_ transform: @Sendable (Element) -> T) -> [T] {
        guard count > 1 else { return map(transform) }
        let results = Locked([T?](repeating: nil, count: count))
        let workers = Swift.min(count, ProcessInfo.processInfo.activeProcessorCount * 2)
        DispatchQueue.concurrentPerform(iterations: workers) { worker in
            var done: [(Int, T)] = []
            var i = worker
            while i < count {
                done.append((i, transform(self[i])))
                i += workers
            }
            results.withLock { all in for (i, value) in done { all[i] = value } }
        }
        return results.withLock { $0.map { $0! } }
    }
}
