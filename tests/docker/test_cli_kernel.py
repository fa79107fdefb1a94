"""What the kernel refuses, through the real CLI: set-id files, unix sockets, the 32-bit syscall
door; and a stuck toolbox that really dies.

The stand-in model asks for each attempt as a `run_shell_command`; `ask --yes` runs it in a real
container with the real seccomp profile. Assertions are on the host: the files' modes, what a
host server listening inside the project saw, and the tool results the model got back.
"""

from __future__ import annotations

import io
import os
import platform
import shutil
import socket
import socketserver
import stat
import subprocess
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Engine
from tests.docker.cli_support import (
    SANDBOX_AGENT,
    ask,
    assert_ok,
    assert_user_error,
    cli_env,
    containers_of,
    explain,
    tool_exchanges,
)
from tests.docker.test_invariants import CLONE_HOPPER
from tests.fakes.model_server import Call, ModelServer, RecordedRequest, Reply

pytestmark = [pytest.mark.docker, pytest.mark.engines]

# Reaches syscalls through `int 0x80`: the i386 ABI, which seccomp filters as another
# architecture. The mmap is MAP_32BIT so that the addresses fit the 32-bit registers.
DOOR32 = r'''
import ctypes, mmap, struct, sys
page = mmap.mmap(-1, 4096, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | 0x40,
                 prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
base = ctypes.addressof(ctypes.c_char.from_buffer(page))
def put(offset, raw):
    page[offset:offset + len(raw)] = raw
    return base + offset
def int80(nr, a=0, b=0, c=0):  # push rbx; mov eax/ebx/ecx/edx; int 0x80; pop rbx; ret
    put(0, b"\x53" + b"".join(op + struct.pack("<I", v) for op, v in
                              [(b"\xb8", nr), (b"\xbb", a), (b"\xb9", b), (b"\xba", c)])
        + b"\xcd\x80\x5b\xc3")
    return ctypes.CFUNCTYPE(ctypes.c_int)(base)()
what, path = sys.argv[1], sys.argv[2].encode()
if what == "chmod":
    print("chmod:", int80(15, put(1024, path + b"\0"), 0o4755))
else:  # socketcall(SYS_SOCKET, AF_UNIX), then socketcall(SYS_CONNECT, path)
    fd = int80(102, 1, put(2048, struct.pack("<III", 1, 1, 0)))
    address = put(1024, struct.pack("<H", 1) + path + b"\0")
    print("socket:", fd, "connect:", int80(102, 3, put(2048, struct.pack("<III", fd, address, 110))))
'''

SET_ID = {
    "chmod 4755": "cp /bin/sh ./tool && chmod 4755 ./tool",
    "chmod g+s": "chmod g+s hello.py",
    "install -m 4755": "install -m 4755 /bin/sh ./installed",
    # `cp -p` / `cp -a` of a set-id binary: the image has none to copy (test_image_contract);
    # keeping an archive's set-id modes is what `tar x` tries.
    "tar x": "tar -xpf setid.tar",  # made by the test: one entry of mode 04755
    "os.open": "python3 -c \"import os; os.open('made', os.O_CREAT | os.O_WRONLY, 0o4755)\"",
    "os.chmod": "python3 -c \"import os; os.chmod('hello.py', 0o2755)\"",
    "mknod": "python3 -c \"import os, stat; os.mknod('node', stat.S_IFREG | 0o4755)\"",
    "security.capability": "python3 -c \"import os; os.setxattr('hello.py', "
                           "'security.capability', bytes([1, 0, 0, 2]) + bytes(16))\"",
    "int 0x80 chmod": "cp /bin/sh ./tool32 && python3 door32.py chmod tool32",
}
# Under gVisor (runsc) the outcome on the host is the same (asserted first); what the command
# reads differs: gVisor has no security.* extended attributes on the project mount at all.
GVISOR_SAYS = {"security.capability": "Operation not supported"}


def write_helpers(root: Path) -> None:
    """door32.py and a tar archive holding a set-uid entry, in the project."""
    (root / "door32.py").write_text(DOOR32)
    entry = tarfile.TarInfo("untarred")
    entry.mode, entry.size = 0o4755, 2
    with tarfile.open(root / "setid.tar", "w") as archive:
        archive.addfile(entry, io.BytesIO(b"hi"))


def set_id_files(root: Path) -> list[str]:
    """Files under `root` carrying a set-uid or set-gid bit, or a file capability."""
    found = []
    for path in [root, *root.rglob("*")]:
        if path.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID):
            found.append(str(path))
        if not path.is_symlink() and "security.capability" in os.listxattr(path):
            found.append(f"{path} (capability)")
    return found


