import CLZ4

/// LZ4 block compression over liblz4, optionally with a dictionary.
///
/// The only place that imports `CLZ4`. Decompression uses `LZ4_decompress_safe*` only, which
/// never reads or writes outside the buffers it is given, so corrupt input is an error, not a crash.
enum LZ4 {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Turns the C convention (a count, or <= 0 for failure) into a Swift result, in one place.
    private static func checked(_ result: Int32, _ what: String) throws(Failure) -> Int {
        guard result > 0 else { throw Failure(description: "\(what) failed (\(result))") }
        return Int(result)
    }

    /// The largest input one call handles (liblz4's own limit).
    static let maxInputSize = Int(LZ4_MAX_INPUT_SIZE)

    /// Compresses `input` with LZ4's high-compression mode (same format, same fast decompression;
    /// slower to compress, which sealing a block once can afford). With a dictionary, matches may
    /// refer into it; the same dictionary is needed to decompress.
    static func compress(_ input: [UInt8], dictionary: [UInt8]? = nil, level: Int32 = 3) throws(Failure) -> [UInt8] {
        guard input.count <= maxInputSize else { throw Failure(description: "block of \(input.count) bytes is too large") }
        if input.isEmpty { return [] }
        let bound = Int(LZ4_compressBound(Int32(input.count)))
        var output = [UInt8](repeating: 0, count: bound)
        let written: Int32 = input.withUnsafeBufferPointer { src in
            output.withUnsafeMutableBufferPointer { dst in
                let srcPtr = UnsafeRawPointer(src.baseAddress!).assumingMemoryBound(to: CChar.self)
                let dstPtr = UnsafeMutableRawPointer(dst.baseAddress!).assumingMemoryBound(to: CChar.self)
                guard let dictionary, !dictionary.isEmpty else {
                    return LZ4_compress_HC(srcPtr, dstPtr, Int32(input.count), Int32(bound), level)
                }
                guard let stream = LZ4_createStreamHC() else { return 0 }
                defer { LZ4_freeStreamHC(stream) }
                LZ4_resetStreamHC_fast(stream, level)
                return dictionary.withUnsafeBufferPointer { dict in
                    let dictPtr = UnsafeRawPointer(dict.baseAddress!).assumingMemoryBound(to: CChar.self)
                    LZ4_loadDictHC(stream, dictPtr, Int32(dict.count))
                    return LZ4_compress_HC_continue(stream, srcPtr, dstPtr, Int32(input.count), Int32(bound))
                }
            }
        }
        output.removeSubrange(try checked(written, "LZ4 compression")...)
        return output
    }

    /// Decompresses exactly `originalSize` bytes, or throws when `input` is not a valid LZ4 block
    /// of that size (for that dictionary).
    static func decompress(_ input: UnsafeRawBufferPointer, originalSize: Int, dictionary: [UInt8]? = nil) throws(Failure) -> [UInt8] {
        guard originalSize >= 0, originalSize <= maxInputSize else { throw Failure(description: "implausible size \(originalSize)") }
        if originalSize == 0 {
            guard input.isEmpty else { throw Failure(description: "data where none was expected") }
            return []
        }
        guard !input.isEmpty, input.count <= maxInputSize else { throw Failure(description: "empty or oversized block") }
        var output = [UInt8](repeating: 0, count: originalSize)
        let produced: Int32 = output.withUnsafeMutableBufferPointer { dst in
            let srcPtr = input.baseAddress!.assumingMemoryBound(to: CChar.self)
            let dstPtr = UnsafeMutableRawPointer(dst.baseAddress!).assumingMemoryBound(to: CChar.self)
            guard let dictionary, !dictionary.isEmpty else {
                return LZ4_decompress_safe(srcPtr, dstPtr, Int32(input.count), Int32(originalSize))
            }
            return dictionary.withUnsafeBufferPointer { dict in
                LZ4_decompress_safe_usingDict(srcPtr, dstPtr, Int32(input.count), Int32(originalSize),
                                              UnsafeRawPointer(dict.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(dict.count))
            }
        }
        let count = try checked(produced, "LZ4 decompression")
        guard count == originalSize else { throw Failure(description: "decompressed \(count) bytes, expected \(originalSize)") }
        return output
    }
}
