"""Audit exports beyond JSON lines and CSV: OCSF events (`ocsf`) and the HTML report (`report`).

Each reads the records `executor.audit.read_records` yields, in chain order, one at a time,
and keeps what a reader needs to trust them: OCSF events carry each record's `seq`, `prev` and
`hash`; the report shows the chain's verification at its top. OpenTelemetry traces come from
the hook bus instead (executor/telemetry.py). Formats are versioned in docs/AUDIT.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def run_ended(record: Mapping[str, Any]) -> str:
    """`ok after 4 turn(s)`, or `error before the model answered` (a run_end without turns)."""
    turns = record.get("turns")
    if isinstance(turns, int) and not isinstance(turns, bool):
        return f"{record.get('status')} after {turns} turn(s)"
    return f"{record.get('status')} before the model answered"
