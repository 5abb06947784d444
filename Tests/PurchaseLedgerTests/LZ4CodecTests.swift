import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// The Swift LZ4 codec (the one Apple platforms use) against liblz4, both ways: what one
/// compresses the other decompresses to the same bytes, with and without a dictionary, and on
/// random and mutated blocks both decoders agree exactly: both reject (with the same error), or
/// both accept and produce the same bytes.
@Suite struct LZ4CodecTests {
    /// A deterministic generator, so a failure names a reproducible case.
    struct SplitMix: RandomNumberGenerator {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// Inputs of every kind a ledger compresses, and some it never does.
    static func samples() throws -> [(String, [UInt8])] {
        var rng = SplitMix(state: 42)
        var samples: [(String, [UInt8])] = []
        var frames: [UInt8] = []
        for i in 0..<2000 { frames += Array("{\"download\":\"t\(i)-d1\",\"progress\":0.\(i % 10)}".utf8) }
        samples.append(("frames", frames))
        let jsonl = Array(ExtractTestsData.jsonl.utf8)
        samples.append(("json lines", jsonl))
        samples.append(("binary payloads", ExtractTestsData.payloads()))
        samples.append(("zeros", [UInt8](repeating: 0, count: 70_000)))
        samples.append(("random", (0..<20_000).map { _ in UInt8.random(in: 0...255, using: &rng) }))
        samples.append(("few symbols", (0..<30_000).map { _ in UInt8.random(in: 65...68, using: &rng) }))
        samples.append(("period 3", (0..<5_000).map { UInt8($0 % 3) }))
        samples.append(("long runs", (0..<100_000).map { UInt8(($0 / 997) % 7) }))
        for n in [1, 2, 4, 5, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 31, 32, 33, 63, 64, 65, 100, 255, 256, 270, 1000] {
            samples.append(("\(n) bytes", (0..<n).map { UInt8(($0 * 7) % 5 + 97) }))
        }
        return samples
    }

    static func decode(_ block: [UInt8], size: Int, dictionary: [UInt8]?, swift: Bool) -> Result<[UInt8], LZ4.Failure> {
        block.withUnsafeBytes { bytes in
            Result { () throws(LZ4.Failure) -> [UInt8] in
                guard size > 0 else { return try LZ4.decompress(bytes, originalSize: size, dictionary: dictionary) }
                guard !bytes.isEmpty else { throw LZ4.Failure(description: "empty or oversized block") }
                return swift
                    ? try LZ4.swiftDecompress(bytes, originalSize: size, dictionary: dictionary)
                    : try LZ4.liblz4Decompress(bytes, originalSize: size, dictionary: dictionary)
            }
        }
    }

    /// A block built from a few random sequences: literal and match nibbles often 15 with
    /// extension bytes, small (even zero) offsets, an optional literal-only last sequence, and a
    /// claimed size near what it decodes to. Such blocks probe the decoders' end-of-block rules.
    static func synthetic(_ rng: inout SplitMix) -> ([UInt8], Int) {
        var block: [UInt8] = []
        var produced = 0
        func length(_ nibble: Int) -> [UInt8] {
            guard nibble == 15 else { return [] }
            switch Int.random(in: 0..<4, using: &rng) {
            case 0: return [0]
            case 1: return [255, UInt8.random(in: 0...20, using: &rng)]
            default: return [UInt8.random(in: 0...40, using: &rng)]
            }
        }
        for _ in 0..<Int.random(in: 1...4, using: &rng) {
            let literals = [0, 1, 4, 14, 15, 15, Int.random(in: 0...15, using: &rng)].randomElement(using: &rng)!
            let match = [0, 1, 14, 15, Int.random(in: 0...15, using: &rng)].randomElement(using: &rng)!
            block.append(UInt8(literals << 4 | match))
            let literalExtra = length(literals)
            block += literalExtra
            let literalCount = literals + literalExtra.reduce(0) { $0 + Int($1) }
            block += (0..<literalCount).map { _ in UInt8.random(in: 97...100, using: &rng) }
            produced += literalCount
            let offset = [0, 1, 3, 8, 16, Int.random(in: 0...max(1, produced + 3), using: &rng)].randomElement(using: &rng)!
            block += [UInt8(offset & 0xFF), UInt8(offset >> 8)]
            let matchExtra = length(match)
            block += matchExtra
            produced += match + 4 + matchExtra.reduce(0) { $0 + Int($1) }
        }
        if Bool.random(using: &rng) {
            let last = Int.random(in: 0...20, using: &rng)
            block.append(UInt8(min(last, 15) << 4))
            if last >= 15 { block.append(UInt8(last - 15)) }
            block += (0..<last).map { _ in UInt8.random(in: 97...100, using: &rng) }
            produced += last
        }
        return (block, max(1, produced + Int.random(in: -3...3, using: &rng)))
    }

