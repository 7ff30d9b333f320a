"""Helpers shared by unit tests in several folders (not tests themselves)."""
