"""Shared fixtures."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fakes.model_server import ModelServer


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    """A started stand-in model server (Ollama + OpenAI) on 127.0.0.1, scripted per test."""
    with ModelServer() as server:
        yield server
