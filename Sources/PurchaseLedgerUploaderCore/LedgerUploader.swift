public import Foundation
public import PurchaseLedger

/// One HTTP request of the protocol, for an ``UploadTransport``.
public struct UploadRequest: Sendable {
    public var method: String
    public var url: URL
    /// Header fields, by name.
    public var headers: [String: String]
    public var body: Data?

    public init(method: String, url: URL, headers: [String: String], body: Data?) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// One HTTP answer: its status, its header fields (names lowercased) and its body.
public struct UploadResponse: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data

    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = Dictionary(headers.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        self.body = body
    }
}

/// How the uploader sends a request: `URLSessionTransport` (the `PurchaseLedgerUploader` product)
/// in an app; another HTTP client where URLSession cannot do what is needed (the CLI trusts a
/// private CA with swift-nio's).
public protocol UploadTransport: Sendable {
    /// Sends `request`; throws only when no answer came (the network, a refused connection): an
    /// ``UploadError`` to say what (`tls` for a certificate not trusted, which is not retried),
    /// any other error counts as `network`, retried.
    func send(_ request: UploadRequest) async throws -> UploadResponse
}

/// Why an upload stopped. ``isRetryable`` says whether trying again later can help (the
/// background loop does); the others need a person (a revoked token, a forked history).
public struct UploadError: Error, Sendable, CustomStringConvertible {
    /// The HTTP status, or nil when no answer came (the network, a refused connection).
    public var status: Int?
    /// The protocol's error name (`fork`, `keyMismatch`, `rateLimited`...), or `network`, `ledger`.
    public var kind: String
    public var message: String
    /// The seq concerned, when the answer names one.
    public var seq: Int64?
    /// Seconds the service asked to wait (Retry-After).
    public var retryAfter: Double?

    /// Whether the same upload may succeed later: no answer (`network`), 429, 5xx. Not a
    /// certificate the client does not trust (`tls`), nor any refusal.
    public var isRetryable: Bool {
        guard let status else { return kind == "network" }
        return status == 429 || status >= 500
    }

    public init(status: Int?, kind: String, message: String, seq: Int64? = nil, retryAfter: Double? = nil) {
        self.status = status
        self.kind = kind
        self.message = message
        self.seq = seq
        self.retryAfter = retryAfter
    }

    public var description: String {
        "\(kind)\(status.map { " (HTTP \($0))" } ?? ""): \(message)" + (seq.map { " (seq \($0))" } ?? "")
    }
}

