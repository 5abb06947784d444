package import PurchaseLedger

/// Splits one workload (the shared generator's: every user in one log) into per-device logs, as a
/// fleet would hold them: each user's transactions on their device, a quarter of the users with a
/// second device that gets some of their purchases and restore sessions. The catalog goes to every
/// device; downloads follow their transaction; standalone content follows its URL. For the fleet
/// tests and benchmark: stable across runs (no random seeds, no Swift hash values).
package enum DeviceSplit {
    package static func split(_ events: [Event], devices: Int) -> [[Event]] {
        var logs = Array(repeating: [Event](), count: devices)
        var transactionDevice: [String: Int] = [:]
        var downloadDevice: [String: Int] = [:]
        var productDevice: [String: Int] = [:]
        var restoreDevice = 0
        var restores = 0
        var transactionProduct: [String: String] = [:]
        var downloadProduct: [String: String] = [:]

        func devicesOf(_ user: String?) -> [Int] {
            let h = Identifier.stableHash(user ?? "")
            let first = Int(h % UInt64(devices))
            return h / UInt64(devices) % 4 == 0 && devices > 1 ? [first, (first + 1) % devices] : [first]
        }
        func deviceFor(transaction: String, user: String?) -> Int {
            if let known = transactionDevice[transaction] { return known }
            let choices = devicesOf(user)
            let device = choices[Int(Identifier.stableHash(transaction) % UInt64(choices.count))]
            transactionDevice[transaction] = device
            return device
        }
        func own(_ downloads: [DownloadSpec]?, _ device: Int, transaction: String) {
            for d in downloads ?? [] {
                downloadDevice[d.download] = device
                downloadProduct[d.download] = transactionProduct[transaction]
            }
        }

        for event in events {
            let device: Int?
            switch event.body {
            case .productRegistered, .contentVersionPublished, .assetPackPublished, .storePaymentPromoted:
                device = nil
            case .personalDataErased:
                // A ledger's own record of an erasure: never input.
                continue
            case .appleTransactionReceived, .appleNotificationReceived, .appleHistoryCompleted:
                // Apple's record goes to every device of its user: not split.
                device = nil
            case .paymentQueued(let t, let product, _, let user):
                transactionProduct[t] = product
                device = deviceFor(transaction: t, user: user)
            case .transactionPurchased(let t, let product, let user, _, let downloads, _):
                if let product { transactionProduct[t] = product }
                device = deviceFor(transaction: t, user: user)
                own(downloads, device!, transaction: t)
            case .transactionRestored(let t, _, let product, _, _, let downloads, _):
                transactionProduct[t] = product
                transactionDevice[t] = restoreDevice
                device = restoreDevice
                own(downloads, restoreDevice, transaction: t)
            case .transactionDeferred(let t), .transactionFailed(let t, _), .transactionRevoked(let t, _, _), .transactionFinished(let t, _):
                device = deviceFor(transaction: t, user: nil)
            case .downloadStarted(let d), .downloadProgressed(let d, _, _, _), .downloadPaused(let d), .downloadResumed(let d),
                .downloadCancelled(let d, _), .downloadFinished(let d, _), .downloadFailed(let d, _):
                device = downloadDevice[d] ?? Int(Identifier.stableHash(d) % UInt64(devices))
            case .contentCopiedOut(let d, _, _, _):
                device = downloadDevice[d] ?? Int(Identifier.stableHash(d) % UInt64(devices))
                // contentDeleted names a product: it goes where that product's content was copied last.
                if let product = downloadProduct[d] { productDevice[product] = device }
            case .contentDeleted(let product):
                device = productDevice[product] ?? Int(Identifier.stableHash(product) % UInt64(devices))
            case .restoreStarted(let user):
                let choices = devicesOf(user)
                // Each restore session on one of the user's devices, not always the same one.
                restores += 1
                restoreDevice = choices[Int(Identifier.stableHash((user ?? "") + String(restores)) % UInt64(choices.count))]
                device = restoreDevice
            case .restoreCompleted, .restoreFailed:
                device = restoreDevice
            case .contentRegistered(let url, let d, _):
                let chosen = downloadDevice[d] ?? Int(Identifier.stableHash(url) % UInt64(devices))
                downloadDevice[d] = chosen
                device = chosen
            case .assetPackBegan(let pack, _), .assetPackProgressed(let pack, _, _), .assetPackPaused(let pack, _), .assetPackFinished(let pack, _),
                .assetPackFailed(let pack, _, _), .assetPackRemoved(let pack), .assetPackOpened(let pack, _):
                // Every device downloads the packs it uses: a pack's events go to one device each.
                device = Int(Identifier.stableHash(pack) % UInt64(devices))
            case .storeProductViewPresented(let view, _, _, _, _, _), .storeProductViewLoaded(let view), .storeProductViewFailed(let view, _),
                .storeProductViewDismissed(let view):
                // A presentation and what followed it happen on one device.
                device = Int(Identifier.stableHash(view) % UInt64(devices))
            }
            if let device {
                logs[device].append(event)
            } else {
                for i in logs.indices { logs[i].append(event) }
            }
        }
        return logs
    }
}
