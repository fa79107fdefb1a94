"""One `Model` Protocol for every provider; loading and serving as Protocols of their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from executor.delegation import BorrowedModel
from executor.models.embedded import EmbeddedModel
from executor.models.fake import ScriptedModel
from executor.models.ollama import OllamaModel
from executor.models.openai import OpenAIModel
from executor.protocols import LoadingModel, Model, ServedModel
from executor.runner import Runner
from tests.fakes.sandbox import FakeSandbox

MODELS: dict[str, Callable[[], Model]] = {
    "ollama": lambda: OllamaModel("m", host="http://127.0.0.1:9"),
    "openai": lambda: OpenAIModel("m", base_url="http://127.0.0.1:9/v1"),
    "embedded": lambda: EmbeddedModel(),
    "scripted": lambda: ScriptedModel(["done"]),
    "borrowed": lambda: BorrowedModel(ScriptedModel(["done"], tool_protocol="constrained")),
}


@pytest.mark.parametrize("name", MODELS)
def test_every_model_satisfies_the_protocol(name: str) -> None:
    model = MODELS[name]()
    try:
        assert isinstance(model, Model)
        assert model.tool_protocol in ("native", "json", "constrained")
        assert isinstance(model, ServedModel) == (name in ("ollama", "openai"))
        assert isinstance(model, LoadingModel) == (name == "embedded")
    finally:
        model.close()


def test_a_borrowed_model_keeps_the_lenders_protocol_and_stays_open() -> None:
    lender = ScriptedModel(["done"], tool_protocol="constrained")
    borrowed = BorrowedModel(lender)
    borrowed.close()
    assert borrowed.tool_protocol == "constrained" and not lender.closed


class Loading(ScriptedModel):
    """A scripted model that loads first, reporting one step."""

    def start(self, progress: Callable[..., None] | None = None) -> object:
        from executor.models.embedded import LoadProgress

        if progress is not None:
            progress(LoadProgress(phase="verify", done_bytes=1, total_bytes=2))
        return self


def test_the_runner_starts_a_loading_model_with_progress_on_the_bus(tmp_path: Path) -> None:
    runner = Runner.build(tmp_path, model=Loading(["done"]), sandbox=FakeSandbox(), audit=False)
    seen: list[tuple[str, float | None]] = []
    runner.hooks.subscribe(lambda e: seen.append((e.data["phase"], e.data["fraction"])),
                           "progress")
    with runner:
        assert runner.run("hi").answer == "done"
    assert seen == [("verify", 0.5)]