@pytest.mark.parametrize("owner", ["root", "1234:2345"])
def test_no_set_id_file_reaches_the_host(project: Path, model_server: ModelServer, owner: str,
                                        engine: Engine):
    write_helpers(project)
    if owner != "root":
        subprocess.run(["chown", "-R", owner, str(project)], check=True)
    for command in SET_ID.values():
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Tried.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Tried.")
    assert set_id_files(project) == []
    results = dict(zip(SET_ID, [r for _, _, r in tool_exchanges(model_server.last_chat)],
                       strict=True))
    for spelling, result in results.items():
        if spelling == "int 0x80 chmod":  # a foreign ABI: the process is killed, not refused
            killed = ("Segmentation fault",) if engine.runtime == "runsc" else (  # no i386 ABI
                "SIGSYS", "Bad system call")
            assert any(word in result for word in killed), (spelling, result)
        elif engine.runtime == "runsc" and spelling in GVISOR_SAYS:
            assert GVISOR_SAYS[spelling] in result, (spelling, result)
        else:
            assert "Operation not permitted" in result, (spelling, result)
    assert (project / "tool").exists() and (project / "untarred").read_text() == "hi"


class _Recorder(socketserver.BaseRequestHandler):
    """Notes every connection or datagram the server gets."""

    def handle(self) -> None:
        self.server.hits.append(self.client_address)  # type: ignore[attr-defined]


@pytest.fixture
def short_project(docker_client: Any) -> Iterator[Path]:
    """A project under a short path: a socket's path must fit sun_path (108 bytes)."""
    base = Path(tempfile.mkdtemp(prefix="sa-kernel-", dir="/tmp"))
    root = base / "proj"
    root.mkdir()
    (root / "hello.py").write_text('print("hello")\n')
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    yield root
    leftovers = containers_of(docker_client, root)
    for container in leftovers:
        container.remove(force=True)
    shutil.rmtree(base)
    assert not leftovers


@pytest.fixture
def host_servers(short_project: Path) -> Iterator[list[Any]]:
    """A stream and a datagram unix socket server on the host, listening inside the project."""
    servers: list[Any] = [
        socketserver.UnixStreamServer(str(short_project / "dev.sock"), _Recorder),
        socketserver.UnixDatagramServer(str(short_project / "dgram.sock"), _Recorder),
    ]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for server, thread in zip(servers, threads, strict=True):
        server.hits = []
        os.chmod(server.server_address, 0o777)  # so that only the kernel's rules decide
        thread.start()
    yield servers
    for server, thread in zip(servers, threads, strict=True):
        server.shutdown()
        thread.join()
        server.server_close()


WORKS = (
    "git status --short && git diff --stat && rg -n hello && python3 -c '"
    "import asyncio, multiprocessing, subprocess\n"
    "async def main():\n"
    "    proc = await asyncio.create_subprocess_exec(\"echo\", \"async\", stdout=-1)\n"
    "    return (await proc.communicate())[0].decode().strip()\n"
    "with multiprocessing.Pool(2) as pool:\n"
    "    print(asyncio.run(main()), sum(pool.map(abs, [-1, -2])), "
    "subprocess.run([\"echo\", \"sub\"], capture_output=True, text=True).stdout.strip())'"
)


def test_unix_sockets_in_the_project_are_out_of_reach(short_project: Path,
                                                      host_servers: list[Any],
                                                      model_server: ModelServer,
                                                      engine: Engine):
    stream, datagram = host_servers
    with socket.socket(socket.AF_UNIX) as probe:  # the server does answer a host process
        probe.connect(str(short_project / "dev.sock"))
    for _ in range(100):
        if stream.hits:
            break
        threading.Event().wait(0.02)
    assert len(stream.hits) == 1
    stream.hits.clear()
    (short_project / "door32.py").write_text(DOOR32)
    attempts = [
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('dev.sock')\"",
        "python3 -c \"import socket; a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM);"
        " a.sendto(b'x', 'dgram.sock')\"",
        "python3 -c \"import socket; a, b = socket.socketpair(); a.connect('dev.sock')\"",
        "python3 door32.py connect dev.sock",
        WORKS,
    ]
    for command in attempts:
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Tried.")

    done = ask(short_project, model_server, "ollama", "--yes")

    assert_ok(done, "Tried.")
    assert stream.hits == [] and datagram.hits == []
    unix, dgram, pair, door, works = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert "PermissionError: [Errno 1] Operation not permitted" in unix, unix
    assert "PermissionError: [Errno 1] Operation not permitted" in dgram, dgram
    # A stream pair stays a pair; gVisor refuses a connect to a host socket path before that.
    refused = "Operation not permitted" if engine.runtime == "runsc" else "already connected"
    assert refused in pair, pair
    if engine.runtime != "runsc":  # gVisor has no i386 ABI: `int 0x80` does nothing there
        assert "SIGSYS" in door or "Bad system call" in door, door
    assert "exit_code: 0" in works and "async 3 sub" in works, works
    assert "?? door32.py" in works and 'hello.py:1:print("hello")' in works, works


