"""What a person sees on stderr while the agent works, and the answer on stdout.

At a terminal one live region at the bottom shows a spinner with the elapsed time while the
model thinks (with the last lines of its streamed reply) or a command runs (with the last
lines of its output, replaced in place); finished things are printed above it: one line per
tool call with its outcome, a command's last lines, and a final line with the wall time,
tokens in and out and the calls denied. Without a terminal there is no live region: the same
lines are printed plainly (and --stream prints tokens as they come).

Every string an event carries is untrusted (the model, the repository and the sandbox chose
it) and is printed inert: escape sequences and bidi characters shown, never interpreted, so
command output cannot move the cursor, erase a line or fake a prompt. The live region's own
cursor moves are Rich's, drawn from text made inert first.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from executor import toolmeta
from executor.text import inert, inert_line, markup_safe

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.live import Live
    from rich.status import Status
    from rich.text import Text

    from executor.hooks import (
        ChildEvent,
        CompleteEvent,
        ConnectionEvent,
        ErrorEvent,
        Event,
        HookBus,
        InstructionsEvent,
        ModelRequestEvent,
        NoticeEvent,
        ProgressEvent,
        RetryEvent,
        SandboxStartEvent,
        SkillsEvent,
        ThinkingEvent,
        TokenEvent,
        ToolCallEvent,
        ToolOutputEvent,
        ToolResultEvent,
        WarningEvent,
    )

TAIL_LINES = 4
"""Lines of a running command's output (or of a streamed reply) kept in the live region."""
AFTER_LINES = 3
"""Last lines of a command's output printed once it ended (at a terminal)."""
TAIL_CHARS = 16_384
"""Characters of an unfinished line kept (a progress bar redrawn with CR never ends its line)."""
SHELL_TOOL = "run_shell_command"
FLUSH_SECONDS = 0.1
"""At a terminal, lines printed above the live region are gathered for up to this long (a
ticking thread prints them if nothing else does): each print redraws the region, and a quick
call's prints were most of its host overhead (benchmarks/bench_calls.py)."""
FLUSH_LINES = 12
"""... and at most this many of them."""


class Tail:
    """The last lines of a stream of untrusted text (made inert only when shown)."""

    def __init__(self, limit: int = TAIL_LINES) -> None:
        self.lines: deque[str] = deque(maxlen=limit)
        self.partial = ""

    def add(self, text: str) -> None:
        """Append text as it came (lines end at newlines only)."""
        *done, self.partial = (self.partial + text).split("\n")
        self.lines.extend(line[-TAIL_CHARS:] for line in done)
        self.partial = self.partial[-TAIL_CHARS:]

    def last(self, count: int) -> list[str]:
        """The last `count` lines, an unfinished one included; blank trailing lines dropped."""
        lines = [*self.lines, self.partial] if self.partial else list(self.lines)
        while lines and not lines[-1].strip():
            lines.pop()
        return lines[-count:]


@dataclass
class Totals:
    """What a turn (or a session) used."""

    started: float = 0.0
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    calls: int = 0
    denied: int = 0
    connections: int = 0
    """Connections the sandbox asked the egress proxy for."""
    blocked: int = 0
    """Of those, the ones not allowed (or not reached)."""

    def add(self, other: Totals) -> None:
        """Fold a finished turn into a session's totals."""
        self.turns += other.turns
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.calls += other.calls
        self.denied += other.denied
        self.connections += other.connections
        self.blocked += other.blocked

    def line(self, elapsed: float) -> str:
        """`4.2 s · 2 model turns · tokens 1,234 in / 56 out · 3 tool calls, 1 denied`."""
        calls = f"{self.calls} tool call{'s' * (self.calls != 1)}"
        if self.denied:
            calls += f", {self.denied} denied"
        if self.connections:
            calls += (f" · {self.connections} connection{'s' * (self.connections != 1)}"
                      f"{f', {self.blocked} blocked' if self.blocked else ''}")
        return (f"{elapsed:.1f} s · {self.turns} model turn{'s' * (self.turns != 1)} · tokens "
                f"{self.prompt_tokens:,} in / {self.completion_tokens:,} out · {calls}")


THINKING = "model is thinking…"
"""The spinner's words while the model works (then with the turn and the tokens so far)."""