    @Test func eachDecompressesWhatTheOtherCompresses() throws {
        let dictionary = Array((DictionarySeed.common + Array(ExtractTestsData.jsonl.utf8)).suffix(EventStore.maxDictionarySize))
        var swiftTotal = 0, liblz4Total = 0
        for (name, input) in try Self.samples() {
            for dict in [nil, dictionary] {
                let bySwift = LZ4.swiftCompress(input, dictionary: dict)
                let byLib = try LZ4.liblz4Compress(input, dictionary: dict)
                #expect(bySwift.count <= LZ4Block.bound(input.count), "\(name): within the bound")
                #expect(try Self.decode(bySwift, size: input.count, dictionary: dict, swift: false).get() == input, "\(name), dict \(dict != nil): liblz4 reads the Swift block")
                #expect(try Self.decode(byLib, size: input.count, dictionary: dict, swift: true).get() == input, "\(name), dict \(dict != nil): Swift reads the liblz4 block")
                #expect(try Self.decode(bySwift, size: input.count, dictionary: dict, swift: true).get() == input)
                if input.count > 1000 { swiftTotal += bySwift.count; liblz4Total += byLib.count }
            }
        }
        // Compression ratio on the compressible samples: within 3% of liblz4's high-compression mode.
        #expect(Double(swiftTotal) <= Double(liblz4Total) * 1.03, "Swift \(swiftTotal) bytes, liblz4 \(liblz4Total) bytes")
        // A dictionary the block needs: without it both refuse the block.
        let input = Array(ExtractTestsData.jsonl.utf8.prefix(3000))
        let withDict = LZ4.swiftCompress(input, dictionary: dictionary)
        #expect(withDict.count < LZ4.swiftCompress(input, dictionary: nil).count, "the dictionary helps")
        if case .success(let bytes) = Self.decode(withDict, size: input.count, dictionary: nil, swift: false) { #expect(bytes != input) }
        if case .success(let bytes) = Self.decode(withDict, size: input.count, dictionary: nil, swift: true) { #expect(bytes != input) }
    }

    /// Decodes with the Swift codec into a buffer fenced by 64 canary bytes on each side, and
    /// records an issue when a canary changed: an out-of-bounds write, caught where it happens.
    static func fencedDecode(_ block: [UInt8], size: Int, dictionary: [UInt8]?) -> Int {
        let fence = 64
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: size + 2 * fence, alignment: 16)
        defer { memory.deallocate() }
        memory.initializeMemory(as: UInt8.self, repeating: 0xA5)
        let produced = block.withUnsafeBytes { source in
            (dictionary ?? []).withUnsafeBytes { dict in
                LZ4Block.decode(source, into: UnsafeMutableRawBufferPointer(rebasing: memory[fence..<(fence + size)]), dictionary: dict)
            }
        }
        let untouched = memory[..<fence].allSatisfy { $0 == 0xA5 } && memory[(fence + size)...].allSatisfy { $0 == 0xA5 }
        if !untouched { Issue.record("the Swift decoder wrote outside its buffer (block \(block), size \(size))") }
        return produced
    }

    @Test(arguments: [false, true])
    func mutatedAndRandomBlocksGetTheSameAnswerFromBoth(withDictionary: Bool) throws {
        var rng = SplitMix(state: withDictionary ? 7 : 3)
        let dictionary = withDictionary ? Array((DictionarySeed.common + Array(ExtractTestsData.jsonl.utf8)).suffix(EventStore.maxDictionarySize)) : nil
        var bases: [([UInt8], Int)] = []
        for (_, input) in try Self.samples() where !input.isEmpty {
            bases.append((try LZ4.liblz4Compress(input, dictionary: dictionary), input.count))
            bases.append((LZ4.swiftCompress(input, dictionary: dictionary), input.count))
        }
        var accepted = 0, rejected = 0, syntheticAccepted = 0
        for round in 0..<28_000 {
            var (block, size) = bases[round % bases.count]
            switch round % 7 {
            case 6:  // synthetic sequences at the end-of-block limits
                (block, size) = Self.synthetic(&rng)
            case 0:  // flip bits
                for _ in 0..<Int.random(in: 1...3, using: &rng) {
                    let i = Int.random(in: 0..<block.count, using: &rng)
                    block[i] ^= 1 << UInt8.random(in: 0...7, using: &rng)
                }
            case 1:  // overwrite a byte
                block[Int.random(in: 0..<block.count, using: &rng)] = UInt8.random(in: 0...255, using: &rng)
            case 2:  // cut the end
                block.removeLast(Int.random(in: 0...min(block.count - 1, 20), using: &rng))
            case 3:  // claim another size
                size = max(1, size + Int.random(in: -40...40, using: &rng))
            case 4:  // append bytes
                block += (0..<Int.random(in: 1...8, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
            default:  // random bytes
                block = (0..<Int.random(in: 1...300, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
                size = Int.random(in: 1...2000, using: &rng)
            }
            _ = Self.fencedDecode(block, size: size, dictionary: dictionary)
            let lib = Self.decode(block, size: size, dictionary: dictionary, swift: false)
            let swift = Self.decode(block, size: size, dictionary: dictionary, swift: true)
            switch (lib, swift) {
            case (.success(let a), .success(let b)):
                accepted += 1
                if round % 7 == 6 { syntheticAccepted += 1 }
                if a != b { Issue.record("round \(round): both accept, bytes differ (block \(block.prefix(40)), size \(size))") }
            case (.failure(let a), .failure(let b)):
                rejected += 1
                if a.description != b.description { Issue.record("round \(round): different errors: \(a) / \(b)") }
            default:
                Issue.record("round \(round): liblz4 \(lib), Swift \(swift) (block \(block), size \(size))")
            }
        }
        #expect(accepted > 500 && rejected > 5_000, "accepted \(accepted), rejected \(rejected)")
        #expect(syntheticAccepted > 50, "synthetic blocks both decoders accept: \(syntheticAccepted)")
    }
}

/// Realistic bytes for the codec tests: contract JSON lines and binary payloads.
enum ExtractTestsData {
    static let jsonl: String = {
        var lines: [String] = []
        for i in 0..<400 {
            lines.append(
                #"{"type":"paymentQueued","at":"2024-03-01T09:\#(String(format: "%02d", i % 60)):00Z","transaction":"t\#(i)","product":"com.example.book\#(i % 7)","user":"u-\#(String(format: "%05d", i * 37 % 1000))"}"#
            )
            lines.append(
                #"{"type":"downloadProgressed","at":"2024-03-01T09:\#(String(format: "%02d", i % 60)):01.137Z","download":"t\#(i)-d1","progress":0.\#(i % 10),"bytesWritten":\#(i * 1024)}"#
            )
        }
        return lines.joined(separator: "\n")
    }()

    static func payloads() -> [UInt8] {
        var bytes: [UInt8] = []
        for line in jsonl.split(separator: "\n") {
            if let event = try? JSONLines.decode(String(line)) { bytes += FrameCodec.payload(event.body) }
        }
        return bytes
    }
}

/// Ledgers written by the CLI with one codec, read by the CLI with the other (separate processes,
/// `PURCHASE_LEDGER_LZ4=swift` forcing the Swift codec): the same replay, verify and export.
@Suite(.serialized, .enabled(if: Workload.available, "needs python3 and Tools/gen_workload.py"))
struct CrossCodecLedgerTests {
    static let swift = ["PURCHASE_LEDGER_LZ4": "swift"]

    @Test func aLedgerMovesBetweenTheCodecsBothWays() throws {
        let dir = try TemporaryDirectory()
        let workload = try Workload.file(events: 20_000)
        let bySwift = dir.path("swift.ledger"), byLiblz4 = dir.path("liblz4.ledger")
        #expect(try cli(["import", bySwift, workload], environment: Self.swift).status == 0)
        #expect(try cli(["import", byLiblz4, workload]).status == 0)

        // The codecs really differ: the same frames, other compressed bytes.
        func blocks(_ path: String) throws -> [Data] {
            try DatabaseQueue(path: path).read { try Data.fetchAll($0, sql: "SELECT data FROM event_blocks ORDER BY first_seq") }
        }
        let swiftBlocks = try blocks(bySwift), liblz4Blocks = try blocks(byLiblz4)
        #expect(swiftBlocks.count >= 19 && swiftBlocks.count == liblz4Blocks.count)
        #expect(swiftBlocks != liblz4Blocks, "each ledger was written by its own codec")

        var outputs: [String: [String]] = [:]
        for (ledger, name) in [(bySwift, "swift-written"), (byLiblz4, "liblz4-written")] {
            for (environment, reader) in [([String: String](), "liblz4"), (Self.swift, "swift")] {
                let verify = try cli(["verify", ledger], environment: environment)
                #expect(verify.status == 0, "\(name) read by \(reader): \(verify.stdout) \(verify.stderr)")
                outputs["\(name) read by \(reader)"] = [
                    try cli(["export", ledger], environment: environment).stdout,
                    try cli(["replay", ledger, "--json"], environment: environment).stdout,
                    try cli(["replay", ledger, "--at", "12345", "--json"], environment: environment).stdout,
                ]
            }
        }
        let reference = try #require(outputs["liblz4-written read by liblz4"])
        #expect(reference[0].split(separator: "\n").count >= 19_000)
        for (name, output) in outputs {
            #expect(output == reference, "\(name) differs from liblz4-written read by liblz4")
        }
    }
}
