import Foundation

/// How a ledger is opened. The defaults suit an app's audit store: every append durable
/// (`synchronous=FULL` in WAL mode), compressed blocks of 1,024 events, a snapshot every 10,240
/// events (at most 192 kept, sharing their unchanged pages).
public struct LedgerConfiguration: Sendable {
    /// SQLite's `synchronous` setting: how hard a commit waits for the disk.
    public enum Durability: String, Sendable {
        /// Each commit is on disk before `append` returns, even across power loss.
        case full = "FULL"
        /// In WAL mode, survives an app crash; the last commits may be lost on power loss.
        case normal = "NORMAL"
    }

    /// How hard each commit waits for the disk; ``Durability/full`` by default.
    public var durability: Durability = .full
    /// How long an append waits for another process's write before failing with `storage`.
    public var busyTimeout: Duration = .seconds(10)
    /// A secret that turns the hash chain into an HMAC chain. Fixed when the ledger is created.
    public var chainKey: [UInt8]?
    /// The app's bundle id (`Bundle.main.bundleIdentifier`): a signed transaction Apple made for
    /// another app is `invalid` evidence (docs/rules.md, "Apple's signature"). Recorded in the
    /// ledger on the first writable open that gives it (`ledger_info.apple_bundle_id`; its
    /// evidence is then checked again); an open giving another one is refused.
    public var appleBundleID: String?
    /// Events per sealed, compressed block.
    public var blockSize: Int = 1024
    /// How the blocks this writer seals are compressed: LZ4 with the ledger's dictionary by default.
    /// Each block records its codec, so a ledger may mix them.
    public var blockCodec: BlockCodec = .lz4Dictionary
    /// A snapshot of the reducer state is stored every this many events (0: never). Time travel
    /// replays fewer than this many events from the snapshot before (until `maxSnapshots` or
    /// `maxSnapshotShare` thins them); fewer snapshots keep the file smaller. 10,240, ten blocks
    /// of 1,024: each snapshot then ends a sealed block, whose stored link its binding to the
    /// chain is checked against (at a seq inside a block, the block's events up to it are hashed
    /// again, their commitments made from the values: 3.9 ms of each state loaded, and of each
    /// snapshot written). On the shared 1,000,000-event workload: the file 78.9 bytes an event
    /// (76.7 with 15,000, the default from 2026-11-24 while 10,000 took it over 80), the focused
    /// CLI replay at seq 777,777 48.2-50.5 ms (50.6-50.9 with 10,000, 53.4-54.1 with 15,000),
    /// `forget` 2.43-2.59 s (2.83-2.87, 2.30-2.33). docs/performance.md has the measurements.
    public var snapshotInterval: Int = 10_240
    /// At most this many snapshots are kept, thinned to stay evenly spread over the log. They
    /// share unchanged pages, so each costs little more than what changed since the previous one.
    /// 192: one every `snapshotInterval` events up to about 2,000,000 events (128 with 15,000:
    /// 1,920,000).
    public var maxSnapshots: Int = 192
    /// The most of the file the snapshots may take (pages and manifests, against the bytes the
    /// file holds in use). Past it the oldest-spread snapshots are dropped, never the newest, so
    /// time travel to those seqs replays further; set 1 for no bound. The shared 1,000,000-event
    /// workload takes 20%.
    public var maxSnapshotShare: Double = 0.25
    /// Which changed records a snapshot keeps in its overlay rather than rewriting their pages
    /// (tests set small limits to reach them with a small ledger).
    var snapshotOverlay = SnapshotCodec.OverlayLimits()
    /// Personal values (other than user ids) per sealed block (``PersonalValueBlocks``; tests
    /// set a few, to reach blocks and their rewriting with a small ledger).
    var personalValuesPerBlock = PersonalValueBlocks.rowsPerBlock
    /// How sealed blocks keep their events' links (tests write the older layout to read it back).
    var blockLayout = BlockLayout.current
    /// Whether events given to the library are checked as JSON input is (``InputLimits``). Tests
    /// turn it off to write what versions before the checks let in (a NUL in an id).
    package var checksInput = true
    /// Set by `pull` while it writes the copy it makes (``Ledger/writePulledCopy(_:to:)``).
    package var writesPulledCopy = false
    /// Whether personal values are written inside the payloads, as versions before migration
    /// 0007 wrote them (not erasable). Tests turn it on to make such ledgers.
    package var writesPersonalValuesInline = false
    /// Called by ``Ledger/forget(user:)`` right after its transaction commits, before the WAL is
    /// checkpointed and truncated: the CLI's fault injection (`PURCHASE_LEDGER_FAULT`) ends the
    /// process there, as a kill would, to test that the next open finishes the erasure.
    package var afterErasureCommit: (@Sendable () -> Void)?
    /// The clock giving each event's `recordedAt`. Inject a fixed one for deterministic tests.
    public var clock: @Sendable () -> Timestamp = { Timestamp.now }
    /// Open without writing anything (no migration, no catch-up).
    public var readOnly: Bool = false

    /// The defaults: durable commits, compressed blocks of 1,024 events, a snapshot every 10,240
    /// events, writable.
    public init() {}
}

extension Timestamp {
    /// The current time.
    public static var now: Timestamp {
        let t = Date().timeIntervalSince1970
        return Timestamp(nanosecondsSinceEpoch: Int64((t * 1_000_000).rounded()) * 1000)
    }
}
