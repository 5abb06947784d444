import Foundation
import HummingbirdCore
import ServiceLifecycle
import UnixSignals
import Hummingbird
import HummingbirdTLS
public import Logging
import NIOCore
import NIOSSL
public import PurchaseLedger
import PurchaseLedgerFleet

/// How `purchase-ledger serve` runs (docs/ingest.md).
public struct IngestServiceConfiguration: Sendable {
    /// The fleet store, as a `postgres://` URL (a role with the shipping and Apple GRANTs, and
    /// SELECT on `ingest_tokens`: docs/fleet.md's `ledger_ingest`).
    public var fleet: String
    /// The address to listen on; port 0 picks a free one (``IngestService/run(onListening:)`` says which).
    public var host: String
    public var port: Int
    /// PEM files of the server's certificate chain and private key: HTTPS. Without them, plain
    /// HTTP, allowed only on a loopback address unless ``insecureHTTP``.
    public var tlsCertificate: String?
    public var tlsKey: String?
    public var insecureHTTP = false
    /// The largest request body taken (413 past it).
    public var maxBodyBytes = 8 << 20
    /// Requests per second each token may make (its bucket holds twice as many); 429 with
    /// Retry-After past it.
    public var requestsPerSecond = 50.0
    /// Connections to the fleet store: uploads stored at once.
    public var connections = 4
    /// Apple's notifications (`POST /v1/apple/notifications`) are taken when set: the roots their
    /// signatures are checked with.
    public var appleVerifier: AppleSignatureVerifier?
    /// The app whose signed transactions count as Apple's evidence (the ledgers' own setting).
    public var appleBundleID: String?

    public init(fleet: String, host: String = "127.0.0.1", port: Int = 8080) {
        self.fleet = fleet
        self.host = host
        self.port = port
    }

    /// Whether `host` is a loopback address: `localhost`, `::1`, or an IPv4 literal in
    /// 127.0.0.0/8 (a name such as `127.example.com` is not one).
    public static func isLoopback(_ host: String) -> Bool {
        if host == "localhost" || host == "::1" || host == "[::1]" { return true }
        let parts = host.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts[0] == "127" && parts.allSatisfy { part in UInt8(part) != nil && part.allSatisfy(\.isNumber) }
    }
}

/// Why the service could not start.
public struct IngestServiceError: Error, Sendable, CustomStringConvertible {
    public var message: String
    public var description: String { message }
}

/// The ingest service: an HTTP front of a fleet store for devices (docs/ingest.md). Devices learn
/// the store's head for their ledger (`GET /v1/ledgers/{id}/head`) and send the events after it
/// (`POST /v1/ledgers/{id}/events`, a ``LedgerUpload`` body); App Store Server Notifications V2
/// go to `POST /v1/apple/notifications`. Each upload is stored in one PostgreSQL transaction
/// (``FleetStore/ingest(_:appleBundleID:)``), so a kill at any moment leaves nothing half-written;
/// SIGTERM or SIGINT stops accepting, lets requests in flight finish, and closes the store.
/// (Hummingbird 2 needs macOS 14 or iOS 17 and later; on Linux it runs wherever the CLI does.)
@available(macOS 14, iOS 17, tvOS 17, visionOS 1, *)
public struct IngestService: Sendable {
    public let configuration: IngestServiceConfiguration
    public let logger: Logger

    /// `logger`: where the service logs (warnings and errors by default; never a token).
    public init(configuration: IngestServiceConfiguration, logger: Logger? = nil) {
        self.configuration = configuration
        self.logger =
            logger
            ?? {
                var logger = Logger(label: "purchase-ledger.serve")
                logger.logLevel = .warning
                return logger
            }()
    }

    /// Runs until SIGTERM or SIGINT. `onListening` gets the address once it listens (with the
    /// port chosen, when 0 was asked for).
    public func run(onListening: @escaping @Sendable (_ url: String) -> Void = { _ in }) async throws {
        let c = configuration
        let tls = try tlsConfiguration()
        if tls == nil && !c.insecureHTTP && !IngestServiceConfiguration.isLoopback(c.host) {
            throw IngestServiceError(
                message:
                    "plain HTTP on \(c.host) would send tokens and ledgers in the clear: give --tls-cert and --tls-key, listen on a loopback address, or pass --insecure-http (behind a TLS proxy)"
            )
        }
        let pool = try await StorePool.connect(c.fleet, count: max(1, c.connections), logger: logger)
        let batcher = IngestBatcher(batch: 16)
        await batcher.start(count: max(1, c.connections), pool: pool, appleBundleID: c.appleBundleID)
        let handler = IngestHandler(configuration: c, pool: pool, batcher: batcher, logger: logger)
        let router = Router()
        handler.addRoutes(to: router)
        let scheme = tls == nil ? "http" : "https"
        let server: HTTPServerBuilder = try tls.map { try .tls(.http1(), tlsConfiguration: $0) } ?? .http1()
        let app = Application(
            router: router, server: server,
            configuration: ApplicationConfiguration(address: .hostname(c.host, port: c.port), serverName: "purchase-ledger"),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? c.port
                let host = c.host.contains(":") && !c.host.hasPrefix("[") ? "[\(c.host)]" : c.host
                onListening("\(scheme)://\(host):\(port)")
            },
            logger: logger)
        do {
            try await app.runService(gracefulShutdownSignals: [.sigterm, .sigint])
        } catch {
            await batcher.stop()
            await pool.close()
            throw error
        }
        await batcher.stop()
        await pool.close()
    }

    private func tlsConfiguration() throws -> TLSConfiguration? {
        let c = configuration
        switch (c.tlsCertificate, c.tlsKey) {
        case (nil, nil): return nil
        case (let cert?, let key?):
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(cert).map { NIOSSLCertificateSource.certificate($0) }
                guard !chain.isEmpty else { throw IngestServiceError(message: "\(cert) holds no certificate") }
                return TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(try NIOSSLPrivateKey(file: key, format: .pem)))
            } catch let error as IngestServiceError {
                throw error
            } catch {
                throw IngestServiceError(message: "cannot read the TLS certificate \(cert) or key \(key): \(error)")
            }
        default:
            throw IngestServiceError(message: "--tls-cert and --tls-key go together")
        }
    }
}

