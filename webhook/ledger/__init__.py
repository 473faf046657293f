"""The ledger wing: who holds what quota, recorded in memory or in QuotaLedger objects."""
