"""sandbox-agent toolbox: the six built-in tools, served as JSON lines over stdin/stdout.

A stdlib-only package that runs on python3 >= 3.9, inside the session's container (the host
sends it as one bundle of compiled modules: executor/sandbox/boot/bootstrap.py) or directly:
`python3 -m executor.toolbox --root DIR`. Its rooms: contract (the tools' arguments),
records (what replies' meta holds), wire (requests and replies), limits, options and context,
paths, tools/ (one module a tool), tracking, guards/ (git, setid, disk), procs, host_ops,
server, channel, confine, __main__; gitshape and nofollow are rules the host imports too
(executor/gitsafety/).
Every tool semantic (path checks, caps, timeouts) lives here; the host only relays.

Protocol (version 1)
    argv      --root PATH (/workspace)  --default-timeout S (60)  --max-output BYTES (30000)
              --hidden NAME (repeatable; default .sandbox-agent)  --readonly-dir NAME (repeatable)
              --no-rg (or env TOOLBOX_NO_RG=1: force the Python search)  --kill-strays (see below)
              --disk-budget BYTES (0: off)  --min-free BYTES (256 MiB)  --git-guard
              --no-track (no change tracking, set-id sweep, .git quarantine or disk budget:
              for measurements only)
              --seccomp-filter B64 (see "Seccomp" below)
              --sign: the first stdin line after the source is a hex key; every line we write
              is then `<first 32 hex of HMAC-SHA256(key, line)> <line>`
              --channel DIR (with --sign): DIR holds two FIFOs the host made and holds open,
              `in` and `out`. Opened, we say {"channel": "fifo"} on stdout and then read
              requests from `in` and write every other line to `out`, leaving the engine's
              stream relay (see "channel" in the code); else we stay on stdin/stdout
    start     {"ready": true, "pid": N, "version": 1, "guarded": bool, "python": "3.x.y",
              "rg": bool, "filter": "installed" | "not given" | why not, "root": {...},
              "channel": "fifo" | "stdio" | "stdio: why not fifo"}
              ("guarded": whether the toolbox made itself non-dumpable; "rg" is whether
              search_files will use ripgrep; "root": {"dev", "ino", "mtime_ns"} of --root, so
              the host can tell whether the engine mounted the directory it meant (another
              machine's disk is not it), null when it cannot be read)
    request   {"id": int, "tool": "name", "args": {...}}   one line
              (+ "progress": true: stream a running command's output, see below)
    response  {"id": same, "ok": bool, "output": "text for the model", "meta": {"duration_ms": ..}}
    progress  only when the request asked for it, and only for run_shell_command: before its
              response, lines {"id": same, "progress": {"stream": "stdout"|"stderr", "text": str,
              "dropped": int}} with what the command wrote since the previous one (decoded as
              UTF-8, bad bytes replaced). At most one line a stream every 0.2 s, each with at
              most the newest 4096 characters ("dropped": how many older ones were skipped), and
              4 MiB of text a call; then nothing more until the response, which has the output
              as always. A line with "progress" is never a response.
              A line that is not JSON, not an object or has no string "tool" gets ok false and
              "bad request: ..."; its id is echoed when the object had one, else null.
    special   ping -> "pong"; shutdown -> ok, then exit 0; EOF on stdin -> exit 0.
    preview   {"tool": "preview", "args": {"tool": "write_file"|"edit_file", "args": {...}}}
              -> ok, "output" the unified diff the call would make (new file: from /dev/null;
              binary, non-UTF-8 or over 4 MB: sizes and sha256 instead), "meta" {"path",
              "resolved" (real path relative to the root), "symlink", "exists", "binary",
              "sha256_before" (null: no file), "sha256_after" (of what the call would
              write; null on error), "error" (why the call would fail, or null)}.
              Same path checks as the call; writes nothing. For the host's approval prompt.
    approved  write_file and edit_file take "expect_sha256": the sha256_before the person was
              shown ("absent": no file). If the file is not that now, nothing is written:
              "... changed since it was approved; nothing was written". And
              "expect_sha256_after": the sha256_after shown; if the call would write other
              bytes, nothing is written: "... would not be written as it was shown ...".

Host operations (the host calls these; the model is never offered them)
    baseline    {} -> meta "kept": marks the moment a copy has arrived, before any tool ran:
                the coarse clock is waited on until it ticks, so every ctime the copy left is
                before the mark (false: the clock could not be read, or did not tick).
    manifest    {"since_baseline"} -> meta "entries": [[path, kind, mode, size, sha256,
                target], ...] for every entry under the root except hidden names and what is
                inside .git and .git.quarantined-* entries (listed in "skipped"); every regular
                file is hashed. With since_baseline and a baseline kept, an entry whose ctime
                is before its mark is named in "same" instead, unread.
                "complete" is false when the walk stopped at its entry limit.
    read_files  {"files": [[path, offset, length], ...]} -> meta "files": [{"path", "offset",
                "size", "data" (base64)} | {"path", "error"}]; at most 16 MiB a call. Paths are
                relative; no link is followed, in the last component or on the way.
    snapshot    {"path", "max_bytes"} -> meta {"resolved", "exists", "kind", "mode", "size",
                "sha256", "data" (base64, when not over max_bytes)}: the file a write_file or
                edit_file of that path would change, as it is now (the host keeps it for undo).

Caps and choices
    paths         relative to the root, or absolute inside it; symlinks are followed and must stay
                  inside. Hidden names are refused at the top level; writes anywhere under a
                  --readonly-dir name (nested .git dirs too) are refused, whether the name is in
                  the path as given, in the resolved path or in a symlink met on the way.
    read_file     2000 lines or 100,000 characters per call, lines cut at 2000 characters; a
                  binary file (NUL in its first 8 KB) is ok false with "binary file (N bytes)".
    search_files  max_results 1..1000 (default 100), output cut at 100,000 characters; ripgrep
                  searches hidden files but not .git or hidden names, and honours .gitignore;
                  the Python fallback does not read ignore files and skips files over 64 MB.
                  Results are sorted by path, then line.
    list_files    depth 3 by default (20 with a glob), 1000 entries; .git and hidden names skipped.
    run_shell     head 2/3 + tail 1/3 of --max-output per stream; a command writing more than
                  20 MB in total is killed. A call lasts until the command's output pipes close
                  (or the timeout): background jobs that keep them open hold the call. When a call
                  ends, everything it started is killed: background jobs do not survive a call.
                  ok = exit code 0, no timeout, no output overflow, and no fork refused at the
                  pids limit or process OOM-killed meanwhile (read from our cgroup's pids.events
                  and memory.events / memory.oom_control, when there are such files).
    writes        write_file / edit_file refuse a write that takes the project past the disk
                  budget, or the file system below --min-free (meta disk_budget_exceeded).

Change tracking (run_shell_command)
    index         rel path -> lstat (type, mode, size, mtime_ns, ctime_ns, ino, blocks), sha256 of
                  regular files, symlink targets. Built by the first command's before-walk (not
                  at start: starting stays fast). Walks do not enter .git or .git.quarantined-*
                  entries (they record them) and skip hidden top-level names. Re-walks lstat
                  everything and hash only what is new or changed: files up to 64 MiB each and
                  512 MiB a walk; others get sha256 null and "unhashed" (a reason), and count as
                  modified when size or mtime differ. A walk stops at 200,000 entries.
    meta          "changes": [{"path", "change": created|modified|deleted|mode|type,
                  "kind": file|dir|symlink|other, "sha256_before", "sha256_after", "size_before",
                  "size_after", "mode_before", "mode_after" ("0644"; null when absent),
                  "target" (symlinks), ["unhashed"]}] sorted by path, at most 500;
                  "changes_total", "changes_truncated", "changes_incomplete" (the walk stopped).
                  "outside_changes" (+ _total, _truncated), same shape, when the before-walk
                  found changes made between calls (by the person on the host); write_file and
                  edit_file update the index, so theirs are not among them.
                  "setid_cleared": [{"path", "removed": ["set-uid", "set-gid"], "mode_before",
                  "mode_after" | "error"}]: set-id bits a command added to a regular file are
                  removed (fd-based, no link followed).
                  "fifos_removed": [path]: FIFOs a command left in the project are unlinked
                  (git and editors on the host block opening one).
                  "git_quarantined": [{"path", "kind", "renamed_to" | "error"}]: with
                  --readonly-dir .git, a .git (dir, gitdir file or symlink, any depth, any case)
                  that a command created or replaced (kind, inode or target) is renamed to
                  .git.quarantined-<8 hex> beside it, so git on the host never honours it.
                  "remount_needed": [paths] with --git-guard: before a command, a .git that
                  appeared from outside during the session (after the toolbox started) and is
                  not a read-only mount point (/proc/self/mountinfo): ok false, nothing runs.
                  "disk_growth" (with a budget): bytes the project grew in our calls (st_blocks;
                  growth between calls is someone else's); "disk_budget_exceeded": true when the
                  command was killed or took the project over the budget (ok false).
    disk          while a command runs, statvfs is polled every 0.1 s; once the file system grew
                  by the room left in the budget (or free space is under --min-free) a stat walk
                  measures the project (at most every 0.3 s, or 3x the walk's time): if this
                  command made it grow past the budget (or while space is low), it is killed
                  like a timeout; if not, the growth was someone else's and the next check waits
                  for more. The statvfs baseline is taken as each command starts.
    text          one line each: "files changed: 2 created, 1 modified", outside changes, set-id
                  bits removed, .git entries disabled, the disk budget.

Seccomp
    --seccomp-filter is a classic BPF program (base64 of struct sock_filter[]) the host builds
    for `uname -m`. Before reading any request the toolbox installs it on itself (with
    no_new_privs), so it and every command it runs are confined by it whatever the runtime does
    with the container's profile (gVisor's runsc does not apply it to exec'd processes). On a
    different machine it is not installed and "filter" says why.

Which processes a call "started": those carrying this toolbox's token in their environment
(inherited across fork, setsid and most execs), plus its process group. In a container the
toolbox owns (it is PID 1, was entered from outside the PID namespace - ppid 0 - or got
--kill-strays) also every process of our uid started after the command, except the toolbox,
its ancestors and PID 1: that catches `env -i setsid ...` escapes. On a shared host the broad
sweep would hit other people's processes, so it is never switched on there.
"""
