import Foundation

/// The size of a file, from the file alone (its end, as a file handle finds it).
/// `FileManager.attributesOfItem` also looks up the names of the file's owner and group (the
/// passwd and group databases, through nsswitch on Linux), which took about 2 ms of every CLI
/// command that opens a ledger.
package enum FileSize {
    /// The size in bytes of the file at `path`, or nil when there is none (or it cannot be
    /// opened for reading).
    package static func of(_ path: String) -> Int? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        return (try? handle.seekToEnd()).map { Int($0) }
    }
}
