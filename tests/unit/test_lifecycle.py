"""executor/lifecycle.py: `with` starts what it is given and stops it however the block ends."""

from __future__ import annotations

import pytest

from executor.lifecycle import StartStop


class Recorded(StartStop):
    def __init__(self) -> None:
        self.seen: list[str] = []

    def start(self) -> None:
        self.seen.append("start")

    def stop(self) -> None:
        self.seen.append("stop")


def test_a_block_starts_and_stops_even_when_it_raises():
    thing = Recorded()
    with pytest.raises(KeyError), thing as same:
        assert same is thing and thing.seen == ["start"]
        raise KeyError("x")
    assert thing.seen == ["start", "stop"]