GIT = "git -c user.name=a -c user.email=a@b"
EVERYDAY = {
    "git in /tmp": f"cd /tmp && {GIT} init -q r && cd r && echo x > f && {GIT} add f && "
                   f"{GIT} commit -qm one && echo y >> f && {GIT} status --short && {GIT} diff --stat",
    "git in the project": f"{GIT} add hello.py && {GIT} commit -qm one && echo y >> hello.py && "
                          f"{GIT} status --short && {GIT} diff --stat",
    "rg": "rg -n hello",
    "python": "python3 -c 'import asyncio, multiprocessing, subprocess\n"
              "async def main():\n"
              "    proc = await asyncio.create_subprocess_exec(\"echo\", \"async\", stdout=-1)\n"
              "    return (await proc.communicate())[0].decode().strip()\n"
              "a, b = multiprocessing.Pipe()\n"
              "a.send(\"pipe\")\n"
              "with multiprocessing.Pool(2) as pool:\n"
              "    print(asyncio.run(main()), sum(pool.map(abs, [-1, -2])), b.recv())'",
    "venv": "python3 -m venv --without-pip /tmp/v && /tmp/v/bin/python -c "
            "'import sys; print(sys.prefix)'",
    "pip": "PYTHONPATH=vendor python3 -m pip --version",  # the image has no pip: the host's
}


def test_everyday_tools_still_work(project: Path, model_server: ModelServer):
    import pip

    shutil.copytree(Path(pip.__file__).parent, project / "vendor" / "pip")
    for command in EVERYDAY.values():
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes", "--allow-git-writes")

    assert_ok(done, "Done.")
    results = dict(zip(EVERYDAY, [r for _, _, r in tool_exchanges(model_server.last_chat)],
                       strict=True))
    for name, result in results.items():
        assert result.startswith("exit_code: 0"), (name, result)
    assert " M f" in results["git in /tmp"] and "1 insertion" in results["git in /tmp"]
    assert " M hello.py" in results["git in the project"]
    assert 'hello.py:1:print("hello")' in results["rg"]
    assert "async 3 pipe" in results["python"]
    assert "/tmp/v" in results["venv"]
    assert f"pip {pip.__version__} from /workspace/vendor/pip" in results["pip"]


# Each way to a new namespace, in one helper the model runs: the call and the result it got.
# A clone that does make a child (it should not) has the child leave at once.
NAMESPACE = r"""
import ctypes, errno, os, struct, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
CLONE_NEWUSER, CLONE_NEWNET, SIGCHLD = 0x10000000, 0x40000000, 17
def outcome(result):
    return "MADE" if result >= 0 else errno.errorcode[ctypes.get_errno()]
def child(pid):  # a raw clone returns twice, like fork
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
    return pid
what = sys.argv[1]
if what == "unshare":
    print(what, outcome(libc.unshare(CLONE_NEWUSER)), outcome(libc.unshare(CLONE_NEWNET)))
elif what == "clone":
    flags = ctypes.c_long(CLONE_NEWUSER | SIGCHLD)
    print(what, outcome(child(libc.syscall(56, flags, 0, 0, 0, 0))))
elif what == "clone3":  # struct clone_args, version 0: flags, ..., exit_signal, ...
    args = ctypes.create_string_buffer(struct.pack("=8Q", CLONE_NEWUSER, 0, 0, 0, SIGCHLD, 0, 0, 0))
    print(what, outcome(child(libc.syscall(435, args, ctypes.c_long(64)))))
elif what == "setns":
    fd = os.open("/proc/self/ns/net", os.O_RDONLY)
    print(what, outcome(libc.setns(fd, 0)))
else:  # what must keep working: threads, fork, subprocesses
    seen = []
    thread = threading.Thread(target=lambda: seen.append("thread"))
    thread.start(); thread.join()
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    seen.append("fork %d" % os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    import subprocess
    seen.append(subprocess.run(["echo", "sub"], capture_output=True, text=True).stdout.strip())
    print(what, *seen)
"""
NAMESPACE_ATTEMPTS = {
    "unshare -U -r": "unshare -U -r id",
    "unshare -n": "unshare -n true",
    "unshare()": "python3 ns.py unshare",
    "clone": "python3 ns.py clone",
    "clone3": "python3 ns.py clone3",
    "setns": "python3 ns.py setns",
    "nsenter": "nsenter --net=/proc/self/ns/net true",
    "still works": "python3 ns.py works && bash -c 'sleep 0.1 & wait; echo waited' && "
                   "git status --short",
}


