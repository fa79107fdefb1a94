"""The state dir `<root>/.sandbox-agent/`: sessions and audit live here, hidden from the sandbox.

It is created on the host before a container starts (so it is covered from the first call),
private (0700), with a `.gitignore` of `*` so it never lands in the user's commits.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from executor.errors import ConfigError, SessionError

STATE_DIR = ".sandbox-agent"
"""Name of the state dir under the project root."""


def private_dir(path: Path) -> Path:
    """Create `path` (mode 0700) or check an existing one: a real directory owned by us."""
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise SessionError(f"cannot create {path}: {exc.strerror}") from exc
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):  # a symlink here could redirect sessions and audit
        raise SessionError(f"{path} is not a directory", fix=f"remove it: rm {path}")
    if info.st_uid != os.geteuid():
        raise SessionError(
            f"{path} is owned by uid {info.st_uid}, not by you", fix=f"chown -R $(id -u) {path}"
        )
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)  # mkdir's mode is filtered by the umask
    return path


def ensure_state_dir(root: Path) -> Path:
    """`<root>/.sandbox-agent/`, created private (0700) with a `.gitignore` of `*`.

    Raises ConfigError for a missing root, SessionError when the directory cannot be created
    or is not safe to use (a symlink, or owned by another user).
    """
    root = Path(root)
    if not root.is_dir():
        raise ConfigError(f"project root {root} is not a directory", fix="pass an existing --root")
    state = private_dir(root / STATE_DIR)
    try:
        fd = os.open(state / ".gitignore", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return state  # an existing .gitignore may have been tuned by the user: keep it
    except OSError as exc:
        raise SessionError(f"cannot create {state / '.gitignore'}: {exc.strerror}") from exc
    with os.fdopen(fd, "w") as out:
        out.write("*\n")
    return state
