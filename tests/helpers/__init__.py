"""Helpers shared by the tests: checkpoint factories, references, data. No tests live here."""