@pytest.mark.skipif(platform.machine() != "x86_64", reason="raw x86-64 syscall numbers")
def test_no_command_can_make_a_namespace(project: Path, model_server: ModelServer):
    """Red-team finding (issue 23): under gVisor, where commands do not get the container's
    profile, `unshare -U -r` gave uid 0 with every capability inside the sandbox."""
    (project / "ns.py").write_text(NAMESPACE)
    for command in NAMESPACE_ATTEMPTS.values():
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": command})])
    model_server.reply("Tried.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Tried.")
    results = dict(zip(NAMESPACE_ATTEMPTS,
                       [r for _, _, r in tool_exchanges(model_server.last_chat)], strict=True))
    for name in ("unshare -U -r", "unshare -n", "nsenter"):
        assert "Operation not permitted" in results[name], (name, results[name])
        assert not results[name].startswith("exit_code: 0"), (name, results[name])
    assert "uid=0" not in results["unshare -U -r"]
    assert "unshare EPERM EPERM" in results["unshare()"], results["unshare()"]
    assert "clone EPERM" in results["clone"], results["clone"]
    assert "clone3 ENOSYS" in results["clone3"], results["clone3"]  # so libc falls back to clone
    assert "setns EPERM" in results["setns"], results["setns"]
    works = results["still works"]
    assert works.startswith("exit_code: 0"), works
    assert "works thread fork 7 sub" in works and "waited" in works and "?? ns.py" in works, works


def test_a_stopped_toolbox_is_replaced_and_gone(project: Path, model_server: ModelServer):
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "echo $PPID > /tmp/toolbox.pid; kill -STOP $PPID"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "test -e /proc/$(cat /tmp/toolbox.pid) && echo STILL-THERE || echo gone"})])
    model_server.reply("Recovered.")

    done = ask(project, model_server, "ollama", "--yes",
               env={"SANDBOX_AGENT_TOOL_TIMEOUT": "1"})

    assert_ok(done, "Recovered.")
    stuck, check = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert "did not answer within 16s" in stuck and "restarted" in stuck, stuck
    assert "gone" in check and "STILL-THERE" not in check, check
    assert "restarting the toolbox" in done.stderr, explain(done)
    assert "could not kill" not in done.stderr, explain(done)


def test_a_job_that_sheds_the_calls_marks_changes_nothing_after_its_call(
        project: Path, model_server: ModelServer):
    """`env -i` drops the call's token, setsid its process group, the subshell its parent: the
    job is still the call's and ends with it (red-team round 6: it edited a file unaudited)."""
    (project / "build.sh").write_text("echo building\n")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        "(env -i PATH=/usr/bin:/bin setsid sh -c 'sleep 1.5; echo EVIL >> build.sh' "
        "</dev/null >/dev/null 2>&1 &); echo started")})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "sleep 3; echo waited"})])
    model_server.reply("Nothing changed.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Nothing changed.")
    first, second = [r for _, _, r in tool_exchanges(model_server.last_chat)]
    assert "started" in first and "killed" in first, first
    assert "waited" in second, second
    assert (project / "build.sh").read_text() == "echo building\n"


def test_a_repository_made_by_a_command_that_kills_its_toolbox_is_renamed(
        project: Path, model_server: ModelServer, tmp_path: Path):
    """Killing the toolbox skips its renaming of a new `.git` after the command: the host
    renames every `.git` that appeared during the session (red-team round 6)."""
    (project / "sub").mkdir()
    ran = tmp_path / "fsmonitor-ran"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"cd sub && git init -q && git config core.fsmonitor 'touch {ran}; false' && "
        "touch -d 2030-01-01 .git && kill -9 $PPID; sleep 1")})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Done.")
    assert not (project / "sub" / ".git").exists()
    [aside] = (project / "sub").glob(".git.quarantined-*")
    assert f"renamed to sub/{aside.name}" in done.stderr, explain(done)
    subprocess.run(["git", "status"], cwd=project / "sub", capture_output=True, check=False)
    assert not ran.exists()


