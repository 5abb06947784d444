import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
public import PurchaseLedgerUploaderCore

/// The uploader's requests over swift-nio's HTTP client (AsyncHTTPClient): what `push` uses, so
/// it can trust a private CA (`--ca`), which URLSession on Linux cannot.
public final class HTTPClientTransport: UploadTransport {
    private let client: HTTPClient
    private let timeout: TimeAmount

    /// A client trusting the system's roots, or only the PEM certificates of `caFile` when given.
    public init(caFile: String? = nil, timeoutSeconds: Int64 = 120) throws {
        var configuration = HTTPClient.Configuration()
        if let caFile {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(caFile))
            configuration.tlsConfiguration = tls
        }
        configuration.timeout = .init(connect: .seconds(5), read: .seconds(timeoutSeconds))
        client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        timeout = .seconds(timeoutSeconds)
    }

    public func send(_ request: UploadRequest) async throws -> UploadResponse {
        var outgoing = HTTPClientRequest(url: request.url.absoluteString)
        outgoing.method = HTTPMethod(rawValue: request.method)
        for (name, value) in request.headers { outgoing.headers.add(name: name, value: value) }
        if let body = request.body { outgoing.body = .bytes(ByteBuffer(bytes: body)) }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(outgoing, timeout: timeout)
        } catch let error as NIOSSLError {
            throw UploadError(status: nil, kind: "tls", message: "TLS with \(request.url.host ?? "the service") failed: \(error)")
        } catch let error as BoringSSLError {
            throw UploadError(status: nil, kind: "tls", message: "TLS with \(request.url.host ?? "the service") failed: \(error)")
        } catch let error as NIOSSLExtraError {
            throw UploadError(status: nil, kind: "tls", message: "TLS with \(request.url.host ?? "the service") failed: \(error)")
        }
        let body = try await response.body.collect(upTo: 16 << 20)
        var headers: [String: String] = [:]
        for field in response.headers { headers[field.name.lowercased()] = field.value }
        return UploadResponse(status: Int(response.status.code), headers: headers, body: Data(Array(buffer: body)))
    }

    /// Closes the client's connections; call once done.
    public func shutdown() async throws {
        try await client.shutdown()
    }
}
