"""Layer 0: errors, status enums and transition tables, records, clock and ids, trace.

Imports nothing else from ``runtime``; every other layer builds on it.
"""
