"""Importers turn published results from elsewhere into ledger events.

An importer never writes a number it cannot trace to a file: each event carries the release it came
from in its idempotency key, and everything it could not map is reported, not dropped silently.
"""
