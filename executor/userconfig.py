"""The person's own config file: `~/.config/sandbox-agent/config.toml` (XDG; see state.py).

It sets defaults for the knobs of `Settings` (provider, host, model, timeouts, limits ...),
one `key = value` a line, keys named like the fields (`max_turns = 30`) or like their
variables without the prefix in any case. Precedence: flags > `SANDBOX_AGENT_*` > this file >
built-in defaults.

Only the person's config dir is ever read, never anything in a project tree: a repository
cannot change which server a run talks to or which image it runs. The file is opened without
following links, must be a regular file the person owns, and is validated: an unknown key or a
bad value is one `ConfigError` naming the file and the line.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from executor.errors import ConfigError
from executor.state import check_outside, config_home, open_private, real_root, too_wide

CONFIG_FILE = "config.toml"
MAX_BYTES = 1 << 20
"""A config file larger than this is refused (it is a handful of lines)."""
_POSITION = re.compile(r"\(at line (\d+), column \d+\)")


def user_config_path() -> Path:
    """`$SANDBOX_AGENT_CONFIG_DIR/config.toml`, else `$XDG_CONFIG_HOME/sandbox-agent/...`."""
    return config_home() / CONFIG_FILE


def _fix(path: Path) -> str:
    return f"edit {path} (keys and values: docs/CONFIGURATION.md, or `sandbox-agent --help`)"


def key_line(text: str, key: str) -> int | None:
    """The 1-based line where `key` is assigned (tomllib keeps no positions)."""
    pattern = re.compile(rf"^[ \t]*[\"']?{re.escape(key)}[\"']?[ \t]*=", re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else None


def where(path: Path, line: int | None) -> str:
    """`path:line`, or the path alone when the line is not known."""
    return f"{path}:{line}" if line else str(path)


def _read_text(path: Path) -> str | None:
    """The file's text; None when it does not exist. ConfigError when it cannot be used."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", fix=_fix(path)) from None
    with os.fdopen(fd, "rb") as stream:
        data = stream.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise ConfigError(f"{path} is larger than {MAX_BYTES} bytes", fix=_fix(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason})", fix=_fix(path)) from None


def _parse(path: Path, text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        match = _POSITION.search(str(exc))
        line = int(match.group(1)) if match else None
        reason = _POSITION.sub("", str(exc)).strip()
        raise ConfigError(f"{where(path, line)}: invalid TOML: {reason}", fix=_fix(path)) from None


def read_user_config(fields: Iterable[str]) -> tuple[dict[str, Any], dict[str, int | None]]:
    """(values by field name, line of each) from the user config; empty when there is none.

    An unknown key is a ConfigError naming the file, the line and the known keys.
    """
    path = user_config_path()
    text = _read_text(path)
    if text is None:
        return {}, {}
    known = set(fields)
    values: dict[str, Any] = {}
    lines: dict[str, int | None] = {}
    for key, value in _parse(path, text).items():
        name = key.lower().removeprefix("sandbox_agent_").replace("-", "_")
        if isinstance(value, dict):
            raise ConfigError(
                f"{where(path, section_line(text, key))}: unknown section [{key}]: the file "
                "has no sections, only `key = value` lines", fix=_fix(path))
        line = key_line(text, key)
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.7)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(f"{where(path, line)}: unknown key {key!r}",
                              fix=f"{hint}use one of: {', '.join(sorted(known))}")
        values[name], lines[name] = value, line
    return values, lines


def section_line(text: str, key: str) -> int | None:
    """The 1-based line of the `[key]` (or `[key.sub]`, `[[key]]`) header."""
    pattern = re.compile(rf"^[ \t]*\[\[?[ \t]*[\"']?{re.escape(key)}[\"']?[ \t]*[.\]]",
                         re.MULTILINE)
    match = pattern.search(text)
    return text.count("\n", 0, match.start()) + 1 if match else key_line(text, key)


def check_outside_project(root: Path, *, writable: bool = True) -> None:
    """ConfigError when the user config lies inside the project `root` (dotfiles kept in a
    repository, a config dir linked into it, `--root ~`): the sandbox could rewrite it between
    runs. A run that can write the tree is refused when the config *dir* is in it, even
    empty: a session could plant `config.toml` or `policy.toml` that later runs obey. A copy
    workspace may run: `apply` and `undo` never write into the config dir (apply._reserved)."""
    path = user_config_path()
    if path.is_file():
        check_outside(real_root(root), path, "your config file")
    if writable:
        try:
            check_outside(real_root(root), path.parent, "your config dir")
        except ConfigError as exc:
            raise ConfigError(
                exc.message + " (a session could plant config.toml or policy.toml there)",
                fix=too_wide(root) or "set SANDBOX_AGENT_CONFIG_DIR to a directory outside "
                    "the project, or run with --read-only, or with --workspace copy (whose "
                    "`apply` never writes into your config dir)") from None
