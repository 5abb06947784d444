// swift-tools-version: 6.0
import PackageDescription

// The strictness the anchors use (swift-subprocess, swift-log), for every target of this
// package: each existential spelled `any`; a member visible only where its own module is
// imported; and imports internal unless a file says `public import` (or `package import`), so a
// dependency such as GRDB is not part of the API an app sees.
let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
    name: "purchase-ledger",
    // The floors are what the code needs (docs/platforms.md): Swift's Duration, Clock-based
    // Task.sleep(for:) and Regex (iOS 16 / macOS 13 / tvOS 16 / watchOS 9); visionOS 1 has them all.
    platforms: [.macOS(.v13), .iOS(.v16), .tvOS(.v16), .watchOS(.v9), .visionOS(.v1)],
    products: [
        .library(name: "PurchaseLedger", targets: ["PurchaseLedger"]),
        // Add beside StoreKit in an app: records payment-queue callbacks, checks finishes first.
        .library(name: "PurchaseLedgerStoreKit", targets: ["PurchaseLedgerStoreKit"]),
        // For backends: ships ledgers into PostgreSQL and reports over the whole fleet.
        .library(name: "PurchaseLedgerFleet", targets: ["PurchaseLedgerFleet"]),
        // For apps: sends the ledger's events to an ingest service (`purchase-ledger serve`), exactly once.
        .library(name: "PurchaseLedgerUploader", targets: ["PurchaseLedgerUploader"]),
        .executable(name: "purchase-ledger", targets: ["purchase-ledger"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", exact: "7.10.0"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        // Apple's signed transactions: the certificate chain, validated with its Verifier.
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        // Tests only: whole-state assertions that print a readable diff when they fail.
        .package(url: "https://github.com/pointfreeco/swift-custom-dump", from: "1.7.3"),
        // Routes custom-dump's failures to Swift Testing (without it they only print).
        .package(url: "https://github.com/pointfreeco/xctest-dynamic-overlay", from: "1.13.1"),
        // Only the fleet store (and the CLI and tests that use it) link PostgresNIO and SwiftNIO.
        // Pinned: the fleet's binary COPY relies on the text of the COPY statement PostgresNIO
        // writes (Sources/PurchaseLedgerFleet/Ship.swift, copyBinary); every ship test fails the
        // day it changes. To move on: check that text in the new version (or use a public binary
        // COPY once PostgresNIO has one), then raise this pin.
        .package(url: "https://github.com/vapor/postgres-nio", exact: "1.33.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        // TLS to the fleet store (sslmode); postgres-nio builds it anyway.
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        // The ingest service (`purchase-ledger serve`) only: HTTP and HTTPS, graceful shutdown.
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.8.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // The CLI's uploads (`push --ca`) and the ingest benchmark: an HTTP client that trusts a given CA.
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // liblz4 through the system library, on Linux only; only Sources/PurchaseLedger/Compression
        // imports it. Apple platforms use the byte-compatible Swift codec (LZ4Block.swift).
        .systemLibrary(
            name: "CLZ4",
            pkgConfig: "liblz4",
            providers: [.apt(["liblz4-dev"]), .brew(["lz4"])]
        ),
        .target(
            name: "PurchaseLedger",
            dependencies: [
                .target(name: "CLZ4", condition: .when(platforms: [.linux])),
                .product(name: "GRDB", package: "GRDB.swift"),
                // SQLite's C API, for binding projection rows without boxing (Storage/RawBind.swift).
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict,
            plugins: ["EmbedMigrations"]
        ),
        // Migrations/NNNN_name.sql are compiled into the library as string constants.
        .plugin(name: "EmbedMigrations", capability: .buildTool(), dependencies: ["embed-migrations"]),
        .executableTarget(name: "embed-migrations", path: "Plugins/EmbedMigrationsTool", swiftSettings: strict),
        // The mapping from StoreKit to events is platform-neutral (tested on Linux); only
        // Sources/PurchaseLedgerStoreKit/Apple imports StoreKit, behind #if canImport(StoreKit).
        .target(name: "PurchaseLedgerStoreKit", dependencies: ["PurchaseLedger"], swiftSettings: strict),
        // The fleet store: PostgreSQL tables distributable by ledger id (Migrations/postgres).
        .target(
            name: "PurchaseLedgerFleet",
            dependencies: [
                "PurchaseLedger",
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOFoundationCompat", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict,
            plugins: ["EmbedMigrations"]
        ),
        // Test and benchmark machinery (a PostgreSQL launcher, the ship killer, the device split):
        // used by the tests and ledger-bench, linked by no library product.
        .target(
            name: "PurchaseLedgerFleetTesting",
            dependencies: [
                "PurchaseLedger", "PurchaseLedgerFleet", .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            swiftSettings: strict
        ),
        // The entry points for fuzzing the decoders of untrusted bytes and for comparing the LZ4
        // codecs: used by ledger-bench and the tests, linked by no library product.
        .target(
            name: "PurchaseLedgerTesting",
            dependencies: [
                "PurchaseLedger", .target(name: "CLZ4", condition: .when(platforms: [.linux])), .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"), .product(name: "X509", package: "swift-certificates"),
                .product(name: "SwiftASN1", package: "swift-asn1"),
            ],
            swiftSettings: strict
        ),
        // The uploader, without an HTTP client of its own: what the CLI links (FoundationNetworking
        // would load libcurl and about 30 libraries at every start of the CLI on Linux).
        .target(name: "PurchaseLedgerUploaderCore", dependencies: ["PurchaseLedger"], swiftSettings: strict),
        // The uploader with Foundation's URLSession, so it runs in an app and on Linux.
        .target(name: "PurchaseLedgerUploader", dependencies: ["PurchaseLedger", "PurchaseLedgerUploaderCore"], swiftSettings: strict),
        // The ingest service in front of the fleet store; linked by the CLI, by no library product.
        .target(
            name: "PurchaseLedgerServer",
            dependencies: [
                "PurchaseLedger", "PurchaseLedgerFleet",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdCore", package: "hummingbird"),
                .product(name: "HummingbirdTLS", package: "hummingbird"),
                .product(name: "HTTPTypes", package: "swift-http-types"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                "PurchaseLedgerUploaderCore",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strict
        ),
        .target(
            name: "PurchaseLedgerCLI",
            dependencies: [
                "PurchaseLedger",
                "PurchaseLedgerFleet",
                "PurchaseLedgerServer",
                "PurchaseLedgerUploaderCore",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strict
        ),
        // On Linux the CLI carries the Swift runtime and Foundation (-static-stdlib, given to the
        // compiler too, so the module names the static libraries' dependencies): loading them as
        // shared libraries took about 6 ms of every command, and the binary runs where no Swift
        // is installed. lld, because gold warns about glibc's mktemp in the static Foundation at
        // every link. No library product holds this target, so these flags never reach an app
        // (docs/performance.md, "The CLI carries its runtime").
        .executableTarget(
            name: "purchase-ledger", dependencies: ["PurchaseLedgerCLI"],
            swiftSettings: strict + [.unsafeFlags(["-static-stdlib"], .when(platforms: [.linux]))],
            linkerSettings: [.unsafeFlags(["-static-stdlib", "-use-ld=lld"], .when(platforms: [.linux]))]),
        // README.md's library snippets as written (Tools/snippets/readme.py makes main.swift; the
        // tests check it matches the README and run it). A user's code: no strictness of ours.
        .executableTarget(name: "readme-snippets", dependencies: ["PurchaseLedger"], path: "Tools/readme-snippets"),
        // The Swift blocks of docs/*.md as written (Tools/snippets/docs.py makes main.swift;
        // DocumentationTests checks it matches the docs and runs each block in its document's order).
        .executableTarget(
            name: "docs-snippets", dependencies: ["PurchaseLedger", "PurchaseLedgerFleet", "PurchaseLedgerUploader"], path: "Tools/docs-snippets"),
        .executableTarget(
            name: "ledger-bench",
            dependencies: [
                "PurchaseLedger", "PurchaseLedgerFleet", "PurchaseLedgerFleetTesting", "PurchaseLedgerTesting", "PurchaseLedgerServer",
                "PurchaseLedgerUploaderCore", .product(name: "GRDBSQLite", package: "GRDB.swift"), .product(name: "PostgresNIO", package: "postgres-nio"),
            ],
            path: "Tools/ledger-bench",
            swiftSettings: strict
        ),
        .testTarget(
            name: "PurchaseLedgerTests",
            dependencies: [
                "PurchaseLedger",
                "PurchaseLedgerCLI",
                "PurchaseLedgerStoreKit",
                "PurchaseLedgerFleet",
                "PurchaseLedgerFleetTesting",
                "PurchaseLedgerTesting",
                "PurchaseLedgerServer",
                "PurchaseLedgerUploader",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "PropertyBased", package: "swift-property-based"),
                .product(name: "CustomDump", package: "swift-custom-dump"),
                .product(name: "IssueReportingTestSupport", package: "xctest-dynamic-overlay"),
            ],
            swiftSettings: strict
        ),
    ],
    swiftLanguageModes: [.v6]
)