class CallLine:
    """A finished call's line, `✓ tool subject outcome 12 ms`: its mark styled, the rest as
    given (already inert) and its tail dim. What `Text.assemble` of the three prints, drawn
    without it where Rich would neither wrap nor crop it."""

    def __init__(self, mark: tuple[str, str], shown: str, tail: str) -> None:
        self.mark, self.shown, self.tail = mark, shown, tail

    def text(self) -> Text:
        """The same line as a Rich Text."""
        from rich.text import Text

        return Text.assemble(self.mark, self.shown, (self.tail, "dim"))

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        """The segments Rich makes of `text()` where overflow is ignored (a soft-wrap console:
        then Rich neither wraps, crops nor justifies), for one line without tabs; anything
        else is left to Rich. tests/unit/test_ui_live.py holds the bytes equal."""
        from rich.segment import Segment
        from rich.style import Style

        line = self.mark[0] + self.shown + self.tail
        if options.overflow != "ignore" or "\n" in line or "\t" in line:
            yield self.text()
            return
        null = Style.null()
        yield Segment(self.mark[0], Style.combine((null, console.get_style(self.mark[1]))))
        if self.shown:
            yield Segment(self.shown, Style.combine((null,)))
        if self.tail:
            yield Segment(self.tail, Style.combine((null, console.get_style("dim"))))
        yield Segment("\n")