@pytest.mark.parametrize("ending", ["the-command-ends", "it-kills-its-toolbox",
                                    "in-a-dir-it-locked"])
def test_no_fifo_a_command_makes_is_left_for_git_on_the_host(
        project: Path, model_server: ModelServer, ending: str):
    """Red-team round 23: `mkfifo .gitignore .mailmap` left FIFOs that git on the host opened
    and blocked on for ever (`git status`, an editor's, a prompt's; the product's own review
    failed after 60 s). The toolbox removes what a command left; the host's checks do when a
    command killed its toolbox first."""
    subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@p", "commit", "-q",
                    "--allow-empty", "-m", "base"], cwd=project, check=True)
    kill = " && kill -9 $PPID; sleep 1" if ending == "it-kills-its-toolbox" else ""
    lock = " && mkdir e && mkfifo e/.gitignore && chmod 555 d && chmod 077 e" \
        if ending == "in-a-dir-it-locked" else ""  # red-team round 24: its owner's rights gone
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"mkdir -p d && mkfifo .gitignore d/.gitignore .mailmap .gitattributes"
                   f"{lock}{kill}"})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "ls -A"})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Done.")
    for name in (".gitignore", "d/.gitignore", ".mailmap", ".gitattributes", "e/.gitignore"):
        assert not os.path.lexists(project / name), (name, explain(done))
    for argv in (["status", "--short"], ["log", "--format=%aN", "-1"]):
        subprocess.run(["git", *argv], cwd=project, capture_output=True, timeout=20,
                       check=True)
    if not kill:
        first = next(r for _, _, r in tool_exchanges(model_server.last_chat))
        assert "removed the FIFO ./.gitignore" in first and "could not" not in first, first
    if lock:
        assert stat.S_IMODE(os.stat(project / "d").st_mode) == 0o555  # put back as it was


def test_a_repository_made_by_a_command_that_kills_its_toolbox_is_gone_before_the_next_turn(
        project: Path, model_server: ModelServer, tmp_path: Path):
    """Red-team round 20: renamed only at the session's end, the planted repository was live
    through the model's next turn, and a `git status` on the host (an editor's, say) ran its
    fsmonitor. The host now makes the checks the dead toolbox skipped before a new one starts."""
    (project / "sub").mkdir()
    ran = tmp_path / "fsmonitor-ran"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"cd sub && git init -q && git config core.fsmonitor 'touch {ran}; false' && "
        "kill -9 $PPID; sleep 1")})])
    during: list[bool] = []

    def look(request: RecordedRequest) -> Reply:  # the model's next turn: the session lives
        subprocess.run(["git", "status"], cwd=project / "sub", capture_output=True, check=False)
        during.append((project / "sub" / ".git").exists())
        return Reply(tool_calls=(Call("run_shell_command", {"command": "true"}),))

    model_server.respond(look)
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Done.")
    assert during == [False] and not ran.exists(), explain(done)
    assert "no write records" in tool_exchanges(model_server.last_chat)[0][2]


def ask_without_override(project: Path, server: ModelServer) -> subprocess.CompletedProcess[str]:
    """`ask --yes` by a controller without permission override, as a person running it on
    their own project is (the tests run as root, which overrides every mode)."""
    return subprocess.run(
        ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", str(SANDBOX_AGENT),
         "ask", "--root", str(project), "--provider", "ollama", "--host", server.url, "--yes",
         "plant it"], env=cli_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=300)


