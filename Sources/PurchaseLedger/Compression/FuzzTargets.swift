/// Entry points for fuzzing the decoders of untrusted bytes, outside the public API.
@_spi(Fuzzing)
public enum FuzzTargets {
    /// Decodes `bytes` as the payload of an event of `type`; false when they are rejected.
    public static func decodePayload(_ type: EventType, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { buffer in
            var reader = BinaryReader(buffer)
            return (try? PayloadCodec.decode(type, &reader)) != nil
        }
    }

    /// Decompresses `bytes` claiming `size` bytes of output; false when rejected.
    public static func decompress(_ bytes: [UInt8], size: Int) -> Bool {
        bytes.withUnsafeBytes { (try? LZ4.decompress($0, originalSize: size)) != nil }
    }

    /// A compressed block of realistic frames, and its uncompressed size.
    public static func compressedSample() throws -> (data: [UInt8], rawSize: Int) {
        var raw: [UInt8] = []
        for i in 0..<200 { raw += Array("{\"download\":\"t\(i)-d1\",\"progress\":0.\(i % 10)}".utf8) }
        return (try LZ4.compress(raw), raw.count)
    }
}