class ProgressView:
    """A hook subscriber that renders a run on a console (stderr)."""

    def __init__(self, console: Console, *, stream: bool = True, trace: bool = False) -> None:
        self.console = console
        self.stream = stream
        self.trace = trace
        self.show_thinking = stream or trace
        """Whether the model's reasoning (thinking mode) is shown as it streams, dimmed."""
        self.prose = stream
        """Whether replies are prose (native tool calling): what the model writes beside its
        tool calls is shown, streamed or not."""
        self._thinking_now = False
        self.last_reply_streamed = False
        """Whether the latest model reply was shown token by token (without a terminal)."""
        self.turn = Totals(started=time.monotonic())
        """The request being answered (reset by `begin`)."""
        self.session = Totals(started=time.monotonic())
        """Every finished request of the session."""
        self._status: Status | None = None
        self._live: Live | None = None
        self._streaming = False
        self._phase: str | None = None
        self._calls: dict[str, dict[str, Any]] = {}
        self._refused: set[str] = set()
        self._activity = THINKING
        self._since = time.monotonic()
        self._pieces = 0
        """Streamed pieces (a token each, from llama.cpp and Ollama) of the reply coming in."""
        self._last_prompt: int | None = None
        """Prompt tokens of the latest request, as the server reported them."""
        self._tail = Tail()
        self._outputs: dict[str, Tail] = {}
        self._running: dict[str, str] = {}
        """What each call still running is (`tool subject`), for an interruption."""
        self._started: dict[str, float] = {}
        """When each call still running started."""
        self._prose = ""
        self._pending: list[Text | CallLine] = []
        """Lines to print above the live region (see FLUSH_SECONDS)."""
        self._flushed = 0.0
        self._ticking: threading.Event | None = None
        """Set to stop the thread that prints gathered lines while the live region is up."""
        self._lock = threading.RLock()  # approvals close the view from the proxy's thread

    @property
    def live(self) -> bool:
        """Whether the live region is used (the console is a terminal)."""
        return bool(self.console.is_terminal)

    def attach(self, hooks: HookBus) -> None:
        """Subscribe to every event of `hooks`."""
        hooks.subscribe(self.handle)

    def handle(self, event: Event) -> None:
        """Render one event."""
        handler = getattr(self, f"_on_{event.kind}", None)
        if handler is not None:
            handler(event)

    # -- the live region ---------------------------------------------------------------------

    def begin(self) -> None:
        """A request starts: new turn totals, and the spinner."""
        self.turn = Totals(started=time.monotonic())
        self._refused.clear()
        self._prose = ""
        self.thinking()

    def thinking(self, activity: str = THINKING) -> None:
        """Show the spinner (with the elapsed time) until something is printed."""
        self._activity, self._since, self._tail = activity, time.monotonic(), Tail()
        if self.live and self._live is None:
            from rich.live import Live

            self._live = Live(get_renderable=self._render, console=self.console,
                              refresh_per_second=8, transient=True, redirect_stdout=False,
                              redirect_stderr=False)
            self._live.start()
            # one thread for the region's life, not a timer a batch: starting a thread waits
            # for it to be scheduled, which on a busy machine cost more than the batch's print
            self._ticking = threading.Event()
            threading.Thread(target=self._tick, args=(self._ticking,), daemon=True,
                             name="progress-flush").start()

    def _render(self) -> RenderableType:
        from rich.console import Group
        from rich.spinner import Spinner
        from rich.text import Text

        elapsed = time.monotonic() - self._since
        head = Spinner("dots", Text.assemble((self._activity, "dim"),
                                             (self._progress(), "dim"), f" {elapsed:.1f} s"))
        width = max(20, self.console.width - 4)
        lines = [Text("  │ " + _crop(inert_line(line), width), style="dim", no_wrap=True)
                 for line in self._tail.last(TAIL_LINES)]
        return Group(head, *lines)

    def _progress(self) -> str:
        """While the model works: ` · turn 3 · prompt 3,412 tokens · 45 tokens out ·`."""
        if self._activity != THINKING:
            return ""
        parts = [f"turn {self.turn.turns + 1}"]
        if self._last_prompt:
            parts.append(f"prompt {self._last_prompt:,} tokens")
        if self._pieces:
            parts.append(f"{self._pieces:,} tokens out")
        return " · " + " · ".join(parts) + " ·"

    def close(self) -> None:
        """Print what is gathered, stop the live region and the spinner, end a streamed line."""
        with self._lock:
            self._flush()
            if self._live is not None:
                self._live.stop()
                self._live = None
            if self._ticking is not None:
                self._ticking.set()
                self._ticking = None
        if self._status is not None:
            self._status.stop()
            self._status = None
        if self._streaming:
            self.console.print()
            self._streaming = False

    def _print(self, text: str | Text | CallLine, **kwargs: Any) -> None:
        """Print above the live region (which goes on; gathered, see FLUSH_SECONDS), or
        plainly without one."""
        if self._streaming:
            self.console.print()
            self._streaming = False
        if self._live is None:
            self.console.print(text, **kwargs)
            return
        line: Text | CallLine = text if not isinstance(text, str) else self.console.render_str(
            text, style=kwargs.get("style", ""), markup=kwargs.get("markup"),
            highlight=kwargs.get("highlight"))
        if not isinstance(line, CallLine):
            line.no_wrap, line.overflow = kwargs.get("no_wrap"), kwargs.get("overflow")
        with self._lock:
            self._pending.append(line)
            if (len(self._pending) >= FLUSH_LINES
                    or time.monotonic() - self._flushed >= FLUSH_SECONDS):
                self._flush()

    def _tick(self, stop: threading.Event) -> None:
        """Every FLUSH_SECONDS while the live region is up, print what is gathered (only then:
        `_flushed` stays the time of the last print, so a line after a quiet spell is at once)."""
        while not stop.wait(FLUSH_SECONDS):
            with self._lock:
                if not stop.is_set() and self._live is not None and self._pending:
                    self._flush()

    def _flush(self) -> None:
        """Print the gathered lines, with one redraw of the live region."""
        if self._pending:
            from rich.console import Group

            lines, self._pending = self._pending, []
            self.console.print(Group(*lines))
        self._flushed = time.monotonic()

    # -- events ------------------------------------------------------------------------------

    def _on_thinking(self, event: ThinkingEvent) -> None:
        """The model's reasoning: dim and inert, apart from its reply (and never the answer)."""
        self._pieces += 1
        if not self.show_thinking:
            return
        text = event.text
        if self._live is not None:
            self._tail.add(text)
            return
        if not self._thinking_now:
            self._print("thinking: ", end="", style="dim italic", markup=False)
            self._thinking_now = True
        self.console.print(markup_safe(text), end="", style="dim italic")
        self._streaming = True

    def _on_token(self, event: TokenEvent) -> None:
        self._pieces += 1
        if self._thinking_now and self._live is None:  # the reply starts on a line of its own
            self._print("", end="")
            self._thinking_now = False
        if not self.stream:  # a tool protocol's JSON is not worth showing
            return
        text = event.text
        self._prose += text
        if self._live is not None:
            self._tail.add(text)
        else:
            self.console.print(markup_safe(text), end="", style="dim")
            self._streaming = True

    def _on_model_request(self, event: ModelRequestEvent) -> None:
        self._thinking_now = False
        self.last_reply_streamed = self._streaming
        if self._streaming:
            self.console.print()
            self._streaming = False
        self._tail = Tail()
        if self.prose and not self._prose.strip():  # not streamed: the reply says it whole
            self._prose = event.reply
        self._pieces, self._last_prompt = 0, event.prompt_tokens or self._last_prompt
        self.turn.turns += 1
        self.turn.prompt_tokens += event.prompt_tokens or 0
        self.turn.completion_tokens += event.completion_tokens or 0
        if self.trace:
            tokens = f"{event.prompt_tokens}→{event.completion_tokens} tokens"
            self._print(f"[blue]model[/] {markup_safe(event.model, line=True)} "
                        f"{event.duration_ms:.0f} ms, "
                        f"{tokens}\n[dim]{markup_safe(event.reply)}[/]")

    def show_prose(self) -> None:
        """What the model wrote beside its tool calls (streamed live; kept once they come):
        before an approval prompt, so "I'll add multiply." is read before the call is."""
        prose, self._prose = self._prose.strip(), ""
        if prose and self.live and not self.trace:
            self._print(inert(prose), style="dim", markup=False, highlight=False)

    def _on_tool_call(self, event: ToolCallEvent) -> None:
        self.show_prose()
        self.turn.calls += 1
        arguments = event.arguments
        self._calls[event.call_id] = arguments
        if event.decision != "allow":
            self.turn.denied += 1
            self._refused.add(event.call_id)
            self._print(_refusal(event.data, arguments))
            self.thinking()
            return
        if self.trace:
            args = json.dumps(arguments, ensure_ascii=False)
            self._print(f"[cyan]→[/] {markup_safe(event.tool, line=True)} {markup_safe(args)}")
        self._outputs[event.call_id] = Tail(AFTER_LINES + TAIL_LINES)
        what = f"{inert_line(event.tool)} {subject(arguments)}".strip()
        self._running[event.call_id] = what
        self._started[event.call_id] = time.monotonic()
        self.thinking(what)

    def _on_tool_output(self, event: ToolOutputEvent) -> None:
        output = self._outputs.get(event.call_id)
        if output is not None:
            output.add(event.text)
        self._tail.add(event.text)

    def _on_tool_result(self, event: ToolResultEvent) -> None:
        call_id = event.call_id
        arguments = self._calls.pop(call_id, {})
        output = self._outputs.pop(call_id, None)
        what, started = self._running.pop(call_id, None), self._started.pop(call_id, None)
        if call_id in self._refused:  # its one line is already printed
            self._refused.discard(call_id)
            return
        if toolmeta.interrupted(event.meta):  # no result, no model turn after it: say so
            self.close()
            ran = f" after {time.monotonic() - started:.1f} s" if started is not None else ""
            self._print(f"[yellow]✗ interrupted:[/] {markup_safe(what or event.tool)}"
                        f"[dim]{ran}[/]")
            self._last_lines(output, "")
            return
        # its own renderable, not markup: the line of every call, parsing it cost more than
        # drawing it, and so did Rich's wrapping of a line a soft-wrap console never wraps
        mark = ("✓", "green") if event.ok else ("!", "yellow")
        shown = f" {inert_line(event.tool)} {inert_line(subject(arguments))} "
        self._print(CallLine(mark, shown, f"{inert_line(summarize(event.data))} "
                                          f"{toolmeta.duration_ms(event.meta) or 0:.0f} ms"))
        if self.trace:
            self._print(f"[dim]{markup_safe(event.output[:4000])}[/]")
        elif self.live and event.tool == SHELL_TOOL:
            self._last_lines(output, event.output)
        self.thinking()

    def interrupted(self) -> None:
        """Ctrl-C: the live region goes, so each call still running is named as interrupted,
        with the last lines it printed (they were only in the live region)."""
        self.close()
        for call_id, what in self._running.items():
            self._print(f"[yellow]✗ interrupted:[/] {markup_safe(what)}")
            self._last_lines(self._outputs.get(call_id), "")
        self._running.clear()
        self._started.clear()
        self._outputs.clear()

    def _last_lines(self, output: Tail | None, result: str) -> None:
        """A finished command's last lines: what streamed, else from its result."""
        lines = output.last(AFTER_LINES) if output is not None else []
        if not lines:
            lines = _result_tail(result, AFTER_LINES)
        width = max(20, self.console.width - 4)
        for line in lines:
            self._print("  │ " + _crop(inert_line(line), width), style="dim", markup=False,
                        highlight=False, no_wrap=True, overflow="crop")

    def _on_sandbox_start(self, event: SandboxStartEvent) -> None:
        how = "re-attached" if event.reattached else "started"
        self._print(f"[dim]sandbox {markup_safe(event.container_name, line=True)} "
                    f"{how} ({(event.duration_ms or 0) / 1000:.1f} s)[/]")

    def _on_retry(self, event: RetryEvent) -> None:
        self._print(f"[yellow]retrying[/] model request (attempt {event.attempt}): "
                    f"{markup_safe(event.reason)}")

    def _on_connection(self, event: ConnectionEvent) -> None:
        """Count it; a blocked one gets a line (the person may want to allow it)."""
        self.turn.connections += 1
        if event.decision == "allowed":
            return
        self.turn.blocked += 1
        where = markup_safe(f"{event.host}:{event.port}", line=True)
        self._print(f"[yellow]network:[/] {event.decision} {where}: "
                    f"{markup_safe(event.reason[:200], line=True)}")

    def _on_warning(self, event: WarningEvent) -> None:
        self._print(f"[yellow]warning:[/] {markup_safe(event.message, line=True)}")

    def _on_notice(self, event: NoticeEvent) -> None:
        self._print(f"[dim]{markup_safe(event.message, line=True)}[/]")

    def _on_progress(self, event: ProgressEvent) -> None:
        """The embedded model loading: one line per phase, a live figure where there is one."""
        message = markup_safe(event.message, line=True)
        if event.phase != self._phase:
            self._phase = event.phase
            self.close()
            self.console.print(f"[dim]{message}[/]")
            if event.fraction is not None and self.console.is_terminal:
                self._status = self.console.status(f"[dim]{message}[/]")
                self._status.start()
        elif self._status is not None:
            self._status.update(f"[dim]{message}[/]")

    def _on_instructions(self, event: InstructionsEvent) -> None:
        """Project instructions (AGENTS.md): named in one line; their text under --trace."""
        self.close()
        cut = ", cut" if event.truncated else ""
        self.console.print(f"[dim]project instructions: {markup_safe(event.source, line=True)} "
                           f"({event.bytes} bytes{cut}; text for the model, no "
                           "permissions)[/]")
        if self.trace:
            self.console.print(f"[dim]{markup_safe(event.text)}[/]")

    def _on_skills(self, event: SkillsEvent) -> None:
        """Prompt skills: the project's named in one line; every one, hashed, under --trace."""
        skills = event.skills
        project = [s for s in skills if s.get("source") == "project"]
        self.close()
        if project:
            names = ", ".join(str(s.get("id")) for s in project)
            self.console.print(f"[dim]project skills: {markup_safe(names, line=True)} "
                               "(repository text you trusted; no permissions)[/]")
        if not self.trace:
            return
        for skill in skills:
            self.console.print(f"[dim]skill {markup_safe(skill.get('id'), line=True)} "
                               f"({markup_safe(skill.get('source'), line=True)}, "
                               f"{markup_safe(skill.get('path'), line=True)}, sha256 "
                               f"{markup_safe(skill.get('sha256'), line=True)}): "
                               f"{markup_safe(skill.get('description'), line=True)}[/]")
            if skill.get("text"):
                self.console.print(f"[dim]{markup_safe(skill['text'])}[/]")

    def _on_child_event(self, event: ChildEvent) -> None:
        """A delegated child session's activity, indented under the delegate call."""
        kind, inner = event.event, event.payload
        child = markup_safe(event.session, line=True)
        if kind == "tool_call":
            self._calls[f"child:{inner.get('call_id')}"] = inner.get("arguments") or {}
            if inner.get("decision") != "allow":
                self._refused.add(f"child:{inner.get('call_id')}")
                self._print(f"  [dim]↳ {child}[/] {_refusal(inner, inner.get('arguments') or {})}")
        elif kind == "tool_result":
            arguments = self._calls.pop(f"child:{inner.get('call_id')}", {})
            if f"child:{inner.get('call_id')}" in self._refused:  # its one line is printed
                self._refused.discard(f"child:{inner.get('call_id')}")
                return
            mark = "[green]✓[/]" if inner.get("ok") else "[yellow]![/]"
            what = (f"{markup_safe(inner.get('tool'), line=True)} "
                    f"{markup_safe(subject(arguments), line=True)}")
            outcome = markup_safe(summarize(inner), line=True)
            self._print(f"  [dim]↳ {child}[/] {mark} {what} [dim]{outcome}[/]")
        elif kind in ("warning", "notice", "sandbox_start"):
            text = inner.get("message") or f"sandbox {inner.get('container_name', '')} started"
            self._print(f"  [dim]↳ {child} {markup_safe(text, line=True)}[/]")

    def _on_complete(self, event: CompleteEvent) -> None:
        self.close()
        self._prose = ""
        self.session.add(self.turn)

    def _on_error(self, event: ErrorEvent) -> None:
        self.close()

    # -- after a request ---------------------------------------------------------------------

    def summary(self) -> str:
        """The final line of a request: wall time, model turns, tokens, calls and denials."""
        return self.turn.line(time.monotonic() - self.turn.started)


