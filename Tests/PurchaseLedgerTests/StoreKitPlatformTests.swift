import Foundation
import PurchaseLedger
import PurchaseLedgerStoreKit
import Testing

/// The Apple-only StoreKit layer against docs/platforms.md's table of the Apple APIs it uses: the
/// stand-in modules of Tools/storekit-check.sh cannot say which platform has an API, the table
/// does, and this holds every `#if` of the layer to it.
@Suite struct StoreKitPlatformTests {
    static let platforms = ["iOS", "macOS", "tvOS", "watchOS", "visionOS"]

    /// One row of the table: the API, the first release per platform (nil: unavailable), the
    /// file that uses it and the guard the docs name.
    struct Row {
        var api: String
        var since: [String: String?]
        var file: String
        /// The guards it is used under (one, or one per branch).
        var guards: [String]
    }

    static func rows() throws -> [Row] {
        let text = try String(contentsOf: packageRoot.appending(path: "docs/platforms.md"), encoding: .utf8)
        guard let start = text.range(of: "<!-- storekit-apis") else { return [] }
        var rows: [Row] = []
        for line in text[start.upperBound...].split(separator: "\n").dropFirst(3) {
            guard line.hasPrefix("|") else { break }
            let cells = line.split(separator: "|", omittingEmptySubsequences: false).dropFirst().dropLast()
                .map { $0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "`")) }
            guard cells.count == 8 else { continue }
            var since: [String: String?] = [:]
            for (i, platform) in platforms.enumerated() { since[platform] = cells[1 + i] == "-" ? nil : cells[1 + i] }
            rows.append(Row(api: cells[0], since: since, file: cells[6], guards: cells[7].components(separatedBy: "`, `")))
        }
        return rows
    }

    /// What finds the API in a source line: `member(label:` for a method (`member(` when its first
    /// label is `_`), `.member` for a property, the label and a space for an observer method
    /// (`paymentQueue(_:updatedDownloads:)`: `updatedDownloads `), the name for a type.
    static func token(of api: String) -> String {
        if api.hasPrefix("paymentQueue(_:") {
            return String(api.dropFirst("paymentQueue(_:".count).prefix { $0 != ":" }) + " "
        }
        guard let dot = api.firstIndex(of: ".") else { return api }
        let member = api[api.index(after: dot)...]
        guard let paren = member.firstIndex(of: "(") else { return "." + member }
        let name = member[..<paren]
        let firstLabel = member[member.index(after: paren)...].prefix { $0 != ":" && $0 != ")" }
        return firstLabel == "_" || firstLabel.isEmpty ? name + "(" : name + "(" + firstLabel + ":"
    }

    /// Whether `condition` (terms joined by `&&`: `os(X)`, `!os(X)`, `canImport(...)`,
    /// `compiler(>=6.2)`) holds when compiling for `platform` with a current SDK.
    static func holds(_ condition: String, on platform: String) -> Bool {
        condition.components(separatedBy: "&&").allSatisfy { term in
            let t = term.trimmingCharacters(in: .whitespaces)
            if t.hasPrefix("!os(") { return String(t.dropFirst(4).dropLast()) != platform }
            if t.hasPrefix("os(") { return String(t.dropFirst(3).dropLast()) == platform }
            if t == "canImport(BackgroundAssets)" { return platform != "watchOS" }
            if t == "canImport(StoreKit)" || t == "compiler(>=6.2)" { return true }
            Issue.record("a condition this test cannot read: \(t)")
            return false
        }
    }

    /// One `#if` block of a file: its condition, whether it has an `#else`, and the lines it holds
    /// directly or in blocks within.
    struct Block {
        var condition: String
        var hasElse = false
        var lines: Range<Int>
    }

    /// Each source line's enclosing conditions (an `#else` branch as the negation, `!(...)`), and
    /// the file's blocks.
    static func guards(of file: String) throws -> (lines: [String], conditions: [[String]], blocks: [Block]) {
        let text = try String(contentsOf: packageRoot.appending(path: "Sources/PurchaseLedgerStoreKit/Apple/\(file)"), encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var stack: [(condition: String, start: Int, inElse: Bool, hasElse: Bool)] = []
        var conditions: [[String]] = []
        var blocks: [Block] = []
        for (i, raw) in lines.enumerated() {
            let line = raw.trimmingCharacters(in: .whitespaces)
            if line.hasPrefix("#if ") {
                stack.append((String(line.dropFirst(4)), i, false, false))
            } else if line.hasPrefix("#else") {
                stack[stack.count - 1].inElse = true
                stack[stack.count - 1].hasElse = true
            } else if line.hasPrefix("#endif") {
                let top = stack.removeLast()
                blocks.append(Block(condition: top.condition, hasElse: top.hasElse, lines: top.start..<i))
            }
            conditions.append(
                stack.map { entry in
                    guard entry.inElse else { return entry.condition }
                    // The `#else` of `os(X)` reads as `!os(X)`, as the table writes it.
                    return entry.condition.hasPrefix("os(") && !entry.condition.contains("&&") ? "!" + entry.condition : "!(\(entry.condition))"
                })
        }
        return (lines, conditions, blocks)
    }

    static func compiled(_ conditions: [String], on platform: String) -> Bool {
        conditions.allSatisfy { c in
            c.hasPrefix("!(") ? !holds(String(c.dropFirst(2).dropLast()), on: platform) : holds(c, on: platform)
        }
    }

    @Test func everyGuardCompilesItsAPIsExactlyWhereTheyExist() throws {
        let rows = try Self.rows()
        #expect(rows.count >= 10, "docs/platforms.md lists the StoreKit layer's APIs")
        var used: [String: [(row: Row, line: Int)]] = [:]
        for row in rows {
            let (lines, conditions, _) = try Self.guards(of: row.file)
            let token = Self.token(of: row.api)
            let hits = lines.indices.filter { i in
                let line = lines[i].trimmingCharacters(in: .whitespaces)
                guard !line.hasPrefix("//"), let found = line.range(of: token) else { return false }
                // An observer method where it is implemented; any other name as a whole word.
                if row.api.hasPrefix("paymentQueue(") { return line.contains("func paymentQueue(") }
                guard let last = token.last, last.isLetter || last.isNumber, found.upperBound < line.endIndex else { return true }
                let next = line[found.upperBound]
                return !(next.isLetter || next.isNumber || next == "(")
            }
            #expect(!hits.isEmpty, "\(row.api) (\(token)) is not used in \(row.file)")
            for i in hits {
                used[row.file, default: []].append((row, i))
                // The guard the docs name is the guard in the source.
                #expect(row.guards.contains(conditions[i].joined(separator: " && ")), "\(row.file):\(i + 1) \(row.api)")
                for platform in Self.platforms where Self.compiled(conditions[i], on: platform) {
                    #expect(row.since[platform]! != nil, "\(row.file):\(i + 1): \(row.api) is compiled for \(platform), which lacks it")
                }
                // An API of an SDK newer than Swift 6.0's only where the compiler is 6.2 or newer.
                if row.since.values.contains(where: { ($0.flatMap { Double($0.split(separator: ".")[0]) } ?? 0) >= 26 }) {
                    #expect(conditions[i].contains { $0.contains("compiler(>=6.2)") }, "\(row.file):\(i + 1): \(row.api) needs an SDK of Swift 6.2")
                }
            }
        }
        // A guard without an `#else` leaves out a platform only where an API it holds is missing.
        for (file, uses) in used {
            // (A block that holds none of the table's APIs, such as an import, is not judged.)
            for block in try Self.guards(of: file).blocks where !block.hasElse && uses.contains(where: { block.lines.contains($0.line) }) {
                for platform in Self.platforms where !Self.holds(block.condition, on: platform) {
                    let justified = uses.contains { block.lines.contains($0.line) && $0.row.since[platform]! == nil }
                    #expect(justified, "\(file): `#if \(block.condition)` leaves out \(platform), which has every API it holds")
                }
            }
        }
    }

    /// Swift warns that an `#available` check at or below the deployment floor is unnecessary: every
    /// version the Apple layer checks for is above the package's floor for that platform.
    @Test func noAvailabilityCheckAtOrBelowTheFloors() throws {
        let floors = ["iOS": 16.0, "macOS": 13.0, "tvOS": 16.0, "watchOS": 9.0, "visionOS": 1.0]
        let folder = packageRoot.appending(path: "Sources/PurchaseLedgerStoreKit/Apple")
        var checked = 0
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: folder.appending(path: file), encoding: .utf8)
            for line in text.split(separator: "\n") where line.contains("#available(") && !line.trimmingCharacters(in: .whitespaces).hasPrefix("//") {
                let list = line.split(separator: "#available(")[1].prefix { $0 != ")" }
                for entry in list.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where entry != "*" {
                    let parts = entry.split(separator: " ")
                    guard parts.count == 2, let floor = floors[String(parts[0])], let version = Double(parts[1]) else {
                        Issue.record("\(file): an availability entry this test cannot read: \(entry)")
                        continue
                    }
                    checked += 1
                    #expect(version > floor, "\(file): `#available(... \(entry) ...)` is at or below the \(parts[0]) floor \(floor): unnecessary")
                }
            }
        }
        #expect(checked > 0)
    }

    @Test func offerTypesAreReadByValue() {
        // StoreKit 2's Transaction.OfferType raw values, as the App Store Server API numbers them.
        #expect(OfferType(storeKit2RawValue: 1) == .introductory)
        #expect(OfferType(storeKit2RawValue: 2) == .promotional)
        #expect(OfferType(storeKit2RawValue: 3) == .code)
        #expect(OfferType(storeKit2RawValue: 4) == .winBack)
        #expect(OfferType(storeKit2RawValue: 0) == nil)
        #expect(OfferType(storeKit2RawValue: 5) == nil)
    }

    @Test func theStorefrontFallsBackToTheOlderField() {
        #expect(StoreKit2TransactionValue.storefront(current: "USA", older: "USA") == "USA")
        #expect(StoreKit2TransactionValue.storefront(current: nil, older: "FRA") == "FRA")
        #expect(StoreKit2TransactionValue.storefront(current: "DEU", older: nil) == "DEU")
        #expect(StoreKit2TransactionValue.storefront(current: nil, older: nil) == nil)
    }
}