@pytest.mark.engines("runc")
@pytest.mark.parametrize("case", ["repository", "look-alike", "fifo"])
def test_what_a_command_that_kills_its_toolbox_hid_from_its_owner_is_still_undone(
        project: Path, model_server: ModelServer, tmp_path: Path, case: str):
    """Red-team round 25: a command took its directory's owner rights (`chmod 111`, `555`;
    same uid as the files) and killed its toolbox; the host's walk skipped what it could not
    open and its renames failed in what it could not write, so without permission override a
    planted repository stayed live (`git status` ran its fsmonitor on the host), a look-alike
    kept its HEAD, and a FIFO made `git diff` block for ever. The host gives the owner rights
    back while it checks, and puts the modes back."""
    ran = tmp_path / "fsmonitor-ran"
    plant = {
        "repository": (f"mkdir made && cd made && git init -q && "
                       f"git config core.fsmonitor 'touch {ran}; false' && cd .. && "
                       "chmod 111 made"),
        "look-alike": ("mkdir -p lib/objects lib/refs/heads && "
                       "echo 'ref: refs/heads/main' > lib/HEAD && printf '[core]\\n' > lib/config"
                       " && chmod 555 lib"),
        "fifo": "mkdir made && mkfifo made/.gitattributes && chmod 111 made",
    }[case]
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": f"{plant} && kill -9 $PPID; sleep 1"})])
    model_server.reply("Done.")
    done = ask_without_override(project, model_server)
    assert done.returncode == 0, explain(done)
    folder = project / ("lib" if case == "look-alike" else "made")
    assert stat.S_IMODE(folder.stat().st_mode) == (0o555 if case == "look-alike" else 0o111), \
        explain(done)  # the modes it found, back
    if case == "repository":
        assert not (folder / ".git").exists(), explain(done)
        subprocess.run(["git", "status"], cwd=folder, capture_output=True, timeout=20)
        assert not ran.exists(), explain(done)
        assert "a git repository appeared during the session at made/.git: renamed" in \
            done.stderr, explain(done)
    elif case == "look-alike":
        assert not (folder / "HEAD").exists(), explain(done)
        assert "disabled the repository (or look-alike) the sandbox made at lib" in \
            done.stderr, explain(done)
    else:
        assert not (folder / ".gitattributes").exists(), explain(done)
        subprocess.run(["git", "diff"], cwd=project, capture_output=True, timeout=20,
                       check=True)
        assert "removed the FIFO the sandbox left at made/.gitattributes" in done.stderr, \
            explain(done)


@pytest.mark.engines("runc")
def test_a_repository_in_a_directory_its_owner_locked_is_protected_too(
        project: Path, model_server: ModelServer):
    """Red-team round 25: without permission override the start's walk skipped a directory of
    the person's that its owner had locked (`chmod 000`), so the repository inside was not
    mounted read-only, and the sandbox, its owner, could unlock it and write its hooks. Now
    the walk finds it, and the run stops before any container, since the config git would
    read there (what it names must be protected too) cannot be read."""
    locked = project / "locked"
    locked.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=locked, check=True)
    locked.chmod(0)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        "chmod 700 locked && echo planted > locked/.git/hooks/pre-commit; echo rc=$?")})])
    model_server.reply("Done.")
    done = ask_without_override(project, model_server)
    assert done.returncode == 2, explain(done)
    assert "locked/.git/config as config, but it cannot be read" in done.stderr, explain(done)
    assert "started" not in done.stderr, explain(done)
    assert not (locked / ".git" / "hooks" / "pre-commit").exists()
    assert stat.S_IMODE(locked.stat().st_mode) == 0


@pytest.mark.engines("runc")
def test_a_project_holding_sandbox_agents_own_installation_is_refused(
        model_server: ModelServer, docker_client: Any):
    """Red-team round 26: run on a checkout whose `.venv` holds sandbox-agent itself, the
    sandbox wrote a `.pth` file there that the next `sandbox-agent --version` ran on the host
    as its user, and a `pip.conf` the next `--network pypi` took its allow-list from."""
    import sys

    import idna  # (any package the CLI imports)

    outer = Path(sys.prefix).parent  # this checkout: the venv the tests run the CLI from
    inner = Path(idna.__file__).parent  # round 27: a root inside it, where the host imports
    for root, said in ((outer, "is inside the project root"), (inner, "is inside")):
        model_server.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
        done = ask(root, model_server, "ollama", "--yes")  # refused at its sandbox's start
        assert_user_error(done, 2, said, "sandbox-agent")
        assert not docker_client.containers.list(
            all=True, filters={"label": f"sandbox-agent.root={root}"})


def test_a_protected_path_moved_by_a_command_that_kills_its_toolbox_ends_the_session(
        project: Path, model_server: ModelServer, tmp_path: Path):
    """Red-team round 21: `mv tools tools.old` carries the read-only mount of the hooks path
    along; the command then killed its toolbox, so no check saw it, and the new toolbox took
    the moved mount for where it belongs: the next command wrote a hook that the person's
    `git commit` ran on the host during the session. A toolbox never starts where a protected
    path moved."""
    (project / "tools" / "hooks").mkdir(parents=True)
    subprocess.run(["git", "config", "core.hooksPath", "tools/hooks"], cwd=project, check=True)
    ran = tmp_path / "hook-ran"
    hook = f"printf '#!/bin/sh\\ntouch {ran}\\n' > tools/hooks/pre-commit"
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"mv tools tools.old && mkdir -p tools/hooks && {hook}; kill -9 -1; sleep 1")})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"mkdir -p tools/hooks && {hook} && chmod +x tools/hooks/pre-commit && echo PLANTED")})])

    def commit(request: object = None) -> Reply:  # the person commits, during and after
        subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-q",
                        "--allow-empty", "-m", "the person commits"], cwd=project,
                       capture_output=True, check=False)
        return Reply(content="Done.")

    model_server.respond(commit)

    done = ask(project, model_server, "ollama", "--yes")
    commit()

    assert not ran.exists(), explain(done)
    assert not any("PLANTED" in result for _, _, result in tool_exchanges(model_server.last_chat))
    assert done.returncode == 13, explain(done)
    assert "protected paths are not where they were" in done.stderr, explain(done)
    # round 23: the person's own hooks stay where the command moved them, so say where
    assert "tools/hooks is protected (git runs it) but was replaced" in done.stderr \
        and "the original is now at tools.old/hooks" in done.stderr, explain(done)