def _refusal(data: dict[str, Any], arguments: dict[str, Any]) -> str:
    """One line for a refused call: what it was, why, and the rule that said so."""
    what = f"{markup_safe(data['tool'], line=True)} {markup_safe(subject(arguments))}".strip()
    reason = markup_safe(data.get("reason", ""), line=True)
    if data.get("approved_by") is None and "declined by the user" in str(data.get("reason")):
        said = str(data.get("reason")).partition(", who said: ")[2]
        why = f"you said: {markup_safe(said, line=True)}" if said else "you said no"
        return f"[red]✗[/] {what} [dim]— declined ({why})[/]"
    return f"[red]✗[/] {markup_safe(data['tool'], line=True)} refused: {reason} " \
           f"[dim]({markup_safe(data['rule'], line=True)})[/]"


def _crop(text: str, width: int) -> str:
    """The end of a long line (what a command printed last), marked where it was cut."""
    return text if len(text) <= width else "…" + text[-(width - 1):]


def _result_tail(result: str, count: int) -> list[str]:
    """The last lines of the stdout/stderr sections of a shell result."""
    body = result.split("\nstdout:\n", 1)[-1] if "\nstdout:\n" in result else (
        result.split("\nstderr:\n", 1)[-1] if "\nstderr:\n" in result else "")
    lines = [line for line in body.split("\n") if line.strip() and line not in ("stderr:",)]
    return lines[-count:]


