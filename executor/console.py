"""The Rich console every command prints through: untrusted text made inert (executor/text.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from executor.text import UNSAFE_RE, inert


class InertConsole(Console):
    """A Rich console that prints every piece of text inert (its own cursor moves excepted).

    The call sites make untrusted text inert where they format it (so tables measure it
    right); this catches a site that forgets. Emoji codes stay text too (`:cross_mark:` in a
    file is not shown as a mark).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Rich's segments, with the text of each one that is not a control code made inert."""
        for segment in super().render(renderable, options):
            if segment.control or not UNSAFE_RE.search(segment.text):
                yield segment
            else:
                yield Segment(inert(segment.text), segment.style)
