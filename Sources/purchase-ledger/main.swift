import Foundation
import PurchaseLedgerCLI

exit(PurchaseLedgerCLI.main(Array(CommandLine.arguments.dropFirst())))
