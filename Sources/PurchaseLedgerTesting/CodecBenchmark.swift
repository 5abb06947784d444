import Foundation
import GRDB
public import PurchaseLedger

#if canImport(CLZ4)
    import CLZ4
#endif

/// The two LZ4 codecs side by side, for the benchmark tool (`ledger-bench codec`) to compare on a
/// ledger's real blocks.
public enum CodecBenchmark {
    /// One compressed unit of a ledger: a sealed block of events or a snapshot page.
    public struct Sample: Sendable {
        public var compressed: [UInt8]
        public var raw: [UInt8]
        public var dictionary: [UInt8]?
    }

    /// Whether this build can compare with liblz4 (it is linked on Linux only).
    public static var hasLiblz4: Bool {
        #if canImport(CLZ4)
            true
        #else
            false
        #endif
    }

    /// Every LZ4 block of the ledger: sealed event blocks (with their dictionary) and snapshot pages.
    public static func samples(of ledger: Ledger) throws -> [Sample] {
        try ledger.read { db in
            var dictionaries: [Int64: [UInt8]] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT id, bytes FROM dictionaries") {
                dictionaries[row[0]] = [UInt8](row[1] as Data)
            }
            var samples: [Sample] = []
            let blocks = try Row.fetchAll(db, sql: "SELECT codec, dictionary_id, raw_size, data FROM event_blocks WHERE codec % 3 IN (1, 2)")
            let pages = try Row.fetchAll(db, sql: "SELECT NULL, NULL, raw_size, data FROM snapshot_pages")
            for row in blocks + pages {
                let dictionary = (row[1] as Int64?).flatMap { dictionaries[$0] }
                let compressed = [UInt8](row[3] as Data)
                let raw = try compressed.withUnsafeBytes { try LZ4.decompress($0, originalSize: row[2], dictionary: dictionary) }
                samples.append(Sample(compressed: compressed, raw: raw, dictionary: dictionary))
            }
            return samples
        }
    }

    /// Decompresses every sample with one codec; false when one does not give its raw bytes back.
    public static func decompressAll(_ samples: [Sample], swift: Bool) -> Bool {
        for s in samples {
            let ok: Bool = s.compressed.withUnsafeBytes { bytes in
                let out: [UInt8]?
                if swift {
                    out = try? LZ4.swiftDecompress(bytes, originalSize: s.raw.count, dictionary: s.dictionary)
                } else {
                    #if canImport(CLZ4)
                        out = try? LZ4.liblz4Decompress(bytes, originalSize: s.raw.count, dictionary: s.dictionary)
                    #else
                        out = nil
                    #endif
                }
                return out?.count == s.raw.count
            }
            if !ok { return false }
        }
        return true
    }

    /// Compresses every sample's raw bytes with one codec (liblz4: high-compression mode at the ledger's level);
    /// the total compressed size, or nil when a codec is missing.
    public static func compressAll(_ samples: [Sample], swift: Bool) -> Int? {
        var total = 0
        for s in samples {
            if swift {
                total += LZ4.swiftCompress(s.raw, dictionary: s.dictionary).count
            } else {
                #if canImport(CLZ4)
                    guard let block = try? LZ4.liblz4Compress(s.raw, dictionary: s.dictionary) else { return nil }
                    total += block.count
                #else
                    return nil
                #endif
            }
        }
        return total
    }
}

/// What an import cannot avoid doing, for `ledger-bench import-floor`: the compression a file of
/// this size needs, the chain every event is linked into.
extension CodecBenchmark {
    /// Compresses every sample's raw bytes with liblz4's fast mode (acceleration 1, the
    /// dictionary loaded once and its state copied for each sample): the total compressed
    /// size, or nil where liblz4 is not linked. The ledger uses high-compression mode; this
    /// says what the faster one would cost in file size.
    public static func compressAllFast(_ samples: [Sample]) -> Int? {
        #if canImport(CLZ4)
            var total = 0
            let working = LZ4_createStream()!
            defer { LZ4_freeStream(working) }
            var loaded: (bytes: [UInt8], stream: UnsafeMutablePointer<LZ4_stream_t>)?
            defer { if let loaded { LZ4_freeStream(loaded.stream) } }
            var output: [UInt8] = []
            for s in samples where !s.raw.isEmpty {
                if let dictionary = s.dictionary, !dictionary.isEmpty {
                    if loaded?.bytes != dictionary {
                        if let loaded { LZ4_freeStream(loaded.stream) }
                        let stream = LZ4_createStream()!
                        dictionary.withUnsafeBufferPointer { d in
                            _ = LZ4_loadDict(stream, UnsafeRawPointer(d.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(d.count))
                        }
                        loaded = (dictionary, stream)
                    }
                    working.update(from: loaded!.stream, count: 1)
                } else {
                    LZ4_resetStream_fast(working)
                }
                let bound = Int(LZ4_compressBound(Int32(s.raw.count)))
                if output.count < bound { output = [UInt8](repeating: 0, count: bound) }
                let written = withExtendedLifetime(loaded?.bytes) {
                    s.raw.withUnsafeBufferPointer { src in
                        output.withUnsafeMutableBufferPointer { dst in
                            LZ4_compress_fast_continue(
                                working, UnsafeRawPointer(src.baseAddress!).assumingMemoryBound(to: CChar.self),
                                UnsafeMutableRawPointer(dst.baseAddress!).assumingMemoryBound(to: CChar.self), Int32(s.raw.count), Int32(bound), 1)
                        }
                    }
                }
                guard written > 0 else { return nil }
                total += Int(written)
            }
            return total
        #else
            return nil
        #endif
    }

    /// The canonical frame of every event of the ledger: the bytes its chain links hash.
    public static func canonicalFrames(of ledger: Ledger) throws -> [[UInt8]] {
        var frames: [[UInt8]] = []
        try ledger.forEachEvent { e in
            frames.append(FrameCodec.canonical(e, payload: FrameCodec.payload(e.event.body)))
            return true
        }
        return frames
    }

    /// SHA-256 of `bytes` in one pass: the machine's bare hashing speed, a floor under any chain.
    public static func sha256(_ bytes: [UInt8]) -> [UInt8] {
        HashChain.sha256(bytes)
    }

    /// Links `frames` into a SHA-256 chain from the genesis link, as an append does; the last link.
    public static func chain(_ frames: [[UInt8]]) -> [UInt8] {
        let chain = HashChain(key: nil)
        var link = HashChain.genesis
        for frame in frames { link = chain.link(after: link, frame: frame) }
        return link
    }
}
