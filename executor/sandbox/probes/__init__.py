"""Security probes: the attacks the tests use, run against the engine and runtime configured here.

`sandbox-agent doctor --security` runs them in a throwaway project with real containers, so that
a security team can check docs/SECURITY.md's guarantees on *their* engine, runtime and kernel:

    paths          `..`, absolute paths and symlinks never reach a file next to the root
    read-only      with --read-only a write fails in the kernel and no byte changes
    network        a listener on the host's loopback is never reached; no interface but lo
    egress         with hosts allowed: only those are reached, through the proxy; a denied
                   host and a private address behind an allowed name are refused; no raw TCP
                   and no DNS of the sandbox's own
    capabilities   no capability in any set; no-new-privileges; chown refused
    set-id         chmod/open/mknod with a set-id bit are refused (checked inside and on the host)
    unix socket    a server on a unix socket in the project gets no connection
    namespaces     `unshare -U -r` and unshare(CLONE_NEWUSER) are refused (fork still works)
    state dir      the real state dir and an in-tree legacy one are out of reach
    .git           every .git (nested too) is read-only
    disk budget    a command writing past the disk budget is stopped; the file stays under it
    toolbox        a reply a command writes into the toolbox's stdout is never its answer
    limits         the process and memory limits hold and the sandbox stays usable

Each probe passes only on evidence: what the host sees (files, modes, connections) and what
the command inside reports. A probe that cannot run fails, and so does one whose refusal would
prove nothing: the write probes first check that the sandbox can write the project at all.
A probe whose guarantee held at a cost the person should know of (under gVisor a runaway takes
the whole sandbox down, which is then started again) passes with a warning that says so.

The package's rooms: lab.py (the throwaway project, the sandboxes on it, the host's servers),
attacks.py (one function a probe); this face holds the list, the runner and the notes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from executor.errors import SandboxAgentError
from executor.sandbox.config import SandboxConfig
from executor.sandbox.probes.attacks import (
    probe_capabilities,
    probe_disk_budget,
    probe_egress,
    probe_git,
    probe_limits,
    probe_namespaces,
    probe_network,
    probe_paths,
    probe_read_only,
    probe_set_id,
    probe_state_dir,
    probe_toolbox,
    probe_unix_socket,
)
from executor.sandbox.probes.lab import Breach, Caveat, Factory, Lab, inert
from executor.state import private_dir, replacing
from executor.text import inert_line

__all__ = ["PROBES", "Notes", "Probe", "ProbeResult", "noted", "run_probes"]


class ProbeResult(BaseModel):
    """One probe's verdict."""

    name: str
    """Short name (`network`)."""
    guarantee: str
    """What must hold."""
    passed: bool
    """Whether it held."""
    warning: bool = False
    """It held, at a cost `detail` names (the sandbox went down and was started again)."""
    detail: str
    """The evidence, inert (no control characters)."""


@dataclass(frozen=True)
class Probe:
    """One attack and the check of what it achieved."""

    name: str
    guarantee: str
    run: Callable[[Lab], str]
    """Returns the evidence it held; raises Breach with the evidence it did not."""


PROBES = (
    Probe("paths", "nothing outside the project root is reachable (.., absolute, symlinks)",
          probe_paths),
    Probe("read-only", "--read-only: writes fail in the kernel (EROFS), no byte changes",
          probe_read_only),
    Probe("network", "no network: the host's loopback is out of reach", probe_network),
    Probe("egress", "allowed hosts only, through the proxy; private addresses refused",
          probe_egress),
    Probe("capabilities", "no capabilities, no-new-privileges", probe_capabilities),
    Probe("set-id", "no set-id file can be made (so none reaches the host)", probe_set_id),
    Probe("unix socket", "unix sockets in the project are out of reach", probe_unix_socket),
    Probe("namespaces", "no command can make a namespace (no uid 0, no capabilities in one)",
          probe_namespaces),
    Probe("state dir", "sessions and audit are out of the container's reach", probe_state_dir),
    Probe(".git", "every .git under the root is read-only", probe_git),
    Probe("disk budget", "a command cannot grow the project past the disk budget",
          probe_disk_budget),
    Probe("toolbox", "a command cannot answer in the toolbox's place", probe_toolbox),
    Probe("limits", "process and memory limits hold; the sandbox stays usable", probe_limits),
)
"""Every probe, in the order they run."""


def run_probes(template: SandboxConfig, factory: Factory, *, only: list[str] | None = None,
               progress: Callable[[ProbeResult], None] | None = None) -> list[ProbeResult]:
    """Run the probes (or those named in `only`) in one throwaway lab; every one gets a verdict."""
    chosen = [p for p in PROBES if not only or p.name in only]
    results = []
    with Lab(template, factory) as lab:
        lab.box()  # a sandbox that does not start is an error of its own, not ten failed probes
        for probe in chosen:
            result = _verdict(probe, lab)
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def _verdict(probe: Probe, lab: Lab) -> ProbeResult:
    warning = False
    try:
        passed, detail = True, probe.run(lab)
    except Caveat as exc:
        passed, warning, detail = True, True, str(exc)
    except Breach as exc:
        passed, detail = False, str(exc)
    except (SandboxAgentError, OSError) as exc:
        passed, detail = False, f"could not run: {exc}"
    return ProbeResult(name=probe.name, guarantee=probe.guarantee, passed=passed,
                       warning=warning, detail=inert(detail, 320))


class Notes(logging.Handler):
    """What the sandboxes said while the probes ran (restarts, dropped toolbox lines): kept
    for a log file, off the terminal, where they would read as the probes' own verdicts."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def note(self, message: str) -> None:
        """A sandbox's warning (its `warn` callback)."""
        self.lines.append(f"{time.strftime('%H:%M:%S')} sandbox: {inert_line(message)}")

    def emit(self, record: logging.LogRecord) -> None:
        self.note(f"{record.name}: {record.getMessage()}")

    def save(self, path: Path) -> None:
        """Write the lines to `path` (replaced, never through a link; 0600)."""
        private_dir(path.parent, parents=True)
        with replacing(path) as out:
            out.write("".join(line + "\n" for line in self.lines))


@contextlib.contextmanager
def noted() -> Iterator[Notes]:
    """Notes of what the sandboxes and the library's loggers say meanwhile (not on stderr)."""
    notes, logger = Notes(), logging.getLogger("executor")
    logger.addHandler(notes)
    propagate, logger.propagate = logger.propagate, False  # not to the CLI's terminal lines
    try:
        yield notes
    finally:
        logger.removeHandler(notes)
        logger.propagate = propagate