def subject(arguments: dict[str, Any]) -> str:
    """The argument that says what a call is about (its path, command or pattern), one line."""
    for key in ("command", "path", "pattern", "task"):
        if isinstance(arguments.get(key), str):
            text = str(arguments[key])  # cut before escaping: an escape is never cut in half
            return inert_line(text[:80]) + ("…" if len(text) > 80 else "")
    return ""


def summarize(data: dict[str, Any]) -> str:
    """A few words on a tool result: exit code, or the first line of an error."""
    meta = data.get("meta") or {}
    if toolmeta.timed_out(meta):
        return "(timed out)"
    if toolmeta.ran_command(meta):
        return f"(exit {toolmeta.exit_code(meta)})"
    if data.get("ok"):
        return ""
    first = next((line for line in str(data.get("output", "")).split("\n") if line.strip()), "")
    return inert_line(first[:100]) + ("…" if len(first) > 100 else "")


def show_answer(answer: str, console: Console) -> None:
    """The answer on stdout: rendered as markdown at a terminal, the data itself in a pipe.

    At a terminal it is made inert first, so markdown cannot carry an escape sequence, and links
    are shown with their real target beside their text, never as hidden terminal hyperlinks.
    """
    if not sys.stdout.isatty():
        sys.stdout.write(answer.encode("utf-8", "backslashreplace").decode("utf-8") + "\n")
        sys.stdout.flush()
        return
    from rich.markdown import Markdown

    console.print(Markdown(inert(answer), hyperlinks=False, code_theme="ansi_dark"))
