import Foundation

/// Bytes an append has decided to store but not written yet (sealed blocks, snapshot pages),
/// kept in an unlinked temporary file rather than in memory, so a large import's memory stays
/// flat whatever its size. Nothing reaches the ledger until the append's write step copies them
/// in, so a refusal half-way leaves the ledger file and its WAL exactly as they were.
///
/// Small spools never touch the disk: the first `memoryLimit` bytes stay in memory.
final class Spool {
    private var memory: [UInt8] = []
    private var fd: Int32 = -1
    private var fileSize = 0
    private let memoryLimit: Int

    init(memoryLimit: Int = 8 << 20) {
        self.memoryLimit = memoryLimit
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Where some bytes were put.
    struct Slice {
        fileprivate var inFile: Bool
        fileprivate var offset: Int
        var count: Int
    }

    func append(_ bytes: [UInt8]) throws -> Slice {
        if fd < 0 && memory.count + bytes.count <= memoryLimit {
            defer { memory += bytes }
            return Slice(inFile: false, offset: memory.count, count: bytes.count)
        }
        if fd < 0 { try openFile() }
        let offset = fileSize
        try bytes.withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                let n = pwrite(fd, raw.baseAddress! + done, raw.count - done, off_t(offset + done))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw LedgerError.storage("writing the import's spool file failed: \(String(cString: strerror(errno)))")
                }
                done += n
            }
        }
        fileSize += bytes.count
        return Slice(inFile: true, offset: offset, count: bytes.count)
    }

    func read(_ slice: Slice) throws -> [UInt8] {
        guard slice.inFile else { return Array(memory[slice.offset..<(slice.offset + slice.count)]) }
        return try [UInt8](unsafeUninitializedCapacity: slice.count) { buffer, initialized in
            var done = 0
            while done < slice.count {
                let n = pread(fd, buffer.baseAddress! + done, slice.count - done, off_t(slice.offset + done))
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw LedgerError.storage("reading the import's spool file failed: \(n < 0 ? String(cString: strerror(errno)) : "short read")") }
                done += n
            }
            initialized = slice.count
        }
    }

    private func openFile() throws {
        var template = Array((NSTemporaryDirectory() + "/purchase-ledger-spool-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw LedgerError.storage("cannot create a spool file in \(NSTemporaryDirectory()): \(String(cString: strerror(errno)))")
        }
        // Unlinked at once: the file goes away with the process, however it ends.
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        fd = descriptor
    }
}