/// Sends a ledger's events to an ingest service (docs/ingest.md) so they are stored in the fleet
/// store exactly once, and never drops one.
///
/// Each ``upload()`` asks the service for its head (seq and link) for this ledger, so it resumes
/// from what the service holds after any crash or kill on either side: there is no local cursor
/// to lose or to get wrong. It then sends the events after that head in bounded batches, each
/// with the head signed by the ledger's identity key; the service stores a batch whole or not at
/// all, and a batch sent twice is stored once. A history that forks from the service's (a file
/// restored from an older backup) is refused by both sides, never overwritten.
///
/// With the product `PurchaseLedgerUploader` (URLSession by default):
///
/// ```swift
/// let uploader = LedgerUploader(ledger: ledger, endpoint: URL(string: "https://ingest.example.com")!, token: token)
/// let report = try await uploader.upload()        // now, until the service holds every event
/// print(report.stored, "stored; lag", await uploader.status.lag)
/// Task { await uploader.run(every: .seconds(300)) }  // or in the background, with backoff
/// ```
public actor LedgerUploader {
    /// What the uploader knows after its last attempt.
    public struct Status: Sendable {
        /// The last seq the service acknowledged (-1 before the first answer).
        public var acknowledged: Int64 = -1
        /// Events of the ledger the service has not acknowledged yet.
        public var lag: Int64 = 0
        /// The last error, cleared by the next success.
        public var lastError: UploadError?
        /// When the service last acknowledged a head.
        public var lastSuccess: Date?
    }

    /// What one ``upload()`` did.
    public struct Report: Sendable {
        /// Events the service stored (0 when it held them all already).
        public var stored = 0
        /// Requests that carried events.
        public var batches = 0
        /// The service's head afterwards.
        public var seq: Int64 = 0
    }

    public let ledger: Ledger
    public let endpoint: URL
    private let token: String
    private let transport: any UploadTransport
    /// Events per request at most (halved after a 413, down to 1).
    public private(set) var batchSize: Int
    /// Bytes of frames per request, about.
    public let maxBytes: Int
    /// Attempts of one request before ``upload()`` gives up on a retryable error.
    public private(set) var maxAttempts: Int
    public private(set) var status = Status()

    /// An uploader of `ledger` to the service at `endpoint` (`https://host[:port]`), with the
    /// bearer `token` (`purchase-ledger token create`), sending through `transport` (the product
    /// `PurchaseLedgerUploader` adds an initializer without it, over `URLSessionTransport`).
    /// `batchSize` events per request at most, and about `maxBytes` of them.
    public init(
        ledger: Ledger, endpoint: URL, token: String, transport: any UploadTransport, batchSize: Int = 2_000,
        maxBytes: Int = 4 << 20, maxAttempts: Int = 6
    ) {
        self.maxAttempts = max(1, maxAttempts)
        self.ledger = ledger
        self.endpoint = endpoint
        self.token = token
        self.transport = transport
        self.batchSize = max(1, batchSize)
        self.maxBytes = max(1, maxBytes)
    }

    /// Sends every event the service does not hold yet; returns once it holds them all. A
    /// retryable failure (no answer, 429, 5xx) is retried with exponential backoff and jitter,
    /// Retry-After honoured, up to ``maxAttempts`` times per request; then, or on any other
    /// refusal, it throws ``UploadError`` (``status`` keeps it). Nothing is ever dropped: what
    /// was not acknowledged is sent by the next call.
    @discardableResult
    public func upload() async throws -> Report {
        do {
            let report = try await send()
            status.lastError = nil
            return report
        } catch let error as UploadError {
            status.lastError = error
            throw error
        } catch let error as LedgerError {
            let failure = UploadError(status: nil, kind: "ledger", message: error.message, seq: error.seq, retryAfter: nil)
            status.lastError = failure
            throw failure
        }
    }

    /// Calls ``upload()`` every `interval` until the task is cancelled; after a failure, waits
    /// with exponential backoff and jitter (from `interval` / 10, up to 16 times it), or as long
    /// as the service's Retry-After said.
    public func run(every interval: Duration = .seconds(60)) async {
        var failures = 0
        while !Task.isCancelled {
            var wait = interval
            do {
                try await upload()
                failures = 0
            } catch let error as UploadError {
                failures += 1
                wait = Self.backoff(after: failures, base: interval / 10, cap: interval * 16, retryAfter: error.retryAfter)
            } catch {
                failures += 1
                wait = Self.backoff(after: failures, base: interval / 10, cap: interval * 16, retryAfter: nil)
            }
            try? await Task.sleep(for: wait)
        }
    }

    /// The wait before attempt `failures + 1`: `base` doubled per failure, capped, with full
    /// jitter (a random share of it, so many devices do not retry in step), and never shorter
    /// than the service's Retry-After.
    static func backoff(after failures: Int, base: Duration, cap: Duration, retryAfter: Double?) -> Duration {
        let exponent = min(failures - 1, 20)
        let ceiling = min(cap, base * (1 << exponent))
        let jittered = ceiling * Double.random(in: 0.5...1.0)
        let asked = Duration.milliseconds(Int64((retryAfter ?? 0) * 1000))
        return max(jittered, asked)
    }

    // MARK: - The protocol

    private func send() async throws -> Report {
        var report = Report()
        var head = try await request { try await self.fetchHead() }
        report.seq = head.seq
        while true {
            try Task.checkCancellation()
            let size = batchSize
            guard let batch = try ledger.upload(after: head.seq, link: head.link, limit: size, maxBytes: maxBytes) else {
                try note(head.seq)
                return report
            }
            do {
                let answer = try await request { try await self.post(batch) }
                report.stored += answer.stored
                report.batches += 1
                head = (answer.seq, answer.link)
                report.seq = answer.seq
                try note(answer.seq)
                // Caught up: no need to read the log again to find nothing after the head.
                if status.lag == 0 { return report }
            } catch let error as UploadError where error.status == 413 && size > 1 {
                batchSize = max(1, size / 2)
            } catch let error as UploadError where error.kind == "gap" {
                // The service holds less than it said (restored from a backup): start from its head.
                head = try await request { try await self.fetchHead() }
            }
        }
    }

    private func note(_ seq: Int64) throws {
        status.acknowledged = seq
        status.lag = max(0, try ledger.lastSeq() - seq)
        status.lastSuccess = Date()
    }

    /// `body`, retried while its error is retryable, up to ``maxAttempts`` times.
    private func request<T: Sendable>(_ body: () async throws -> T) async throws -> T {
        var failures = 0
        while true {
            do {
                return try await body()
            } catch let error as UploadError where error.isRetryable && failures + 1 < maxAttempts {
                failures += 1
                status.lastError = error
                try await Task.sleep(for: Self.backoff(after: failures, base: .milliseconds(250), cap: .seconds(30), retryAfter: error.retryAfter))
            }
        }
    }

    private func fetchHead() async throws -> (seq: Int64, link: [UInt8]) {
        let object = try await exchange(
            UploadRequest(
                method: "GET", url: endpoint.appendingPathComponent("v1/ledgers/\(try ledgerID())/head"),
                headers: ["Authorization": "Bearer \(token)"], body: nil))
        return (Self.int(object["seq"]) ?? 0, Self.bytes(object["link"]))
    }

    private func post(_ batch: LedgerUpload) async throws -> (seq: Int64, link: [UInt8], stored: Int) {
        let object = try await exchange(
            UploadRequest(
                method: "POST", url: endpoint.appendingPathComponent("v1/ledgers/\(batch.ledgerID)/events"),
                headers: [
                    "Authorization": "Bearer \(token)", "Purchase-Ledger-Protocol": String(LedgerUpload.protocolVersion),
                    "Content-Type": "application/x-purchase-ledger-upload",
                ], body: Data(batch.encoded())))
        return (Self.int(object["seq"]) ?? 0, Self.bytes(object["link"]), Int(Self.int(object["stored"]) ?? 0))
    }

    private func ledgerID() throws -> String {
        guard let id = try ledger.identity()?.id else {
            throw UploadError(status: nil, kind: "ledger", message: "the ledger has no id yet: open it for writing once", seq: nil, retryAfter: nil)
        }
        return id
    }

    /// Sends `request`; the JSON object of a 200, or the answer's error.
    private func exchange(_ request: UploadRequest) async throws -> [String: Any] {
        let response: UploadResponse
        do {
            response = try await transport.send(request)
        } catch let error as UploadError {
            throw error
        } catch {
            throw UploadError(status: nil, kind: "network", message: "\(error)", seq: nil, retryAfter: nil)
        }
        let object = (try? JSONSerialization.jsonObject(with: response.body)) as? [String: Any] ?? [:]
        guard response.status == 200 else {
            throw UploadError(
                status: response.status, kind: object["error"] as? String ?? "http", message: object["message"] as? String ?? "HTTP \(response.status)",
                seq: Self.int(object["seq"]), retryAfter: response.headers["retry-after"].flatMap(Double.init))
        }
        return object
    }

    private static func int(_ value: Any?) -> Int64? {
        (value as? NSNumber)?.int64Value
    }

    private static func bytes(_ value: Any?) -> [UInt8] {
        guard let hex = value as? String, hex.count % 2 == 0 else { return [] }
        var out: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            guard let byte = UInt8(hex[index..<next], radix: 16) else { return [] }
            out.append(byte)
            index = next
        }
        return out
    }
}
