import Foundation
import HTTPTypes
import HummingbirdCore
import Hummingbird
import Logging
import NIOCore
import PurchaseLedger
import PurchaseLedgerFleet

/// The routes of protocol 1 (docs/ingest.md) and the answers each gives.
@available(macOS 14, iOS 17, tvOS 17, visionOS 1, *)
struct IngestHandler: Sendable {
    let configuration: IngestServiceConfiguration
    let pool: StorePool
    let batcher: IngestBatcher
    let logger: Logger
    let limiter: RateLimiter
    let tokens = TokenCache()

    /// The protocol versions this service speaks (`Purchase-Ledger-Protocol`).
    static let protocols = [LedgerUpload.protocolVersion]
    static let protocolHeader = HTTPField.Name("Purchase-Ledger-Protocol")!

    init(configuration: IngestServiceConfiguration, pool: StorePool, batcher: IngestBatcher, logger: Logger) {
        self.configuration = configuration
        self.pool = pool
        self.batcher = batcher
        self.logger = logger
        limiter = RateLimiter(perSecond: configuration.requestsPerSecond)
    }

    func addRoutes(to router: Router<BasicRequestContext>) {
        router.get("/v1/ledgers/:id/head") { request, context in
            await answer { try await head(request, context) }
        }
        router.post("/v1/ledgers/:id/events") { request, context in
            await answer { try await events(request, context) }
        }
        router.post("/v1/apple/notifications") { request, context in
            await answer { try await notification(request, context) }
        }
    }

    /// A refusal: its status and JSON body.
    struct Answer: Error {
        var response: Response
    }

    /// `body`'s response, or the answer it was refused with; a fleet store that cannot be reached
    /// is 503 (retry), anything else unexpected 500, its detail logged, never sent.
    private func answer(_ body: () async throws -> Response) async -> Response {
        do {
            return try await body()
        } catch let refused as Answer {
            return refused.response
        } catch let error as FleetError where error.code == .unreachable {
            logger.warning("the fleet store cannot be reached: \(error.message)")
            return Self.json(.serviceUnavailable, ["error": "unavailable", "message": "the fleet store cannot be reached; retry later"], retryAfter: 1)
        } catch let error as IngestServiceError {
            return Self.json(.badRequest, ["error": "malformed", "message": error.message])
        } catch {
            logger.error("request failed: \(error)")
            return Self.json(.internalServerError, ["error": "internal", "message": "the service failed to store this; retry later"], retryAfter: 1)
        }
    }

    // MARK: - Routes

    private func head(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        try await authenticate(request)
        let id = try ledgerID(context)
        let head = try await pool.with { try await $0.ingestHead(ofLedger: id) }
        return Self.json(.ok, Self.headObject(head))
    }

    private func events(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        try await authenticate(request)
        guard let version = request.headers[Self.protocolHeader], let number = Int(version), Self.protocols.contains(number) else {
            throw Answer(
                response: Self.json(
                    .badRequest,
                    [
                        "error": "unsupportedProtocol",
                        "message":
                            "this service speaks Purchase-Ledger-Protocol \(Self.protocols.map(String.init).joined(separator: ", ")); the request says \(request.headers[Self.protocolHeader] ?? "none")",
                    ]))
        }
        let id = try ledgerID(context)
        let bytes = try await body(request)
        let upload: LedgerUpload
        do {
            upload = try LedgerUpload(body: bytes)
        } catch {
            throw Answer(response: Self.json(.badRequest, ["error": "malformed", "message": error.message]))
        }
        guard upload.ledgerID.lowercased() == id else {
            throw Answer(
                response: Self.json(
                    .badRequest, ["error": "malformed", "message": "the body's head names another ledger than the path (\(id))"]))
        }
        do {
            let stored = try await batcher.submit(upload).get()
            var object = Self.headObject(stored)
            object["stored"] = stored.stored
            return Self.json(.ok, object)
        } catch let refusal as IngestRefusal {
            let status: HTTPResponse.Status =
                switch refusal.kind {
                case .malformed: .badRequest
                case .badSignature, .keyMismatch: .forbidden
                case .fork, .gap: .conflict
                case .refused: .unprocessableContent
                }
            var object: [String: Any] = ["error": refusal.kind.rawValue, "message": refusal.message]
            if let seq = refusal.seq { object["seq"] = seq }
            if let head = refusal.head { object["head"] = Self.headObject(head) }
            return Self.json(status, object)
        }
    }

    /// An App Store Server Notification V2 (`{"signedPayload": "..."}`), stored as
    /// `apple-import` stores it; 200 only once stored, so Apple retries anything else. Apple signs
    /// it; it carries no token of ours.
    private func notification(_ request: Request, _ context: BasicRequestContext) async throws -> Response {
        guard let verifier = configuration.appleVerifier else {
            throw Answer(response: Self.json(.notFound, ["error": "notFound", "message": "this service takes no Apple notifications (start it with --apple-root)"]))
        }
        // A bucket of its own: no token's name holds a control character.
        try limiter.admit("\u{0}apple notifications")
        let bytes = try await body(request)
        let documents: [PlacedAppleDocument]
        do {
            documents = try AppleDocument.parse(bytes, file: "request")
        } catch {
            throw Answer(response: Self.json(.badRequest, ["error": "malformed", "message": error.message]))
        }
        do {
            let summary = try await pool.with { try await $0.importApple(documents, verifier: verifier) }
            return Self.json(.ok, ["notifications": summary.notifications, "transactions": summary.transactions])
        } catch let error as AppleImportError {
            throw Answer(response: Self.json(.unprocessableContent, ["error": "refused", "message": error.message]))
        }
    }

