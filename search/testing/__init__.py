"""Helpers for tests and examples (small synthetic models); not part of the public API."""
