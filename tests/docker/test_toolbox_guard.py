"""Code in the sandbox cannot take over the toolbox that speaks for it.

The toolbox runs as the same uid as the commands it starts. Without care a command could read
the host's requests and write answers through /proc/<toolbox>/fd, ptrace it, or have the
project's own `json.py` or a `.pth` file in the user site run inside it (reproduced by an
outside review: fake approval diffs, a forged audit trail).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from executor.sandbox.docker import DockerSandbox
from tests.docker.conftest import make_config

pytestmark = pytest.mark.docker

PTRACE = """
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.ptrace(16, int(sys.argv[1]), None, None)  # PTRACE_ATTACH
print("attach", rc, ctypes.get_errno())
"""


def shell(box: DockerSandbox, command: str) -> Any:
    return box.call("run_shell_command", {"command": command})


def test_commands_cannot_reach_the_toolbox_through_proc_or_ptrace(project: Path,
                                                                   docker_client: Any):
    with DockerSandbox(make_config(project), client=docker_client) as box:
        toolbox = box._toolbox
        assert toolbox is not None and toolbox.pid and toolbox.ready["guarded"] is True
        pid = toolbox.pid
        fds = shell(box, f"head -c1 < /proc/{pid}/fd/0; echo x > /proc/{pid}/fd/1; "
                         f"echo x > /proc/{pid}/fd/3; cat /proc/{pid}/environ; "
                         f"head -c1 /proc/{pid}/mem; echo end")
        assert fds.output.count("Permission denied") == 5, fds.output
        (project / "attach.py").write_text(PTRACE)
        attach = shell(box, f"python3 attach.py {pid}")
        assert "attach -1 1" in attach.output, attach.output  # EPERM
        assert box.call("read_file", {"path": "hello.py"}).ok  # and it still answers us


def test_the_projects_own_modules_and_user_site_never_run_in_the_toolbox(
        project: Path, docker_client: Any):
    for name in ("json", "difflib", "selectors", "hashlib"):
        (project / f"{name}.py").write_text(
            f"open('/workspace/PWNED-{name}', 'w').write('ran')\nraise SystemExit(3)\n")
    with DockerSandbox(make_config(project), client=docker_client) as box:
        site = shell(box, "d=$(python3 -c 'import site; print(site.getusersitepackages())') && "
                          "mkdir -p $d && echo \"import os; open('/workspace/PWNED-pth', 'w')\" "
                          "> $d/x.pth && echo planted")
        assert "planted" in site.output
        shell(box, "kill -9 $PPID")  # the toolbox dies; the sandbox starts a new one
        preview = box.preview("write_file", {"path": "hello.py", "content": "print('hi')\n"})
        again = box.call("read_file", {"path": "hello.py"})
    assert preview.ok and "+print('hi')" in preview.output and again.ok
    assert not list(project.glob("PWNED-*")), sorted(p.name for p in project.glob("PWNED-*"))
