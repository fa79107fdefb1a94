"""The policy: allow, ask or deny each tool call, from flags, a TOML file and defaults per risk.

Precedence (the first that applies decides):

1. deny flags: `--deny-tool NAME`, `--deny-prefix PREFIX` (tool names), `--read-only` (tools
   not marked read-only safe), `--deny-command PREFIX` (shell commands);
2. the file's `[[rules]]`, first match wins;
3. `[defaults]` per risk level (built in: low allow, medium ask, high ask, critical deny);
   a tool that requires approval is never allowed by a default alone.

Then `--yes` turns `ask` into `allow` (never `deny` into anything), and `fail_closed` turns a
remaining `ask` into `deny` when there is no terminal to ask. `Policy.decide` does all of it;
`Policy.evaluate` stops before the terminal step, so the loop can tell "ask the user" from
"denied because non-interactive".

Shell commands (`run_shell_command`'s `command`) are parsed by `executor.shell.analyze` with a
real bash grammar into every simple command they run, anywhere in the text, each with its
words resolved (quotes and escapes removed), plus the reasons the text cannot be resolved
statically (`eval`, `sh -c`, wrappers like `timeout`, a program name known only at run time).

- deny and ask patterns (`--deny-command`, a rule's `prefix` or `regex`) are matched against
  every simple command. A prefix binds spellings: the program by basename (`/bin/rm`, `\\rm`,
  `'rm'` are `rm`), its further words against the command's normal form (`-rf` ≡ `-r -f`,
  `--recursive` ≡ `-r`, `git -C DIR push` ≡ `git push`); a regex is searched in several
  spellings of each simple command and in the whole text.
- fail closed: when a deny pattern might match but that cannot be told statically (an
  unresolved command, or an argument known only at run time), the call is denied with a
  reason saying why and how to rewrite it; an ask pattern asks.
- allow patterns are conservative: they match only a resolved command that is one simple
  command with nothing else (no operators, assignments, redirections, substitutions), and
  a prefix only word for word, as written.

The shell checks are defence in depth; the container is the boundary. See docs/POLICY.md.

The rooms: `decision` (verdicts, flags, one call's `Decision`, failing closed), `rules` (a
file's rules and their shell patterns), `layers` (the `Policy` that puts flags, rules and
defaults in order), `loading` (which files a run uses, and parsing them), `explanation`
(`policy explain`). This face re-exports their public names.
"""


from executor.policy.decision import (
    AUTO_EDIT_TOOLS,
    BUILTIN_DEFAULTS,
    BUILTIN_SOURCE,
    POLICY_FILE,
    SHELL_TOOL,
    USER_POLICY_HINT,
    VERDICTS,
    Decision,
    PolicyOverrides,
    ToolFacts,
    ToolInfo,
    Verdict,
    fail_closed,
)
from executor.policy.explanation import explain, shell_lines
from executor.policy.layers import Policy
from executor.policy.loading import (
    default_policy_path,
    load_policy,
    parse_policy,
    user_policy_path,
)
from executor.policy.rules import (
    CommandPattern,
    Hit,
    PolicyRegex,
    PrefixMatch,
    Rule,
    shell_of,
    spellings,
    starts_with_command,
)

__all__ = [
    "AUTO_EDIT_TOOLS", "BUILTIN_DEFAULTS", "BUILTIN_SOURCE", "POLICY_FILE", "SHELL_TOOL",
    "USER_POLICY_HINT", "VERDICTS", "CommandPattern", "Decision", "Hit", "Policy",
    "PolicyOverrides", "PolicyRegex", "PrefixMatch", "Rule", "ToolFacts", "ToolInfo", "Verdict",
    "default_policy_path", "explain", "fail_closed", "load_policy", "parse_policy", "shell_lines",
    "shell_of", "spellings", "starts_with_command", "user_policy_path",
]
