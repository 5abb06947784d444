// The uploader with Foundation's URLSession: what an app links (the `PurchaseLedgerUploader`
// product). The uploader itself is PurchaseLedgerUploaderCore, re-exported here, which the CLI
// links without URLSession: on Linux, FoundationNetworking loads libcurl and about 30 libraries
// at every start of a process (7 ms of each CLI command).
public import Foundation
@_exported public import PurchaseLedgerUploaderCore
public import PurchaseLedger

#if canImport(FoundationNetworking)
    public import FoundationNetworking
#endif

/// Foundation's URLSession: the system's trust store and proxies, in an app and on Linux.
public struct URLSessionTransport: UploadTransport {
    public let session: URLSession

    public init(session: URLSession = .shared) {
        self.session = session
    }

    public func send(_ request: UploadRequest) async throws -> UploadResponse {
        var urlRequest = URLRequest(url: request.url)
        urlRequest.httpMethod = request.method
        for (name, value) in request.headers { urlRequest.setValue(value, forHTTPHeaderField: name) }
        urlRequest.httpBody = request.body
        let (data, response) = try await session.data(for: urlRequest)
        let http = response as? HTTPURLResponse
        var headers: [String: String] = [:]
        for (name, value) in http?.allHeaderFields ?? [:] { headers["\(name)"] = "\(value)" }
        return UploadResponse(status: http?.statusCode ?? 0, headers: headers, body: data)
    }
}

extension LedgerUploader {
    /// An uploader of `ledger` to the service at `endpoint` (`https://host[:port]`) over
    /// ``URLSessionTransport``, with the bearer `token` (`purchase-ledger token create`).
    /// `batchSize` events per request at most, and about `maxBytes` of them.
    public init(ledger: Ledger, endpoint: URL, token: String, batchSize: Int = 2_000, maxBytes: Int = 4 << 20, maxAttempts: Int = 6) {
        self.init(
            ledger: ledger, endpoint: endpoint, token: token, transport: URLSessionTransport(), batchSize: batchSize, maxBytes: maxBytes,
            maxAttempts: maxAttempts)
    }
}