def _commit(project: Path) -> None:
    subprocess.run(["git", "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-q",
                    "--allow-empty", "-m", "the person commits"], cwd=project,
                   capture_output=True, check=False)


@pytest.mark.parametrize("plant", ["missing-at-the-start", "a-link-where-it-was"])
def test_a_hooks_path_moved_away_is_not_planted_through_by_a_toolbox_killing_command(
        project: Path, model_server: ModelServer, tmp_path: Path, plant: str):
    """Red-team round 22: (missing) a hooks path absent at the start gets an empty read-only
    mount, which `mv tools tools.old` carried away unseen, so the restarted toolbox let the
    next command write the hook; (link) `tools` made a link to a planted `evil/hooks` after the
    rename: the session ended, but nothing could be moved aside through the link and the hook
    ran at the person's next commit. Neither hook runs, during the session or after it."""
    ran = tmp_path / "hook-ran"
    (project / "tools").mkdir()
    (project / "tools" / "build.sh").write_text("echo build\n")
    if plant == "a-link-where-it-was":
        (project / "tools" / "hooks").mkdir()
    subprocess.run(["git", "config", "core.hooksPath", "tools/hooks"], cwd=project, check=True)
    hook = f"printf '#!/bin/sh\\ntouch {ran}\\n' > HOOKS/pre-commit && chmod +x HOOKS/pre-commit"
    if plant == "missing-at-the-start":
        first = "mv tools tools.old; kill -9 -1; sleep 1"
    else:
        first = (f"mv tools tools.old && mkdir -p evil/hooks && {hook.replace('HOOKS', 'evil/hooks')}"
                 " && ln -s evil tools; kill -9 -1; sleep 1")
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": first})])
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"mkdir -p tools/hooks && {hook.replace('HOOKS', 'tools/hooks')} && echo PLANTED")})])

    def commit(request: object) -> Reply:  # the person commits while the session runs
        _commit(project)
        return Reply(content="Done.")

    model_server.respond(commit)

    done = ask(project, model_server, "ollama", "--yes")
    _commit(project)  # and after it

    assert not ran.exists(), explain(done)
    assert not any("PLANTED" in result for _, _, result in tool_exchanges(model_server.last_chat))
    assert done.returncode == 13, explain(done)
    assert "not moved" not in done.stderr, explain(done)


def test_a_start_the_engine_refused_leaves_nothing_for_the_next_run_to_settle(
        project: Path, model_server: ModelServer):
    """Red-team round 21: a hooks path the engine cannot make a mountpoint for fails the
    container's create; its run record stayed, and the next run "settled" it against the tree
    as it was by then, disabling the person's freshly cloned repository as the sandbox's."""
    (project / "README").write_text("hello\n")
    subprocess.run(["git", "config", "core.hooksPath", "README/hooks"], cwd=project, check=True)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
    model_server.reply("Done.")

    failed = ask(project, model_server, "ollama", "--yes")
    assert failed.returncode == 10, explain(failed)
    shutil.rmtree(project / ".git")
    subprocess.run(["git", "init", "-q", str(project)], check=True)  # the person's own, anew
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Done.")
    assert "ended without its controller" not in done.stderr, explain(done)
    assert (project / ".git" / "HEAD").is_file(), explain(done)
    assert subprocess.run(["git", "status"], cwd=project, capture_output=True).returncode == 0


