"""Library log records on the terminal as our own lines: `warning: …`, one line, inert.

Without a handler, Python's last-resort one writes a library's warning to stderr as it is: any
length, several lines, control characters and all (a message may quote a server or a file
name). The CLI routes WARNING and above of every logger, and Python's `warnings` too, through
`TerminalLines`; a room that keeps its loggers' lines elsewhere (doctor --security's notes,
the OpenTelemetry SDK's export failures) stops them from propagating here meanwhile.

`executor.cli.main` installs it when something first imports `logging` (a command that never
logs does not pay for the import).
"""

from __future__ import annotations

import logging

from executor.text import inert_line

LINE_LIMIT = 300
"""Characters of a record's message shown (its first line only)."""


class TerminalLines(logging.Handler):
    """Each record as one `warning:` (or `error:`) line on stderr, inert and cut short."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)

    def emit(self, record: logging.LogRecord) -> None:
        from executor.cli.common import err_console

        try:  # through the console: above a live region, never through it
            err_console.print(line_for(record), markup=False, highlight=False, soft_wrap=True)
        except Exception:  # a log line is never worth a failed command
            self.handleError(record)


def line_for(record: logging.LogRecord) -> str:
    """`warning: MESSAGE (Type: reason)`: the first line of the message, the exception's kind."""
    text = record.getMessage()
    if record.name == "py.warnings":  # "file:line: Category: message\n  source": the middle
        text = text.split(": ", 1)[-1]
    first = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        first += f" ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    kind = "warning" if record.levelno < logging.ERROR else "error"
    shown = inert_line(first)
    return f"{kind}: {shown if len(shown) <= LINE_LIMIT else shown[:LINE_LIMIT - 1] + '…'}"


def route() -> None:
    """Send every logger's warnings (and Python's `warnings`) to `TerminalLines`, once."""
    root = logging.getLogger()
    if not any(isinstance(handler, TerminalLines) for handler in root.handlers):
        root.addHandler(TerminalLines())
    logging.captureWarnings(True)
