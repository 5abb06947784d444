import Foundation
#if canImport(CLZ4)
    import CLZ4
#endif

/// LZ4 block compression, optionally with a dictionary: liblz4 where the package links it
/// (Linux), the Swift codec ``LZ4Block`` everywhere else (Apple platforms). Both read and write
/// the same bytes, so a ledger moves between them freely.
///
/// Decompression never reads or writes outside the buffers it is given, whichever codec runs:
/// corrupt input is an ``LZ4/Failure``, not a crash.
package enum LZ4 {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    enum Implementation: String, Sendable {
        case liblz4
        case swift
    }

    /// The codec this process uses. On Linux, `PURCHASE_LEDGER_LZ4=swift` in the environment
    /// switches to the Swift codec (the one Apple platforms use), so the test suite can write and
    /// read ledgers with it and check them against liblz4 in another process.
    static let implementation: Implementation = {
        #if canImport(CLZ4)
            return ProcessInfo.processInfo.environment["PURCHASE_LEDGER_LZ4"] == "swift" ? .swift : .liblz4
        #else
            return .swift
        #endif
    }()

    /// The largest input one call handles (liblz4's `LZ4_MAX_INPUT_SIZE`).
    static let maxInputSize = 0x7E00_0000

    /// liblz4's high-compression level for blocks and snapshot pages. On the 1,000,000-event
    /// workload, against level 3: the file 79.03 bytes/event instead of 79.59 (level 4: 79.43,
    /// level 5: 79.22), the import about 0.3 s slower (6%, on the thread that seals blocks and
    /// the one that encodes snapshots); decompression is the same whatever the level.
    static let level: Int32 = 6

    /// Compresses `input`; with a dictionary, matches may refer into it, and the same dictionary is
    /// needed to decompress. liblz4 uses its high-compression mode at `level`.
    package static func compress(_ input: [UInt8], dictionary: [UInt8]? = nil, level: Int32 = LZ4.level) throws(Failure) -> [UInt8] {
        guard input.count <= maxInputSize else { throw Failure(description: "block of \(input.count) bytes is too large") }
        if input.isEmpty { return [] }
        switch implementation {
        case .swift:
            return swiftCompress(input, dictionary: dictionary)
        case .liblz4:
            #if canImport(CLZ4)
                return try liblz4Compress(input, dictionary: dictionary, level: level)
            #else
                return swiftCompress(input, dictionary: dictionary)
            #endif
        }
    }

    /// Decompresses exactly `originalSize` bytes, or throws when `input` is not a valid LZ4 block
    /// of that size (for that dictionary).
    package static func decompress(_ input: UnsafeRawBufferPointer, originalSize: Int, dictionary: [UInt8]? = nil) throws(Failure) -> [UInt8] {
        guard originalSize >= 0, originalSize <= maxInputSize else { throw Failure(description: "implausible size \(originalSize)") }
        if originalSize == 0 {
            guard input.isEmpty else { throw Failure(description: "data where none was expected") }
            return []
        }
        guard !input.isEmpty, input.count <= maxInputSize else { throw Failure(description: "empty or oversized block") }
        switch implementation {
        case .swift:
            return try swiftDecompress(input, originalSize: originalSize, dictionary: dictionary)
        case .liblz4:
            #if canImport(CLZ4)
                return try liblz4Decompress(input, originalSize: originalSize, dictionary: dictionary)
            #else
                return try swiftDecompress(input, originalSize: originalSize, dictionary: dictionary)
            #endif
        }
    }

    /// The one failure for a block that does not decode, whichever codec found it.
    private static func undecodable(_ produced: Int, _ expected: Int) -> Failure {
        Failure(description: produced < 0 ? "LZ4 decompression failed" : "decompressed \(produced) bytes, expected \(expected)")
    }

    // MARK: - The Swift codec

    package static func swiftCompress(_ input: [UInt8], dictionary: [UInt8]?) -> [UInt8] {
        input.withUnsafeBytes { source in
            (dictionary ?? []).withUnsafeBytes { dict in LZ4Block.compress(source, dictionary: dict) }
        }
    }

    package static func swiftDecompress(_ input: UnsafeRawBufferPointer, originalSize: Int, dictionary: [UInt8]?) throws(Failure) -> [UInt8] {
        var produced = -1
        let output = [UInt8](unsafeUninitializedCapacity: originalSize) { buffer, count in
            produced = (dictionary ?? []).withUnsafeBytes { dict in
                LZ4Block.decode(input, into: UnsafeMutableRawBufferPointer(buffer), dictionary: dict)
            }
            // Bytes past a failure are never read: the array is dropped below.
            count = produced == originalSize ? originalSize : 0
        }
        guard produced == originalSize else { throw undecodable(produced, originalSize) }
        return output
    }

    // MARK: - liblz4

    #if canImport(CLZ4)
        package static func liblz4Compress(_ input: [UInt8], dictionary: [UInt8]?, level: Int32 = LZ4.level) throws(Failure) -> [UInt8] {
            if input.isEmpty { return [] }
            let bound = Int(LZ4_compressBound(Int32(input.count)))
            var output = [UInt8](repeating: 0, count: bound)
            let written: Int32 = HCStreams.shared.withStream(level: level, dictionary: dictionary) { stream in
                input.withUnsafeBufferPointer { src in
                    output.withUnsafeMutableBufferPointer { dst in
                        LZ4_compress_HC_continue(
                            stream, UnsafeRawPointer(src.baseAddress!).assumingMemoryBound(to: CChar.self),
                            UnsafeMutableRawPointer(dst.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(input.count), Int32(bound))
                    }
                }
            }
            guard written > 0 else { throw Failure(description: "LZ4 compression failed") }
            output.removeSubrange(Int(written)...)
            return output
        }

        /// liblz4's HC compression states, kept between calls. A state is 256 KB: `LZ4_compress_HC`
        /// allocated and cleared a new one for every call, and a dictionary was hashed into it
        /// again for every block, which for a 25 KB block or a snapshot page cost more than the
        /// compression itself. Here a state is reset cheaply between inputs
        /// (`LZ4_resetStreamHC_fast`, which leaves the old entries out of reach instead of
        /// clearing them), and a dictionary is loaded into a state of its own once, then copied
        /// into the working state for each block.
        final class HCStreams: @unchecked Sendable {  // unchecked: everything is under `lock`
            static let shared = HCStreams()

            private struct Prepared {
                /// Kept alive with its state, which points into it; found by the address of its
                /// storage (an array's storage never changes while anything holds it).
                var bytes: [UInt8]
                var level: Int32
                var stream: UnsafeMutablePointer<LZ4_streamHC_t>
            }

            private let lock = NSLock()
            private var idle: [UnsafeMutablePointer<LZ4_streamHC_t>] = []
            private var dictionaries: [Prepared] = []
            /// Dictionaries kept loaded: a ledger has one at a time, a process a few ledgers.
            private static let maxDictionaries = 4

            func withStream<T>(level: Int32, dictionary: [UInt8]?, _ body: (UnsafeMutablePointer<LZ4_streamHC_t>) -> T) -> T {
                let stream = take()
                defer { give(stream) }
                if let dictionary, !dictionary.isEmpty {
                    // The copy points into the dictionary's bytes, as the loaded state does.
                    load(dictionary, level: level, into: stream)
                } else {
                    LZ4_resetStreamHC_fast(stream, level)
                }
                return withExtendedLifetime(dictionary) { body(stream) }
            }

            private func take() -> UnsafeMutablePointer<LZ4_streamHC_t> {
                lock.lock()
                let stream = idle.popLast()
                lock.unlock()
                if let stream { return stream }
                let new = UnsafeMutablePointer<LZ4_streamHC_t>.allocate(capacity: 1)
                LZ4_initStreamHC(new, MemoryLayout<LZ4_streamHC_t>.size)
                return new
            }

            private func give(_ stream: UnsafeMutablePointer<LZ4_streamHC_t>) {
                lock.lock()
                idle.append(stream)
                lock.unlock()
            }

            /// Copies into `target` the state with `dictionary` loaded at `level`, loading that on
            /// first use.
            private func load(_ dictionary: [UInt8], level: Int32, into target: UnsafeMutablePointer<LZ4_streamHC_t>) {
                let address = dictionary.withUnsafeBufferPointer { $0.baseAddress }
                lock.lock()
                defer { lock.unlock() }
                if let found = dictionaries.first(where: { entry in
                    entry.level == level && entry.bytes.count == dictionary.count && entry.bytes.withUnsafeBufferPointer { $0.baseAddress } == address
                }) {
                    target.update(from: found.stream, count: 1)
                    return
                }
                let stream = UnsafeMutablePointer<LZ4_streamHC_t>.allocate(capacity: 1)
                LZ4_initStreamHC(stream, MemoryLayout<LZ4_streamHC_t>.size)
                LZ4_resetStreamHC_fast(stream, level)
                dictionary.withUnsafeBufferPointer { dict in
                    _ = LZ4_loadDictHC(stream, UnsafeRawPointer(dict.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(dict.count))
                }
                if dictionaries.count >= Self.maxDictionaries {
                    // Its state joins the idle ones, to be reset before any use.
                    idle.append(dictionaries.removeFirst().stream)
                }
                dictionaries.append(Prepared(bytes: dictionary, level: level, stream: stream))
                target.update(from: stream, count: 1)
            }
        }

        package static func liblz4Decompress(_ input: UnsafeRawBufferPointer, originalSize: Int, dictionary: [UInt8]?) throws(Failure) -> [UInt8] {
            guard originalSize > 0, !input.isEmpty else {
                if originalSize == 0 && input.isEmpty { return [] }
                throw undecodable(-1, originalSize)
            }
            var output = [UInt8](repeating: 0, count: originalSize)
            let produced: Int32 = output.withUnsafeMutableBufferPointer { dst in
                let srcPtr = input.baseAddress!.assumingMemoryBound(to: CChar.self)
                let dstPtr = UnsafeMutableRawPointer(dst.baseAddress!).assumingMemoryBound(to: CChar.self)
                guard let dictionary, !dictionary.isEmpty else {
                    return LZ4_decompress_safe(srcPtr, dstPtr, Int32(input.count), Int32(originalSize))
                }
                return dictionary.withUnsafeBufferPointer { dict in
                    LZ4_decompress_safe_usingDict(
                        srcPtr, dstPtr, Int32(input.count), Int32(originalSize),
                        UnsafeRawPointer(dict.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(dict.count))
                }
            }
            guard Int(produced) == originalSize else { throw undecodable(produced < 0 ? -1 : Int(produced), originalSize) }
            return output
        }
    #endif
}

extension LZ4 {
    // The one place an LZ4 result becomes a ledger error: what is stored is compressed, and
    // what is read back decompressed, only through these two.

    /// Compresses bytes about to be stored (`what` names them: "events 1...1024", "a snapshot
    /// page"). A failure (liblz4 refusing its input, never seen) is a `storage` error.
    static func compressForStorage(_ raw: [UInt8], dictionary: [UInt8]? = nil, _ what: @autoclosure () -> String) throws(LedgerError) -> [UInt8] {
        do {
            return try compress(raw, dictionary: dictionary)
        } catch {
            throw LedgerError.storage("compressing \(what()) failed: \(error)")
        }
    }

    /// Decompresses stored bytes (`what` names them: "the block of events 1...1024", "a snapshot
    /// page"). Bytes that do not decode are `corruptData`, at `seq` when known.
    static func decompressStored(
        _ input: [UInt8], originalSize: Int, dictionary: [UInt8]? = nil, _ what: @autoclosure () -> String, seq: Int64? = nil
    ) throws(LedgerError) -> [UInt8] {
        // No LZ4 block expands more than 255 times (a match's length costs a byte per 255): a
        // size beyond that is damage, refused before `originalSize` bytes are allocated (an
        // edited size of 2 GB on a 16 KB block cost every reader 2.1 GB before it failed).
        guard originalSize <= input.count * 255 + 64 else {
            throw LedgerError.corrupt("\(what()) does not decompress (it claims \(originalSize) bytes from \(input.count))", seq: seq)
        }
        do {
            return try input.withUnsafeBytes { bytes in try decompress(bytes, originalSize: originalSize, dictionary: dictionary) }
        } catch {
            throw LedgerError.corrupt("\(what()) does not decompress (\(error))", seq: seq)
        }
    }
}
