"""The library facade: `Runner.build(...)` wires the layers of DESIGN.md together.

    with Runner.build(root="./proj", provider="ollama", model="qwen2.5-coder:7b") as runner:
        runner.hooks.subscribe(print, "tool_call")
        result = runner.run("What does main.py do?")
        print(result.answer)

`build` does no I/O beyond reading what the run is allowed and told (its `Basis`: the policy,
the skills, AGENTS.md; a child session or a later phase gets its parent's instead); the model
server, the container, the session file and the audit log are started by `start()` (or the
first `run`) and the container is removed by `close()` (or leaving the `with` block).

The parts of `Runner`, each a base class of it over the shared `RunnerState`: `core` (build,
start, run, close, delegation), `sandboxes`, `sessions`, `wiring` (model, prompt, audit,
announcement), `approvals`; `options` holds what a run is given.
"""

from executor.runner.core import Runner
from executor.runner.options import (
    READ_ONLY_NOTE,
    SUMMARY_PROMPT,
    SYSTEM_PROMPT,
    Approval,
    Approver,
    RunOptions,
    SandboxFactory,
)

__all__ = [
    "READ_ONLY_NOTE",
    "SUMMARY_PROMPT",
    "SYSTEM_PROMPT",
    "Approval",
    "Approver",
    "RunOptions",
    "Runner",
    "SandboxFactory",
]
