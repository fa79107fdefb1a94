"""Settings from argv plus what the toolbox learned when it started (`Context`)."""

from __future__ import annotations

import os

from .guards.disk import Disk
from .procs import _alone_in_our_container, _ancestors, _which
from .tracking import Tracker, _mount_table

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    from collections.abc import Callable

    from .options import Options
    from .procs import _Progress
    pass



# -- settings ---------------------------------------------------------------------------------


class Context:
    """Settings from argv plus what the toolbox learned when it started."""

    def __init__(self, opts: Options) -> None:
        self.root = os.path.realpath(opts.root)
        self.roots = {self.root, os.path.abspath(opts.root)}  # as resolved and as given
        self.default_timeout = opts.default_timeout
        self.max_output = opts.max_output
        self.hidden = frozenset(opts.hidden or [".sandbox-agent"])
        self.readonly = frozenset(opts.readonly_dir or [])
        self.readonly_folded = frozenset(name.lower() for name in self.readonly)
        no_rg = opts.no_rg or os.environ.get("TOOLBOX_NO_RG") == "1"
        self.rg = None if no_rg else _which("rg")
        self.token = os.urandom(8).hex()
        self.broad_sweep = opts.kill_strays or os.getpid() == 1 or os.getppid() == 0
        self.kill_all = self.broad_sweep and _alone_in_our_container()  # read once, not per call
        self.keep = frozenset([os.getpid(), 1, *_ancestors()])
        self.pids_events = _cgroup_file("pids", ["pids.events"])
        self.memory_events = _cgroup_file("memory", ["memory.events", "memory.oom_control"])
        self.git_guard = opts.git_guard
        self.mounts = _mount_table(self.root)  # the protected mounts, where they belong
        self.tracker = None if opts.no_track else Tracker(self)  # its first walk comes later
        self.baseline: int | None = None
        """When a copy had arrived, before any tool ran (ns; the `baseline` host operation)."""
        self.disk = None if opts.no_track else Disk(opts.disk_budget, opts.min_free)
        self.fsize_limit = _fsize_limit()
        self.progress: _Progress | None = None  # the served request's, if it asked for progress
        self.guarded = False  # whether the toolbox made itself non-dumpable (main sets it)
        self.channel = "stdio"  # where requests come from (main sets it)
        self.hangup: Callable[[], bool] = lambda: False
        """Whether the host's end of the requests is gone (main sets it: `_hangup_watch`)."""
        self.orphaned = False  # a command was stopped because the host went away


def _fsize_limit() -> int | None:
    """RLIMIT_FSIZE in bytes (the host sets it to the disk budget), or None."""
    try:
        import resource  # Unix only
    except ImportError:
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _cgroup_file(controller: str, names: list[str]) -> str | None:
    """Our cgroup's file for a controller (v1 or v2, with or without a cgroup namespace)."""
    dirs: list[str] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controller in controllers.split(","):
                    dirs += [f"/sys/fs/cgroup/{controller}{path}", f"/sys/fs/cgroup/{controller}"]
                elif not controllers:
                    dirs += [f"/sys/fs/cgroup{path}", f"/sys/fs/cgroup/unified{path}"]
    except (OSError, ValueError):
        return None
    for directory in [*dirs, "/sys/fs/cgroup"]:
        for name in names:
            if os.path.isfile(os.path.join(directory, name)):
                return os.path.join(directory, name)
    return None
