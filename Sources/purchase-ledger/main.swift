print("purchase-ledger")
