"""Every cap, budget and timing the toolbox works with, in one place."""

from __future__ import annotations

import re
import stat

TYPE_CHECKING = False  # typing is not imported at run time: the toolbox starts fast
if TYPE_CHECKING:  # names for the type checker only (annotations are never evaluated)
    pass

BINARY_SNIFF = 8192
READ_BUFFER = 1 << 16  # read_file's buffer: the first read fills it, BINARY_SNIFF included
ABSENT = "absent"  # expect_sha256 of a file that did not exist when the write was approved
FAILS = "fails"  # expect_sha256_after of a call whose preview said it would fail
PREVIEW_MAX_BYTES = 4 * 1024 * 1024  # a bigger file is described, not diffed
NOT_TEXT = "binary or not UTF-8"
READ_MAX_LINES = 2000
READ_MAX_CHARS = 100_000
LINE_MAX_CHARS = 2000
LINE_MAX_BYTES = 4 * LINE_MAX_CHARS
COUNT_BUDGET = 256 * 1024 * 1024  # bytes scanned to tell "of N lines"; beyond that N is unknown
LIST_MAX_ENTRIES = 1000
LIST_DEPTH, LIST_GLOB_DEPTH = 3, 20
SEARCH_LIMIT = 1000
SEARCH_MAX_CHARS = 100_000
SEARCH_COLUMNS = 500
SEARCH_FILES_SHOWN = 30  # a search without matches lists the regular files it searched, up to this
FALLBACK_MAX_BYTES = 16 * 1024 * 1024  # the Python scan holds a file whole (and its text)
TIMED_OUT = "the search hit its time limit"
OUTPUT_HARD_LIMIT = 20 * 1024 * 1024
DIFF_MAX_LINES = 5000  # a preview of more changed lines than this is described, not diffed
COUNT_EXACT_LINES = 400  # lines_changed of a bigger change is a multiset count (difflib is cubic)
_HUNK = re.compile(r"([-+])(\d+)")  # the line numbers of a hunk header, shifted by the trim
CHUNK = 65536
DRAIN_SECONDS = 0.5
SWEEP_SECONDS = 3.0
SETTLE_SECONDS = 1.0  # how long kill(-1) is repeated while a process is still listed
TOKEN_VAR = "SANDBOX_TOOLBOX_TOKEN"
# Makes the command, not the toolbox, the OOM killer's first choice, then runs it. A shell
# prelude, because preexec_fn costs a full fork plus Python in the child (~5 ms a call).
COMMAND_PATH_VAR = "SANDBOX_AGENT_COMMAND_PATH"
"""Directories put before PATH for the commands a call runs, and for nothing else: the package
volume's `bin` directories are the sandbox's to write, so the programs of ours (PID 1, this
toolbox, the kill script, the extractor, rg) are never looked up there (red-team round 26)."""
SHELL_PRELUDE = '{ echo 1000 > /proc/self/oom_score_adj; } 2>/dev/null; exec /bin/sh -c "$1"'
LONG_LINE_MARK = " [... omitted end of long line]"  # what `rg --max-columns-preview` prints
TRACK_MAX_ENTRIES = 200_000  # a walk stops here and says changes_incomplete
GIT_SCAN_MAX_ENTRIES = 5_000_000  # names looked at for new repositories past such a walk
CHANGES_MAX = 500  # entries of meta["changes"] / meta["outside_changes"]
HASH_FILE_MAX = 64 * 1024 * 1024  # bigger files are compared by size and mtime only
HASH_WALK_MAX = 512 * 1024 * 1024  # bytes hashed per walk at most
QUARANTINE = ".git.quarantined-"  # what a .git made in the sandbox is renamed to
SETID = stat.S_ISUID | stat.S_ISGID
DISK_POLL_SECONDS = 0.1
DISK_WALK_GAP = 0.3  # seconds at least between two walks measuring the project during a command
DISK_STEP = 1024 * 1024  # growth between walks confirming the disk budget, when already over
PROGRESS_SECONDS = 0.2  # at most one progress line a stream this often
HANGUP_SECONDS = 0.2
"""How often a running command checks that the host still holds its end of the requests."""
EXIT_ORPHANED = 75
"""The toolbox's exit status when its controller went away mid-command: PID 1 (boot/init.py)
then ends the container, and the kernel kills whatever is left in its pid namespace."""
PROGRESS_CHARS = 4096  # newest characters of a stream one progress line carries
PROGRESS_TOTAL = 4 * 1024 * 1024  # characters of progress a call sends at most
ENTRY_BUDGET = 100_000  # new files and directories a session may add (inodes, not only bytes)
ENTRY_STEP = 5_000  # inode growth on the file system that makes the watch count the project
MIN_FREE = 256 * 1024 * 1024
SHOW_MAX_LINES, SHOW_MAX_CHARS = 120, 6000  # a failed edit shows a file this small in full
CLOSEST_MAX_LINES = 5000  # a failed edit looks for the closest line in files this long
CLOSEST_MAX_CHARS = 500  # among lines this long, for a line this long
SYNTAX_MAX_BYTES = 1024 * 1024  # an edit of a .py file this big or smaller must keep it compiling
_NAME = re.compile(r"\b[A-Za-z_]\w{2,}\b")  # a name an edit may rename
