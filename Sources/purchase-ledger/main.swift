import Foundation
import PurchaseLedgerCLI

exit(await PurchaseLedgerCLI.main(Array(CommandLine.arguments.dropFirst())))
