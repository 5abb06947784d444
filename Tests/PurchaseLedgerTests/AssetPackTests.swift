import Foundation
import GRDB
import Testing
@testable import PurchaseLedger

/// Asset packs as stored: every new event through both codecs and a ledger file, the projections
/// a rebuild would write, export and import, extract, redaction, and the ids they reserve.
@Suite struct AssetPackTests {
    static let log: [Event] =
        RuleCase.catalog + [
            E.packPublished("levels", 1, unlockedBy: ["p1"], at: 1), E.queued("t1", at: 2), E.purchased("t1", at: 3),
            E.packBegan("levels", 1, at: 4), E.packProgress("levels", 1, 0.125, at: 5), E.packPaused("levels", 1, at: 6),
            E.packBegan("levels", 1, at: 7), E.packFinished("levels", 1, at: 8), E.packOpened("levels", 1, at: 9),
            E.packPublished("levels", 2, at: 10), E.packFailed("levels", 2, at: 11), E.packBegan("levels", 2, at: 12),
            E.packFinished("levels", 2, at: 13), E.packFinished("levels", 1, at: 14),  // an anomaly: versions never go down
            E.packPublished("intro", 3, at: 15), E.packFinished("intro", 3, at: 16), E.packRemoved("intro", at: 17),
            Event(at: E.at(18), .storePaymentPromoted(product: "coins", accepted: false)),
        ]

    @Test func everyEventSurvivesBothCodecsAFileAndARebuild() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("packs.ledger")
        let ledger = try Ledger(path: path, configuration: testConfiguration())
        let stored = try ledger.append(contentsOf: Self.log)
        #expect(stored.events.map(\.anomaly).compactMap { $0 } == [.assetPackVersionDown])
        for e in Self.log {
            #expect(try JSONLines.decode(JSONLines.encode(e)) == e, "\(e.type)")
        }
        let reopened = try Ledger(path: path, configuration: testConfiguration())
        #expect(try reopened.events(limit: 100).map(\.event) == Self.log, "the payload codec round-trips every field")
        #expect(reopened.currentState == ledger.currentState)
        #expect(try reopened.verify().isValid, "the live projections equal a rebuild")

        let state = reopened.currentState
        let levels = try #require(state.assetPack("levels"))
        #expect(levels.publishedVersion == 2 && levels.versionOnDevice == 2 && levels.usable && !levels.updateAvailable)
        #expect(state.assetPack("intro")?.versionOnDevice == nil && state.assetPack("intro")?.publishedVersion == 3)
        let owned = try reopened.read { db in
            try Row.fetchAll(db, sql: "SELECT product, content, content_version FROM owned_content ORDER BY content").map {
                "\($0[0] as String)|\($0[1] as String)|\($0[2] as String)"
            }
        }
        #expect(owned == ["|assetpack:levels|2"], "the pack on the device is owned content; the removed one is gone")
        let contents = try reopened.read { db in
            try Row.fetchAll(db, sql: "SELECT product, content, latest_version FROM product_contents WHERE content LIKE 'assetpack:%'").map {
                "\($0[0] as String)|\($0[1] as String)|\($0[2] as String)"
            }
        }
        #expect(contents == ["p1|assetpack:levels|2"], "the products that unlock a pack list it as content")
    }

    @Test func exportImportAndExtractKeepThePacks() throws {
        let dir = try TemporaryDirectory()
        let path = dir.path("packs.ledger")
        _ = try Ledger(path: path, configuration: testConfiguration()).append(contentsOf: Self.log)
        let exported = try cli(["export", path])
        #expect(exported.status == 0)
        let copy = dir.path("copy.ledger")
        let imported = try cli(["import", copy, "-"], stdin: exported.stdout)
        #expect(imported.status == 0, "\(imported.stderr)")
        #expect(try cli(["export", copy]).stdout == exported.stdout, "export, import, export: the same bytes")
        #expect(exported.stdout.contains(#""type":"assetPackPublished","at":"2024-03-01T08:00:01.000Z","pack":"levels","version":1,"unlockedBy":["p1"]"#))

        // A repro of the unlocking purchase keeps the pack's events, and replays as the original.
        let repro = dir.path("repro.ledger")
        let summary = try Ledger(path: path, configuration: testConfiguration()).extract(.transactions(["t1"]), to: repro)
        let kept = try Ledger(path: repro, configuration: testConfiguration()).events(limit: 100).map(\.event.type)
        #expect(kept.filter { $0.name.hasPrefix("assetPack") }.count == 12, "\(kept)")
        #expect(!kept.contains(.storePaymentPromoted), "coins is not the repro's")
        #expect(summary.keptEvents == kept.count)

        // Redacted, the failure's message is replaced; ids are kept.
        let redacted = try cli(["export", path, "--redact"]).stdout
        #expect(!redacted.contains("network lost") && redacted.contains(#""pack":"levels""#))
    }

    @Test func badPackInputIsRefusedNamingTheFieldAndReservedIdsStayReserved() throws {
        let dir = try TemporaryDirectory()
        let ledger = try Ledger(path: dir.path("a.ledger"), configuration: testConfiguration())
        try ledger.append(contentsOf: RuleCase.purchased)
        for (line, message) in [
            (#"{"type":"assetPackBegan","at":"2024-03-01T00:00:00Z","pack":"x","version":-1}"#, "`version` must be a whole number"),
            (#"{"type":"assetPackBegan","at":"2024-03-01T00:00:00Z","pack":"x"}"#, "missing field `version`"),
            (#"{"type":"assetPackProgressed","at":"2024-03-01T00:00:00Z","pack":"x","version":1,"progress":2}"#, "`progress` must be a number in 0...1"),
            (#"{"type":"storePaymentPromoted","at":"2024-03-01T00:00:00Z","product":"p1"}"#, "`accepted`"),
        ] {
            let error = #expect(throws: LedgerError.self) { try JSONLines.decode(line) }
            #expect(error?.code == .malformedInput && error?.message.contains(message) == true, "\(String(describing: error))")
        }
        let seq = try ledger.lastSeq()
        let reserved = #expect(throws: LedgerError.self) { try ledger.append(E.registered("https://k/1", "assetpack:levels@1")) }
        #expect(reserved?.code == .malformedInput)
        try ledger.append(contentsOf: [E.packPublished("levels", 1), E.packFinished("levels", 1)])
        let driven = #expect(throws: LedgerError.self) { try ledger.append(E.start("assetpack:levels@1")) }
        #expect(driven?.rule == .illegalDownloadTransition)
        let copied = #expect(throws: LedgerError.self) { try ledger.append(E.copied("assetpack:levels@1")) }
        #expect(copied?.rule == .illegalDownloadTransition)
        #expect(try ledger.lastSeq() == seq + 2)
    }
}
