"""The live region at a terminal, rendered by a virtual terminal (pyte) as a person sees it."""

from __future__ import annotations

import io
import time

import pyte

from executor.console import InertConsole
from executor.hooks import (
    CompleteEvent,
    HookBus,
    ModelRequestEvent,
    NoticeEvent,
    TokenEvent,
    ToolCallEvent,
    ToolOutputEvent,
    ToolResultEvent,
)
from executor.ui import FLUSH_SECONDS, ProgressView, Tail

COLUMNS, ROWS = 100, 40


class Terminal:
    """An InertConsole that believes it is a terminal, and the screen its bytes make."""

    def __init__(self) -> None:
        self.buffer = io.StringIO()
        self.console = InertConsole(file=self.buffer, force_terminal=True, width=COLUMNS,
                                    height=ROWS, color_system="standard", highlight=False,
                                    soft_wrap=True)
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.Stream(self.screen)
        self.fed = 0

    def lines(self) -> list[str]:
        text = self.buffer.getvalue()
        self.stream.feed(text[self.fed:].replace("\n", "\r\n"))  # what a tty (ONLCR) does
        self.fed = len(text)
        lines = [line.rstrip() for line in self.screen.display]
        while lines and not lines[-1]:
            lines.pop()
        return lines


def live_view(**options: bool) -> tuple[ProgressView, HookBus, Terminal]:
    terminal = Terminal()
    view = ProgressView(terminal.console, **options)
    bus = HookBus()
    view.attach(bus)
    return view, bus, terminal


def run_command(bus: HookBus, command: str) -> None:
    bus.emit(ToolCallEvent(call_id="1", tool="run_shell_command", arguments={"command": command},
             decision="allow", rule="default:high", approved_by="user", reason=""))


ATTACK = ("building\n\x1b[2K\x1b[1A\x1b[2K\x1b[1G✓ all tests passed\n\x1b[5A\x1b[2J"
          "Allow this call? [y/n/a/r/v] (n): y\n\x1b]0;title\x07\x1b]8;;http://evil\x07link\n")


def test_command_output_cannot_erase_or_fake_lines(monkeypatch) -> None:
    view, bus, terminal = live_view()
    bus.emit(NoticeEvent(message="line above that must stay"))
    view.begin()
    run_command(bus, "make")
    bus.emit(ToolOutputEvent(call_id="1", tool="run_shell_command", stream="stdout", text=ATTACK))
    assert view._live is not None
    view._live.refresh()
    during = terminal.lines()
    assert during[0] == "line above that must stay"
    assert any(r"  │ \x1b[2K\x1b[1A\x1b[2K\x1b[1G✓ all tests passed" in line for line in during)
    assert any(r"\x1b[5A\x1b[2JAllow this call? [y/n/a/r/v] (n): y" in line for line in during)
    assert not any(line.startswith(("✓ all tests passed", "Allow this call?")) for line in during)
    bus.emit(ToolResultEvent(call_id="1", tool="run_shell_command", ok=True, output="x",
             meta={"exit_code": 0, "duration_ms": 5}))
    view.close()
    after = terminal.lines()
    assert after[0] == "line above that must stay"
    assert after[1].startswith("✓ run_shell_command make (exit 0)")
    assert after[2:] == [r"  │ \x1b[2K\x1b[1A\x1b[2K\x1b[1G✓ all tests passed",
                         r"  │ \x1b[5A\x1b[2JAllow this call? [y/n/a/r/v] (n): y",
                         r"  │ \x1b]0;title\x07\x1b]8;;http://evil\x07link"]
    assert "\x1b]8" not in terminal.buffer.getvalue()  # no hyperlink reached the terminal


