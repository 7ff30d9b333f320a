"""Alert delivery: exactly once per channel through keyed delivery records (the ledger)."""
