"""Audit exports beyond JSON lines and CSV: OCSF events, the HTML report, OpenTelemetry traces.

Each format is a small module reading the records `executor.audit.read_records` yields, one at
a time (a large log streams), and keeping the chain's `seq`, `prev` and `hash` so a consumer can
still check what it got. Formats are versioned in docs/AUDIT.md.
"""