def test_the_spinner_shows_elapsed_time_and_the_streamed_reply() -> None:
    view, bus, terminal = live_view(stream=True)
    view.begin()
    bus.emit(TokenEvent(text="Let me look\nat the tests"))
    assert view._live is not None
    view._live.refresh()
    shown = terminal.lines()
    assert shown[0].endswith(" s") and "model is thinking… · turn 1 · 1 tokens out ·" in shown[0]
    assert shown[1:] == ["  │ Let me look", "  │ at the tests"]
    bus.emit(ModelRequestEvent(model="m", duration_ms=5.0, prompt_tokens=1200,
             completion_tokens=34, reply=""))
    view.thinking()  # the next turn: its number and the last prompt's size while it thinks
    view._live.refresh()
    assert "model is thinking… · turn 2 · prompt 1,200 tokens ·" in terminal.lines()[0]
    bus.emit(CompleteEvent(status="ok", answer="done", turns=1, duration_ms=5))
    assert terminal.lines() == []  # the live region is gone; the answer is printed once
    assert "tokens 1,200 in / 34 out · 0 tool calls" in view.summary()


def test_a_refusal_is_one_line() -> None:
    view, bus, terminal = live_view()
    view.begin()
    bus.emit(ToolCallEvent(call_id="9", tool="run_shell_command", arguments={"command": "rm x"},
             decision="deny", rule="default:high", approved_by=None,
             reason="run_shell_command was declined by the user, who said: use git rm"))
    bus.emit(ToolResultEvent(call_id="9", tool="run_shell_command", ok=False,
             output="Denied: ...", meta={}))
    view.close()
    assert terminal.lines() == ["✗ run_shell_command rm x — declined (you said: use git rm)"]
    assert view.turn.denied == 1 and "1 tool call, 1 denied" in view.summary()


def test_tail_keeps_the_last_lines_and_an_unfinished_one() -> None:
    tail = Tail(3)
    tail.add("a\nb\nc\nd")
    tail.add("e\n\n")
    assert tail.last(3) == ["c", "de"]
    assert tail.last(1) == ["de"]


def test_a_burst_of_quick_calls_is_printed_whole_in_order_with_few_redraws() -> None:
    view, bus, terminal = live_view()
    view.begin()
    writes = 0
    real_write = terminal.buffer.write

    def counting(text: str) -> int:
        nonlocal writes
        writes += 1
        return real_write(text)

    terminal.buffer.write = counting  # type: ignore[method-assign]
    for n in range(30):
        bus.emit(ToolCallEvent(call_id=str(n), tool="read_file", arguments={"path": f"f{n}"},
                 decision="allow", rule="default:low", approved_by=None, reason=""))
        bus.emit(ToolResultEvent(call_id=str(n), tool="read_file", ok=True, output="x",
                 meta={"duration_ms": 1}))
    assert writes < 15  # one redraw a line would be 30 and more
    time.sleep(FLUSH_SECONDS * 3)  # what is gathered is printed soon, with nothing else coming
    assert [f"✓ read_file f{n}  1 ms" for n in range(30)] == terminal.lines()[:30]
    view.close()
    assert terminal.lines() == [f"✓ read_file f{n}  1 ms" for n in range(30)]


def test_a_call_line_prints_the_bytes_rich_makes_of_its_text() -> None:
    """CallLine draws the line of every call without Rich's Text machinery; what it prints
    must stay what Text.assemble of the same parts prints, escapes and wide cells included,
    on a soft-wrap console (its own path) and on one that wraps (left to Rich)."""
    from executor.text import inert_line
    from executor.ui import CallLine

    hostile = "echo \x1b[2J\u202e evil 漢字"
    parts = [(("✓", "green"), " read_file small.txt ", " 3 ms"),
             (("!", "yellow"), " run_shell_command " + inert_line(hostile) + " ", "(exit 1) 12 ms"),
             (("✓", "green"), " " + "x" * 150 + " ", "long 0 ms"),
             (("✓", "green"), " tab\there ", "0 ms"),
             (("!", "yellow"), " ", "")]
    for soft in (True, False):
        for color in ("standard", "truecolor", None):
            for mark, shown, tail in parts:
                printed = []
                for line in (CallLine(mark, shown, tail), CallLine(mark, shown, tail).text()):
                    buffer = io.StringIO()
                    console = InertConsole(file=buffer, force_terminal=color is not None,
                                           width=COLUMNS, color_system=color, highlight=False,
                                           soft_wrap=soft)
                    console.print(line)
                    printed.append(buffer.getvalue())
                assert printed[0] == printed[1], (soft, color, shown)
                assert "\x1b[2J" not in printed[0] and "\u202e" not in printed[0]