/// The fleet store connections the service stores through: one upload per connection at a time.
/// A connection that failed (the server restarted, the network dropped) is made again on its
/// next use.
actor StorePool {
    private var idle: [FleetStore?]
    private var waiting: [CheckedContinuation<FleetStore?, Never>] = []
    private let url: String

    private init(stores: [FleetStore], url: String) {
        idle = stores
        self.url = url
    }

    static func connect(_ url: String, count: Int, logger: Logger) async throws -> StorePool {
        var stores: [FleetStore] = []
        do {
            for _ in 0..<count { stores.append(try await FleetStore.connect(url)) }
        } catch {
            for store in stores { await store.close() }
            throw error
        }
        return StorePool(stores: stores, url: url)
    }

    private func take() async -> FleetStore? {
        if !idle.isEmpty { return idle.removeLast() }
        return await withCheckedContinuation { waiting.append($0) }
    }

    private func give(_ store: FleetStore?) {
        if !waiting.isEmpty {
            waiting.removeFirst().resume(returning: store)
        } else {
            idle.append(store)
        }
    }

    /// Runs `body` with a connection of its own.
    func with<T: Sendable>(_ body: @Sendable (FleetStore) async throws -> T) async throws -> T {
        var slot = await take()
        do {
            if slot == nil { slot = try await FleetStore.connect(url) }
            let result = try await body(slot!)
            give(slot)
            return result
        } catch let error as FleetError where error.code == .unreachable || error.code == .server {
            if let slot { await slot.close() }
            give(nil)
            throw error
        } catch {
            give(slot)
            throw error
        }
    }

    func close() async {
        for store in idle { if let store { await store.close() } }
        idle = []
    }
}

/// Uploads that arrive together are stored together: each worker (one per store connection) takes
/// what is waiting, up to `batch` uploads of distinct ledgers, and stores them in one PostgreSQL
/// transaction (``FleetStore/ingest(_:appleBundleID:)``), as `ship` stores a batch of ledgers.
/// An upload alone goes at once: nothing waits for a batch to fill.
actor IngestBatcher {
    typealias Outcome = Result<IngestHead, any Error>
    private var queue: [(upload: LedgerUpload, done: CheckedContinuation<Outcome, Never>)] = []
    private var idle: [CheckedContinuation<Void, Never>] = []
    private var workers: [Task<Void, Never>] = []
    private let batch: Int

    init(batch: Int) {
        self.batch = max(1, batch)
    }

    /// Starts `count` workers storing through `pool`.
    func start(count: Int, pool: StorePool, appleBundleID: String?) {
        for _ in 0..<max(1, count) {
            workers.append(
                Task {
                    while !Task.isCancelled {
                        let taken = await self.next()
                        guard !taken.isEmpty else { continue }
                        do {
                            let results = try await pool.with { try await $0.ingest(taken.map(\.upload), appleBundleID: appleBundleID) }
                            for (entry, result) in zip(taken, results) { entry.done.resume(returning: result.mapError { $0 as any Error }) }
                        } catch {
                            for entry in taken { entry.done.resume(returning: .failure(error)) }
                        }
                    }
                })
        }
    }

    /// Stores `upload` with whatever else is waiting; its outcome.
    func submit(_ upload: LedgerUpload) async -> Outcome {
        await withCheckedContinuation { done in
            queue.append((upload, done))
            if !idle.isEmpty { idle.removeFirst().resume() }
        }
    }

    /// Up to `batch` waiting uploads of distinct ledgers (empty when woken with none).
    private func next() async -> [(upload: LedgerUpload, done: CheckedContinuation<Outcome, Never>)] {
        if queue.isEmpty {
            await withCheckedContinuation { idle.append($0) }
        }
        var taken: [(upload: LedgerUpload, done: CheckedContinuation<Outcome, Never>)] = []
        var ids = Set<String>()
        var kept: [(upload: LedgerUpload, done: CheckedContinuation<Outcome, Never>)] = []
        for entry in queue {
            if taken.count < batch, ids.insert(entry.upload.ledgerID.lowercased()).inserted { taken.append(entry) } else { kept.append(entry) }
        }
        queue = kept
        return taken
    }

    /// Stops the workers (once no request waits on them).
    func stop() {
        for worker in workers { worker.cancel() }
        for waiting in idle { waiting.resume() }
        idle = []
    }
}
