import Foundation
import GRDB
public import PurchaseLedger

#if canImport(CLZ4)
    import CLZ4
#endif

/// Entry points for fuzzing the decoders of untrusted bytes (`ledger-bench fuzz`): test
/// machinery, in no library product.
public enum FuzzTargets {
    /// Decodes `bytes` as the payload of an event of `type`; false when they are rejected.
    public static func decodePayload(_ type: EventType, _ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { buffer in
            var reader = BinaryReader(buffer)
            return (try? PayloadCodec.decode(type, &reader, personal: .empty)) != nil
        }
    }

    /// Decompresses `bytes` claiming `size` bytes of output; false when rejected.
    public static func decompress(_ bytes: [UInt8], size: Int) -> Bool {
        bytes.withUnsafeBytes { (try? LZ4.decompress($0, originalSize: size)) != nil }
    }

    /// The uncompressed frames of a sealed block of 24 realistic events (seqs 1...24), in
    /// `layout`: their links inside the frames (the oldest), after them, or after them with the
    /// commitments of every third event's personal values elided (its field 15 stored as field
    /// 14, the refs alone).
    package static func blockSample(layout: BlockLayout) -> [UInt8] {
        var frames: [EventStore.Frame] = []
        var generator = SystemRandomNumberGenerator()
        for i in 0..<24 {
            let body: EventBody =
                switch i % 3 {
                case 0: .paymentQueued(transaction: "tx-\(i)", product: "com.example.p\(i % 5)", quantity: 1, user: "u-\(i % 7)")
                case 1: .downloadProgressed(download: "tx-\(i - 1)-d1", progress: 0.25, bytesWritten: Int64(i) * 1000, timeRemaining: 1.5)
                default: .contentCopiedOut(download: "tx-\(i - 2)-d1", destination: "Library/Content/p\(i)/1.0/", checksum: nil, bytesCopied: nil)
                }
            let at = Timestamp(nanosecondsSinceEpoch: 1_709_251_200_000_000_000 + Int64(i) * 1_500_000_000)
            let event = RecordedEvent(seq: Int64(i + 1), version: 1, event: Event(at: at, body), recordedAt: at)
            let link = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
            var payload = FrameCodec.payload(body)
            if i % 3 == 2 {
                // Field 15 (wire 2, key 0x7A): the (ref, commitment) pairs of the values the event
                // introduces, each ref a varint.
                var pairs: [UInt8] = []
                for ref in [UInt64(100 + i), UInt64(70_000 + i)] {
                    pairs += varint(ref) + (0..<16).map { _ in UInt8.random(in: 0...255, using: &generator) }
                }
                payload += [0x7A] + varint(UInt64(pairs.count)) + pairs
            }
            var frame = EventStore.Frame(event, payload: payload, link: link)
            frame.introductionsChecked = true
            frames.append(frame)
        }
        let raw = EventStore.rawBlock(frames[...], layout: layout)
        // 8 events of 2 commitments each: 256 bytes fewer when they are elided.
        precondition(layout != .elidedCommitments || raw.count == EventStore.rawBlock(frames[...], layout: .trailingLinks).count - 256)
        return raw
    }

    private static func varint(_ value: UInt64) -> [UInt8] {
        var value = value, bytes: [UInt8] = []
        while value >= 0x80 {
            bytes.append(UInt8(value & 0x7F) | 0x80)
            value >>= 7
        }
        return bytes + [UInt8(value)]
    }

    /// Decodes `raw` as the uncompressed frames of a sealed block said to hold events
    /// `first...last`, in `layout`; false when the damage is found and reported.
    package static func decodeBlock(_ raw: [UInt8], first: Int64, last: Int64, layout: BlockLayout) -> Bool {
        var block = EventStore.SealedBlock(first: first, last: last, from: first, through: last)
        block.layout = layout
        block.rawSize = raw.count
        block.data = raw
        return EventStore.decodeEvents(block).failure == nil
    }

    /// A compressed block of realistic frames, and its uncompressed size.
    public static func compressedSample() throws -> (data: [UInt8], rawSize: Int) {
        var raw: [UInt8] = []
        for i in 0..<200 { raw += Array("{\"download\":\"t\(i)-d1\",\"progress\":0.\(i % 10)}".utf8) }
        return (try LZ4.compress(raw), raw.count)
    }
}
