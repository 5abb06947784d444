import Foundation
import PurchaseLedger

/// Runs async work from synchronous code (ledger-bench's script) and waits for it.
/// The work runs on Swift's concurrency pool and PostgresNIO's event loop, never on the waiting
/// thread; do not call it from a task on that pool.
public func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) throws -> T {
    let result = Locked<Result<T, any Error>?>(nil)
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            result.withLock { $0 = .success(value) }
        } catch {
            result.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    return try result.withLock { $0! }.get()
}
