"""The Rich console every command prints through: untrusted text made inert (executor/text.py)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from executor.text import PIPED_WIDTH, UNSAFE_RE, inert


class InertConsole(Console):
    """A Rich console that prints every piece of text inert (its own cursor moves excepted).

    The call sites make untrusted text inert where they format it (so tables measure it
    right); this catches a site that forgets. Emoji codes stay text too (`:cross_mark:` in a
    file is not shown as a mark).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)
        if "width" not in kwargs and not self.is_terminal and not os.environ.get("COLUMNS"):
            self.width = PIPED_WIDTH  # a pipe has no width: tables are not squeezed to 80

    def render(
        self, renderable: RenderableType, options: ConsoleOptions | None = None
    ) -> Iterable[Segment]:
        """Rich's segments, with the text of each one that is not a control code made inert."""
        for segment in super().render(renderable, options):
            if segment.control or not UNSAFE_RE.search(segment.text):
                yield segment
            else:
                yield Segment(inert(segment.text), segment.style)
