"""What a person sees on stderr while the agent works: a spinner while the model thinks,
streamed tokens, one line per tool call with its outcome, and (with --trace) everything.

Every string an event carries is untrusted (the model, the repository and the sandbox chose
it) and is printed inert: escape sequences and bidi characters shown, never interpreted."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.status import Status

from executor.hooks import Event, HookBus
from executor.text import inert_line, markup_safe


class ProgressView:
    """A hook subscriber that renders a run on a console (stderr)."""

    def __init__(self, console: Console, *, stream: bool = True, trace: bool = False) -> None:
        self.console = console
        self.stream = stream
        self.trace = trace
        self._status: Status | None = None
        self._streaming = False
        self._calls: dict[str, dict[str, Any]] = {}
        self.last_reply_streamed = False
        """Whether the latest model reply was shown token by token."""
        self._phase: str | None = None

    def attach(self, hooks: HookBus) -> None:
        """Subscribe to every event of `hooks`."""
        hooks.subscribe(self.handle)

    def handle(self, event: Event) -> None:
        """Render one event."""
        handler = getattr(self, f"_on_{event.kind}", None)
        if handler is not None:
            handler(event.data)

    def thinking(self) -> None:
        """Show the spinner until the next event arrives."""
        if self._status is None and self.console.is_terminal:
            self._status = self.console.status("[dim]model is thinking…[/]", spinner="dots")
            self._status.start()

    def close(self) -> None:
        """Stop the spinner and end a streamed line."""
        self._stop_spinner()
        self._end_stream()

    def _stop_spinner(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None

    def _end_stream(self) -> None:
        if self._streaming:
            self.console.print()
            self._streaming = False

    def _on_token(self, data: dict[str, Any]) -> None:
        if not self.stream:
            return
        self._stop_spinner()
        self.console.print(markup_safe(data["text"]), end="", style="dim")
        self._streaming = True

    def _on_model_request(self, data: dict[str, Any]) -> None:
        self.last_reply_streamed = self._streaming
        self.close()
        if self.trace:
            tokens = f"{data.get('prompt_tokens')}→{data.get('completion_tokens')} tokens"
            self.console.print(f"[blue]model[/] {markup_safe(data['model'], line=True)} "
                               f"{data['duration_ms']:.0f} ms, "
                               f"{tokens}\n[dim]{markup_safe(data.get('reply', ''))}[/]")

    def _on_tool_call(self, data: dict[str, Any]) -> None:
        self.close()
        self._calls[data["call_id"]] = data.get("arguments") or {}
        if data["decision"] != "allow":
            reason = markup_safe(data.get("reason", ""), line=True)
            self.console.print(f"[red]✗[/] {markup_safe(data['tool'], line=True)} refused: "
                               f"{reason} [dim]({markup_safe(data['rule'], line=True)})[/]")
        elif self.trace:
            args = json.dumps(data.get("arguments", {}), ensure_ascii=False)
            self.console.print(f"[cyan]→[/] {markup_safe(data['tool'], line=True)} "
                               f"{markup_safe(args)}")

    def _on_tool_result(self, data: dict[str, Any]) -> None:
        mark = "[green]✓[/]" if data["ok"] else "[yellow]![/]"
        meta = data.get("meta") or {}
        target = subject(self._calls.pop(data["call_id"], {}))
        self.console.print(f"{mark} {markup_safe(data['tool'], line=True)} {markup_safe(target)} "
                           f"[dim]{markup_safe(summarize(data))} "
                           f"{meta.get('duration_ms', 0):.0f} ms[/]")
        if self.trace:
            self.console.print(f"[dim]{markup_safe(str(data['output'])[:4000])}[/]")
        self.thinking()

    def _on_retry(self, data: dict[str, Any]) -> None:
        self.close()
        self.console.print(f"[yellow]retrying[/] model request (attempt {data.get('attempt')}): "
                           f"{markup_safe(data.get('reason', ''))}")
        self.thinking()

    def _on_warning(self, data: dict[str, Any]) -> None:
        self.close()
        self.console.print(f"[yellow]warning:[/] {markup_safe(data.get('message', ''))}")

    def _on_notice(self, data: dict[str, Any]) -> None:
        self.close()
        self.console.print(f"[dim]{markup_safe(data.get('message', ''))}[/]")

    def _on_progress(self, data: dict[str, Any]) -> None:
        """The embedded model loading: one line per phase, a live figure where there is one."""
        message = markup_safe(data.get("message", ""), line=True)
        if data.get("phase") != self._phase:
            self._phase = data.get("phase")
            self.close()
            self.console.print(f"[dim]{message}[/]")
            if data.get("fraction") is not None and self.console.is_terminal:
                self._status = self.console.status(f"[dim]{message}[/]")
                self._status.start()
        elif self._status is not None:
            self._status.update(f"[dim]{message}[/]")

    def _on_instructions(self, data: dict[str, Any]) -> None:
        """Project instructions (AGENTS.md): named in one line; their text under --trace."""
        self.close()
        cut = ", cut" if data.get("truncated") else ""
        self.console.print(f"[dim]project instructions: {markup_safe(data['source'], line=True)} "
                           f"({data.get('bytes')} bytes{cut}; text for the model, no "
                           "permissions)[/]")
        if self.trace:
            self.console.print(f"[dim]{markup_safe(data.get('text', ''))}[/]")

    def _on_complete(self, data: dict[str, Any]) -> None:
        self.close()

    def _on_error(self, data: dict[str, Any]) -> None:
        self.close()


def subject(arguments: dict[str, Any]) -> str:
    """The argument that says what a call is about (its path, command or pattern), one line."""
    for key in ("command", "path", "pattern"):
        if isinstance(arguments.get(key), str):
            text = str(arguments[key])  # cut before escaping: an escape is never cut in half
            return inert_line(text[:80]) + ("…" if len(text) > 80 else "")
    return ""


def summarize(data: dict[str, Any]) -> str:
    """A few words on a tool result: exit code, or the first line of an error."""
    meta = data.get("meta") or {}
    if meta.get("timed_out"):
        return "(timed out)"
    if "exit_code" in meta:
        return f"(exit {meta['exit_code']})"
    if data.get("ok"):
        return ""
    first = next((line for line in str(data.get("output", "")).split("\n") if line.strip()), "")
    return inert_line(first[:100]) + ("…" if len(first) > 100 else "")
