"""Shared fixtures."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# `tests.fakes` (and the source tree) must import however pytest is started: plain `pytest`,
# `python -m pytest`, or from another directory. `pythonpath = ["."]` in pyproject would do it.
_ROOT = str(Path(__file__).resolve().parents[1])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from tests.fakes.model_server import ModelServer  # noqa: E402


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started stand-in model server (Ollama + OpenAI) on 127.0.0.1, scripted per test."""
    with ModelServer() as server:
        yield server
