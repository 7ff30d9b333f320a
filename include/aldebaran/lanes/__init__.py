"""Alert lanes besides the exact auditor (issue 19: the real-time-mode lane)."""
