import Foundation

/// A value behind a lock, for state shared between threads (this package's modules only).
///
/// The package's one lock. It stands in for `Synchronization.Mutex`, which needs iOS 18 and
/// macOS 15: this one needs nothing newer than Foundation's `NSLock` (a pthread mutex on every
/// platform), so the package's minimum OS versions are set by other APIs (docs/platforms.md).
///
/// ```swift
/// let counter = Locked(0)
/// counter.withLock { $0 += 1 }
/// ```
package final class Locked<Value>: @unchecked Sendable {  // unchecked: `value` is read and written only under `lock`
    private var value: Value
    private let lock = NSLock()

    package init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` with the value, holding the lock. Do not take the same lock inside `body`.
    package func withLock<Result>(_ body: (inout Value) throws -> Result) rethrows -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// The result of the last call of a function of some bytes, kept for the next call with the same
/// bytes: what one signed transaction's parts give is asked for several times per event (the
/// input check, the rules, the evidence), and an app's transactions share one chain's header.
package final class LastResult<Value: Sendable>: Sendable {
    private let last = Locked<(key: [UInt8], value: Value)?>(nil)

    package init() {}

    /// `make()`'s value for `key`, remembered; a thrown error is not.
    package func value<E: Error>(for key: [UInt8], _ make: () throws(E) -> Value) throws(E) -> Value {
        if let last = last.withLock({ $0 }), last.key == key { return last.value }
        let value = try make()
        last.withLock { $0 = (key, value) }
        return value
    }
}