    // MARK: - Parts

    private func authenticate(_ request: Request) async throws {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw Answer(response: Self.json(.unauthorized, ["error": "unauthorized", "message": "no bearer token"], authenticate: true))
        }
        let token = String(header.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        guard let name = try await tokens.name(of: token, { try await pool.with { try await $0.tokenName(token) } }) else {
            throw Answer(response: Self.json(.unauthorized, ["error": "unauthorized", "message": "the token is unknown or revoked"], authenticate: true))
        }
        try limiter.admit(name)
    }

    private func ledgerID(_ context: BasicRequestContext) throws -> String {
        guard let id = context.parameters.get("id"), UUID(uuidString: id) != nil else {
            throw Answer(response: Self.json(.badRequest, ["error": "malformed", "message": "the path names no ledger id (a UUID)"]))
        }
        return id.lowercased()
    }

    /// The whole body, refused with 413 past the limit (by its Content-Length before reading).
    private func body(_ request: Request) async throws -> [UInt8] {
        let limit = configuration.maxBodyBytes
        if let length = request.headers[.contentLength].flatMap(Int.init), length > limit {
            throw Answer(response: Self.tooLarge(limit))
        }
        var request = request
        do {
            let buffer = try await request.collectBody(upTo: limit)
            return Array(buffer: buffer)
        } catch let error as HTTPError where error.status == .contentTooLarge {
            throw Answer(response: Self.tooLarge(limit))
        }
    }

    private static func tooLarge(_ limit: Int) -> Response {
        json(.contentTooLarge, ["error": "tooLarge", "message": "the body is larger than this service takes (\(limit) bytes): send fewer events at once"])
    }

    static func headObject(_ head: IngestHead) -> [String: Any] {
        [
            "protocol": LedgerUpload.protocolVersion, "ledger": head.ledgerID, "seq": head.seq,
            "link": head.link.isEmpty ? NSNull() : Hex.encode(head.link) as Any,
        ]
    }

    static func json(_ status: HTTPResponse.Status, _ object: [String: Any], retryAfter: Int? = nil, authenticate: Bool = false) -> Response {
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes])) ?? Data("{}".utf8)
        var headers: HTTPFields = [.contentType: "application/json"]
        if let retryAfter { headers[.retryAfter] = String(retryAfter) }
        if authenticate { headers[.wwwAuthenticate] = "Bearer" }
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: Array(data) + [10])))
    }
}

/// Live tokens seen in the last second, by their SHA-256: a device's head request and its upload
/// that follows cost one lookup in the store, not two. A revoked token is refused from at most a
/// second after `token revoke`; an unknown one is looked up every time.
final class TokenCache: Sendable {
    private let seen = Locked<[[UInt8]: (name: String, at: ContinuousClock.Instant)]>([:])

    func name(of token: String, _ lookUp: () async throws -> String?) async throws -> String? {
        let digest = HashChain.sha256(Array(token.utf8))
        let now = ContinuousClock.now
        if let hit = seen.withLock({ $0[digest] }), now - hit.at < .seconds(1) { return hit.name }
        guard let name = try await lookUp() else {
            seen.withLock { _ = $0.removeValue(forKey: digest) }
            return nil
        }
        seen.withLock { cache in
            if cache.count > 10_000 { cache.removeAll() }
            cache[digest] = (name, now)
        }
        return name
    }
}

/// A token bucket per token: `perSecond` requests a second, bursts of twice as many.
@available(macOS 14, iOS 17, tvOS 17, visionOS 1, *)
final class RateLimiter: Sendable {
    private let perSecond: Double
    private let buckets = Locked<[String: (tokens: Double, at: ContinuousClock.Instant)]>([:])

    init(perSecond: Double) {
        self.perSecond = max(0.001, perSecond)
    }

    /// Takes one request from `key`'s bucket, or throws a 429 answer saying when to retry.
    func admit(_ key: String) throws {
        let now = ContinuousClock.now
        let capacity = perSecond * 2
        let wait = buckets.withLock { buckets -> Double? in
            var bucket = buckets[key] ?? (capacity, now)
            let elapsed = now - bucket.at
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            bucket.tokens = min(capacity, bucket.tokens + seconds * perSecond)
            bucket.at = now
            defer { buckets[key] = bucket }
            guard bucket.tokens >= 1 else { return (1 - bucket.tokens) / perSecond }
            bucket.tokens -= 1
            return nil
        }
        if let wait {
            let seconds = max(1, Int(wait.rounded(.up)))
            throw IngestHandler.Answer(
                response: IngestHandler.json(
                    .tooManyRequests, ["error": "rateLimited", "message": "too many requests for this token; retry in \(seconds) s"], retryAfter: seconds))
        }
    }
}
