import Foundation

/// A JSON Lines document split into events, each with its line number.
public struct JSONLinesInput: Sendable {
    /// The events, in order.
    public var events: [Event]
    /// The 1-based line of each event.
    public var lines: [Int]
    /// Lines an export marked `appendedByLedger` (automatic cancellations). They are left out:
    /// the ledger appends them again, at the same place, when it stores the finish that caused them.
    public var skippedLedgerAppended: Int

    /// Parses `bytes`. Blank lines are skipped; the first malformed line throws
    /// ``LedgerError/Code/malformedInput`` with its ``LedgerError/line``.
    public init(bytes: [UInt8]) throws(LedgerError) {
        events = []
        lines = []
        let reader = JSONLinesReader(bytes: bytes)
        while let (event, line) = try reader.next() {
            events.append(event)
            lines.append(line)
        }
        skippedLedgerAppended = reader.skippedLedgerAppended
    }
}

/// JSON Lines read a piece at a time, from a file, a file descriptor (standard input) or bytes:
/// one event per call, so a file of any size is read in flat memory
/// (``Ledger/importJSONLines(from:progress:)``).
///
/// Blank lines are skipped, and so are lines an export marked `appendedByLedger` (automatic
/// cancellations, which the ledger appends again itself), counted in ``skippedLedgerAppended``.
public final class JSONLinesReader {
    private let fd: Int32
    private let ownsDescriptor: Bool
    private var buffer: [UInt8]
    /// Where the unread part of `buffer` starts.
    private var start = 0
    private var atEnd: Bool
    private var lineNumber = 0
    /// Where `read` puts a chunk before it joins `buffer`.
    private var piece: [UInt8] = []
    /// Where the last newline in `buffer` is (-1: none), so whether a whole line is waiting there
    /// is known without scanning for it.
    private var lastNewline = -1
    /// Bytes consumed so far.
    public private(set) var bytesRead = 0
    /// The input's size, when it is a regular file or bytes.
    public let totalBytes: Int?
    /// Lines marked `appendedByLedger` so far, left out.
    public private(set) var skippedLedgerAppended = 0

    private static let chunk = 1 << 20

    /// Reads the file at `path`. Throws ``LedgerError/Code/io`` when it cannot be opened.
    public convenience init(path: String) throws(LedgerError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw LedgerError.make(.io, "cannot read \(path): \(String(cString: strerror(errno)))") }
        self.init(fileDescriptor: fd, closeWhenDone: true)
    }

    /// Reads `fileDescriptor` (for example `STDIN_FILENO`) until its end.
    public init(fileDescriptor: Int32, closeWhenDone: Bool = false) {
        fd = fileDescriptor
        ownsDescriptor = closeWhenDone
        buffer = []
        atEnd = false
        // The size of a file that can seek (a pipe or a terminal cannot): where its end is, the
        // read position put back. (Not `fstat`: on Linux, with swift-certificates in the build,
        // `struct stat` resolves to a module member lookup will not see.)
        let here = lseek(fileDescriptor, 0, SEEK_CUR)
        let end = here >= 0 ? lseek(fileDescriptor, 0, SEEK_END) : -1
        if end >= 0 { _ = lseek(fileDescriptor, here, SEEK_SET) }
        totalBytes = end > 0 ? Int(end) : nil
    }

    /// Reads `bytes`.
    public init(bytes: [UInt8]) {
        fd = -1
        ownsDescriptor = false
        buffer = bytes
        lastNewline = bytes.lastIndex(of: 0x0A) ?? -1
        atEnd = true
        totalBytes = bytes.count
    }

    deinit {
        if ownsDescriptor { close(fd) }
    }

    /// Whether the next line is already read in, so ``next()`` does not wait on the input (a pipe)
    /// for it, except to skip blank lines.
    var hasBufferedLine: Bool { atEnd || lastNewline >= start }

    /// The next event and its 1-based line, or nil at the end. A malformed line throws
    /// ``LedgerError/Code/malformedInput`` with its ``LedgerError/line``; a read error
    /// ``LedgerError/Code/io``.
    public func next() throws(LedgerError) -> (event: Event, line: Int)? {
        while true {
            guard let (from, to, next) = try nextLine() else { return nil }
            lineNumber += 1
            bytesRead += next - start
            defer { start = next }
            var last = to
            if last > from && buffer[last - 1] == 0x0D { last -= 1 }
            if buffer[from..<last].allSatisfy({ $0 == 0x20 || $0 == 0x09 }) { continue }
            let decoded: JSONLines.Line
            do {
                decoded = try JSONLines.decodeLine(Array(buffer[from..<last]))
            } catch {
                throw error.at(line: lineNumber)
            }
            if decoded.appendedByLedger {
                // Only the cancellations the ledger appends itself (before an early finish) may
                // be marked so: they are left out, and appended again when their finish comes.
                guard case .downloadCancelled(_, .transactionFinished) = decoded.event.body else {
                    throw LedgerError.malformed(
                        "field `appendedByLedger` marks only the downloadCancelled events (reason transactionFinished) that the ledger appends itself; this line is a \(decoded.event.type.name) the ledger would not append"
                    ).at(line: lineNumber)
                }
                skippedLedgerAppended += 1
                continue
            }
            return (decoded.event, lineNumber)
        }
    }

    /// The next line's bounds in `buffer` (without its newline) and where the line after it
    /// starts, reading more input as needed.
    private func nextLine() throws(LedgerError) -> (Int, Int, Int)? {
        var scanned = start
        while true {
            if let newline = buffer[scanned...].firstIndex(of: 0x0A) {
                try checkLength(newline - start)
                return (start, newline, newline + 1)
            }
            // A line over the limit is refused before more of it is read into memory.
            try checkLength(buffer.count - start)
            if atEnd {
                return start < buffer.count ? (start, buffer.count, buffer.count) : nil
            }
            // Keep the unread part, then read the next piece after it.
            if start > 0 {
                buffer.removeSubrange(0..<start)
                lastNewline -= start
                start = 0
            }
            scanned = buffer.count
            if try readChunk() == 0 { atEnd = true }
        }
    }

    private func checkLength(_ length: Int) throws(LedgerError) {
        guard length > InputLimits.lineBytes else { return }
        throw LedgerError.malformed("the line is longer than \(InputLimits.lineBytes) bytes, the limit of one event (docs/json.md)").at(line: lineNumber + 1)
    }

    /// Appends up to a chunk of input to `buffer`; 0 at the end of the input.
    private func readChunk() throws(LedgerError) -> Int {
        if piece.isEmpty { piece = [UInt8](repeating: 0, count: Self.chunk) }
        while true {
            let n = piece.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw LedgerError.make(.io, "reading the input failed: \(String(cString: strerror(errno)))")
            }
            buffer.append(contentsOf: piece[0..<n])
            if let newline = piece[0..<n].lastIndex(of: 0x0A) { lastNewline = buffer.count - n + newline }
            return n
        }
    }
}
