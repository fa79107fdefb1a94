"""Audit exports beyond JSON lines and CSV: OCSF events (`ocsf`) and the HTML report (`report`).

Each reads the records `executor.audit.read_records` yields, in chain order, one at a time,
and keeps what a reader needs to trust them: OCSF events carry each record's `seq`, `prev` and
`hash`; the report shows the chain's verification at its top. OpenTelemetry traces come from
the hook bus instead (executor/telemetry.py). Formats are versioned in docs/AUDIT.md.
"""
