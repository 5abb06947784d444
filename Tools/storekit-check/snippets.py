"""Writes the StoreKit snippets of the given Markdown files as Swift files for storekit-check.sh.

A block that declares a type at its top level (`@main struct BooksApp: App`) stays at file scope;
any other is the body of a function of its own (statements, `try` and `await` as in an app's
code). README.md gives only its "In an iOS or macOS app" section; a DocC article or
docs/storekit.md, every block.
The prelude declares the names the blocks take from the text around them.
"""
import os
import re
import sys

PRELUDE = '''import Foundation
import PurchaseLedger
import PurchaseLedgerStoreKit
import StoreKit
import BackgroundAssets
import SwiftUI
import UIKit

// What the snippets take from their surroundings: a product, a transaction and its download, the
// app's documents folder, an asset pack, the view of the guide's app, and for docs/storekit.md's
// store pages, the app's recorder, a view controller that presents a sheet and a window scene.
@MainActor let product = SKProduct()
@MainActor let transaction = SKPaymentTransaction()
@MainActor let download = SKDownload()
let documents = URL(fileURLWithPath: NSTemporaryDirectory())
let pack = AssetPack(id: "levels", version: 1)
struct ContentView: View {
    var body: EmptyView { EmptyView() }
}
let recorder = StoreKitRecorder(ledger: try! Ledger(path: NSTemporaryDirectory() + "/snippets.ledger"))
@MainActor let viewController = UIViewController()
@MainActor let scene = UIWindowScene()

// Foundation has it on Apple platforms (iOS 16, macOS 13, tvOS 16, watchOS 9); Linux's has not.
extension URL {
    static var applicationSupportDirectory: URL { URL(fileURLWithPath: NSTemporaryDirectory()) }
}
'''

IMPORTS = "import Foundation\nimport PurchaseLedger\nimport PurchaseLedgerStoreKit\nimport StoreKit\nimport BackgroundAssets\nimport SwiftUI\nimport UIKit\n"


def blocks(path):
    text = open(path, encoding="utf-8").read()
    if os.path.basename(path) == "README.md":
        start = text.index("### In an iOS or macOS app")
        end = text.find("\n## ", start)
        text = text[start:end if end >= 0 else len(text)]
    return re.findall(r"```swift\n(.*?)```", text, re.S)


def main():
    out, paths = sys.argv[1], sys.argv[2:]
    with open(os.path.join(out, "prelude.swift"), "w") as f:
        f.write(PRELUDE)
    n = 0
    for path in paths:
        for block in blocks(path):
            n += 1
            # Its imports are the file's (the file imports every module a snippet may name).
            block = "".join(line for line in block.splitlines(True) if not line.startswith("import "))
            declares = re.search(r"^(@main|struct |final class |class |enum |extension )", block, re.M)
            body = block if declares else "@MainActor\nfunc snippet%d() async throws {\n%s}\n" % (n, block)
            with open(os.path.join(out, "snippet-%02d.swift" % n), "w") as f:
                f.write("// %s, block %d\n%s\n%s" % (path, n, IMPORTS, body))
    if n == 0:
        sys.exit("storekit-check: no snippet found in " + " ".join(paths))


main()
