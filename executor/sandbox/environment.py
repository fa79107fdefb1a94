"""Which host environment variables may enter the container: only allow-listed ones."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping


def sandbox_environment(
    allow: Iterable[str],
    *,
    secret_names: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The allow-listed variables that are set on the host, minus model credentials.

    `secret_names` (the model's API-key variable) never enter, even when allow-listed.
    """
    source = os.environ if environ is None else environ
    blocked = set(secret_names)
    return {name: source[name] for name in allow if name in source and name not in blocked}