@pytest.mark.parametrize("second", ["another-environment", "a-subdirectory"])
def test_a_second_writable_session_from_another_environment_is_refused(
        project: Path, model_server: ModelServer, tmp_path: Path, second: str):
    """Red-team round 21: the root's lock was a file named after the path in a lock dir chosen
    from `$XDG_RUNTIME_DIR`, so a second session started with another one (or through a bind
    mount) ran beside the first, and its sandbox could race the first one's start; round 22:
    so did one on a subdirectory of the project."""
    (project / "sub").mkdir()
    started = tmp_path / "started"
    model_server.reply(tool_calls=[Call("run_shell_command", {  # until the second has tried
        "command": f"touch {started.name}; for i in $(seq 300); do "
                   "[ -e release ] && break; sleep 0.1; done"})])
    model_server.reply("First.")
    first = subprocess.Popen(
        [str(SANDBOX_AGENT), "ask", "--root", str(project), "--provider", "ollama", "--host",
         model_server.url, "--yes", "do the task"], env=cli_env(), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (project / started.name).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (project / started.name).exists(), "the first session never ran its command"
        other_env = tmp_path / "runtime"
        other_env.mkdir(mode=0o700)
        with ModelServer() as second_model:
            second_model.reply(tool_calls=[Call("run_shell_command", {"command": "true"})])
            second_model.reply("Second.")
            done = (ask(project, second_model, "ollama", "--yes",
                        env={"XDG_RUNTIME_DIR": str(other_env)})
                    if second == "another-environment"
                    else ask(project / "sub", second_model, "ollama", "--yes"))
    finally:
        (project / "release").touch()
        _, err = first.communicate(timeout=120)
    assert done.returncode == 10, explain(done)
    said = ("is in use by a bind session (of another lock dir" if second == "another-environment"
            else "lies inside")
    assert said in done.stderr, explain(done)
    assert first.returncode == 0, err


def test_no_signal_from_a_command_stops_the_container(project: Path, model_server: ModelServer,
                                                     engine: Engine):
    """PID 1 must outlive whatever a command sends it (red-team round 6: Python's SIGINT
    handler in the init let `kill -INT 1` stop the container mid-command; under Podman and
    gVisor PID 1 was docker-init/catatonit, which passed the signal on to `sleep`; round 7:
    gVisor let TSTP, SEGV and others through to the init that ignored only 7 signals). gVisor,
    unlike Linux, lets a namespace's own processes SIGKILL or SIGSTOP its init: a known limit
    there (docs/SECURITY.md)."""
    names = ("INT", "TERM", "HUP", "QUIT", "USR1", "USR2", "ALRM", "TSTP", "TTIN", "TTOU",
             "SEGV", "ABRT", "BUS", "PIPE", "XCPU")
    names += () if engine.name == "runsc" else ("KILL", "STOP")
    signals = "; ".join(f"kill -{name} 1" for name in names)
    model_server.reply(tool_calls=[Call("run_shell_command", {"command": (
        f"{signals}; sh -c 'sleep 0.1 &'; sleep 1; touch made.txt; echo survived")})])
    model_server.reply("Done.")

    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Done.")
    [(_, _, result)] = tool_exchanges(model_server.last_chat)
    assert result.startswith("exit_code: 0") and "survived" in result, result
    assert "made.txt" in result or "1 created" in result or (project / "made.txt").exists()
    assert "starting it" not in done.stderr and "restart" not in done.stderr, explain(done)


@pytest.mark.skipif(platform.machine() != "x86_64", reason="the hopper is x86-64 machine code")
def test_a_clone_hopper_does_not_outlive_the_session(project: Path, model_server: ModelServer,
                                                    engine: Engine,
                                                    request: pytest.FixtureRequest):
    """Red-team round 8, as they ran it: through the CLI, a hopper that clone(CLONE_VM)s and
    exits in a loop escaped gVisor's single kill(-1) and appended to a.py 6 s later, after the
    session had looked at the file and answered, with no write record."""
    if engine.name == "runsc":  # the same known limit as test_invariants' hopper tests
        request.applymarker(pytest.mark.xfail(strict=False, reason=(
            "known limit under gVisor: a fast hopper now and then outlives the repeated kill(-1)")))
    (project / "a.py").write_text("x = 1\n")
    (project / ".hop").write_bytes(CLONE_HOPPER)
    model_server.reply(tool_calls=[Call("run_shell_command", {
        "command": "chmod +x .hop; ./.hop; rm -f .hop; echo started"})])
    model_server.reply(tool_calls=[Call("read_file", {"path": "a.py"})])
    model_server.reply("Fine.", delay=3)  # 3 s before the reply and after each of its chunks

    started = time.monotonic()
    done = ask(project, model_server, "ollama", "--yes")

    assert_ok(done, "Fine.")
    assert time.monotonic() - started > 8  # the session outlived the hopper's write time
    assert (project / "a.py").read_text() == "x = 1\n"
