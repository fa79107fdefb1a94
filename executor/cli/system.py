"""`doctor`, `image build` and `gc`: the machinery around the agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.choices import DEFAULT_BASE_IMAGE, DEFAULT_IMAGE
from executor.cli.common import cli_errors, echo_result, err_console, fail, out_console
from executor.cli.fixes import ENGINE_SCHEMES, fix_for
from executor.cli.options import HostOpt, ProviderOpt
from executor.errors import (
    ConfigError,
    ImageNotFoundError,
    ModelResponseError,
    RuntimeNotFoundError,
    SandboxAgentError,
)
from executor.sandbox.engine import (
    IMAGE_FIX,
    RUNTIME_FIX,
    connect,
    endpoint,
    engine_version,
    is_podman,
    runtimes,
)
from executor.text import inert, inert_line, markup_safe

if TYPE_CHECKING:  # imported where used: `--help` must not load pydantic or the docker SDK
    from executor.config import Settings
    from executor.protocols import Model, ServedModel

image_app = typer.Typer(help="Build the sandbox image, or ship it to another engine.",
                        no_args_is_help=True)

Check = Callable[[], str]


@image_app.command("build")
@cli_errors
def image_build(
    base: Annotated[
        str, typer.Option("--base", help="Base image (needs python3 >= 3.9).")
    ] = DEFAULT_BASE_IMAGE,
    tag: Annotated[str, typer.Option("--tag", help="Name of the image to build.")] = DEFAULT_IMAGE,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only print the result.")] = False,
) -> None:
    """Build the sandbox image FROM --base (python:3.12-slim; offline: make base-image)."""
    progress = (
        (lambda line: None) if quiet
        else (lambda line: err_console.print(inert_line(line), markup=False))
    )
    from executor.sandbox.image import build_image

    image_id = build_image(tag, base, progress=progress)
    err_console.print(f"built [bold]{markup_safe(tag, line=True)}[/] ({image_id[:19]}) from "
                      f"{markup_safe(base, line=True)}")


@image_app.command("copy")
@cli_errors
def image_copy(
    to: Annotated[
        str, typer.Option("--to", help="The engine to ship to: unix:///PATH, tcp://HOST:PORT "
                                       "(TLS from DOCKER_TLS_VERIFY / DOCKER_CERT_PATH) or "
                                       "ssh://USER@HOST.")
    ],
    image: Annotated[str, typer.Option("--image", help="The image to ship.")] = DEFAULT_IMAGE,
) -> None:
    """Ship the sandbox image from this engine (DOCKER_HOST, else the local socket) to another
    one that cannot pull or build it. Where it can, `image build` on that engine is better."""
    from executor.sandbox.image import copy_image

    if not to.startswith(ENGINE_SCHEMES):  # the SDK's "Invalid bind address format" says less
        raise ConfigError(f"--to {to!r} is not an engine URL",
                          fix="pass unix:///PATH, tcp://HOST:PORT or ssh://USER@HOST")
    image_id = copy_image(image, to, progress=lambda line: err_console.print(inert_line(line),
                                                                          markup=False))
    err_console.print(f"{markup_safe(endpoint(to), line=True)} has "
                      f"[bold]{markup_safe(image, line=True)}[/] ({image_id[:19]})")


@cli_errors
def gc(
    root: Annotated[
        Path | None,
        typer.Option(
            "--root", "-r", help="Only containers of this project root.", file_okay=False,
            resolve_path=True, show_default=False,
        ),
    ] = None,
    all_hosts: Annotated[
        bool, typer.Option("--all-hosts", help="Also containers made from other hosts.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Also remove containers of running sessions.")
    ] = False,
    deps: Annotated[
        bool, typer.Option("--deps", help="Also remove the project's package volume (what "
                           "`pip install` in its sandboxes installed); needs --root.")
    ] = False,
) -> None:
    """Remove sandbox containers whose session is no longer running (e.g. after a crash)."""
    if root is not None and not root.is_dir():
        raise ConfigError(f"project root {root} does not exist",
                          fix="pass the root the sessions ran on, or leave out --root")
    if deps and root is None:
        raise ConfigError("--deps removes one project's package volume",
                          fix="add --root DIR")
    from executor.sandbox.gc import gc as collect

    result = collect(root=str(root) if root else None, all_hosts=all_hosts, force=force)
    for name in result.removed:
        out_console.print(f"removed {inert_line(name)}", markup=False)
    for note in result.notes:
        err_console.print(f"warning: {inert_line(note)}", markup=False, highlight=False)
    if deps and root is not None:
        from executor.network.deps import deps_volume, remove_deps
        from executor.sandbox.engine import connect

        if remove_deps(connect(), root):
            out_console.print(f"removed volume {deps_volume(root)}", markup=False)
    swept = f", {result.locks_removed} free lock files removed" if result.locks_removed else ""
    err_console.print(
        f"[dim]{len(result.removed)} removed, {len(result.in_use)} in use, "
        f"{len(result.skipped)} from other hosts left alone{swept}[/]"
    )


def doctor(
    provider: ProviderOpt = None,
    host: HostOpt = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="The model to check the server has (default: the one "
                     "ask would use; Ollama's :latest tag may be left out).",
                     show_default=False),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Sandbox image to check.", show_default=False)
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="OCI runtime to check (e.g. runsc).", show_default=False),
    ] = None,
    security: Annotated[
        bool,
        typer.Option(
            "--security",
            help="Instead of the model server, run the security probes: the attacks the tests "
            "use, in a throwaway project with real containers on this engine and runtime; "
            "exit 1 when any guarantee does not hold.",
        ),
    ] = False,
) -> None:
    """Check the engine and its runtimes, the sandbox image and the model server (and model);
    print fixes. With --security, attack the sandbox on this engine instead of the model checks."""
    from executor.config import load_settings

    values = {"provider": provider, "host": host, "model": model, "image": image,
              "runtime": runtime}
    try:
        settings = load_settings({k: v for k, v in values.items() if v is not None})
    except ConfigError as exc:
        raise fail(exc) from None
    client: dict[str, Any] = {}
    checks: list[tuple[str, Check]] = [
        ("Docker engine", lambda: _engine(client)),
        (f"sandbox image {settings.image}", lambda: _image(client, settings.image)),
    ]
    if settings.runtime:
        checks.append((f"runtime {settings.runtime}", lambda: _runtime(client, settings)))
    if not security:
        checks.append((f"model provider {settings.provider}", lambda: _model(settings)))
    wanted = model_to_check(settings)
    if not security and wanted:
        checks.append((f"model {wanted}", lambda: _has_model(settings, wanted)))
    failed = [name for name, check in checks if not _run_check(name, check)]
    if failed or (security and not _security(settings)):
        raise typer.Exit(1)


def _run_check(name: str, check: Check) -> bool:
    try:
        detail = check()
    except SandboxAgentError as exc:
        # A model server's error text is the server's choice: shown inert.
        out_console.print(f"[red]✗[/] {markup_safe(name)}: {markup_safe(exc.message)}")
        fix = fix_for(exc)
        if fix:
            out_console.print(f"    fix: {inert(fix)}", markup=False)
        return False
    out_console.print(f"[green]✓[/] {markup_safe(name)}: {markup_safe(detail)}")
    return True


def _engine(client: dict[str, Any]) -> str:
    docker = client["docker"] = connect(timeout=60)
    name = "Podman" if is_podman(docker) else "Docker"
    offered, default = runtimes(docker)
    listed = f"runtimes: {', '.join(offered)}; default {default}"
    if name == "Podman":  # its list is containers.conf's, and its Docker API ignores a choice
        listed = f"runtime {default} (its Docker-compatible API runs every container with it)"
    return f"{name} {engine_version(docker)} at {endpoint()} ({listed})"


def _runtime(client: dict[str, Any], settings: Settings) -> str:
    docker = client.get("docker") or connect(timeout=10)
    if is_podman(docker):
        raise RuntimeNotFoundError("Podman's Docker-compatible API ignores the runtime a "
                                   "container asks for", fix=RUNTIME_FIX)
    offered, _ = runtimes(docker)
    if settings.runtime not in offered:
        raise RuntimeNotFoundError(f"the engine has no runtime {settings.runtime!r}",
                                   fix=RUNTIME_FIX)
    return f"offered ({offered[str(settings.runtime)]})"


def _security(settings: Settings) -> bool:
    """Run the probes, one line each as it ends; whether every guarantee held."""
    from rich.text import Text

    from executor.sandbox.docker import DockerSandbox, SandboxConfig
    from executor.sandbox.probes import PROBES, noted, run_probes

    template = SandboxConfig(
        root=Path("/"), session_id="probe", image=settings.image, runtime=settings.runtime,
        memory=settings.memory, pids_limit=settings.pids_limit, cpus=settings.cpus,
        tmp_size=settings.tmp_size, tool_timeout=10)
    out_console.print(f"security probes ({len(PROBES)}, a throwaway project, real containers):",
                      markup=False)

    def show(result: Any) -> None:
        verdict = (Text("FAIL", style="bold red") if not result.passed else
                   Text("WARN", style="yellow") if result.warning else Text("PASS", style="green"))
        out_console.print(Text.assemble("  ", verdict, f"  {result.name:<13} {result.guarantee}"))
        out_console.print(Text(f"        {result.detail}", style="dim"))

    with noted() as notes:
        try:
            results = run_probes(template, lambda c: DockerSandbox(c, warn=notes.note),
                                 progress=show)
        except SandboxAgentError as exc:
            error = exc
            results = []
    _save_notes(notes)
    if not results:
        return _run_check("security probes", lambda: _raise(error))
    failed = [r.name for r in results if not r.passed]
    warned = [r.name for r in results if r.warning]
    summary = f"{len(results)} probes, {len(results) - len(failed)} passed"
    summary += f" ({len(warned)} with a warning: {', '.join(warned)})" if warned else ""
    out_console.print(summary + (f"; FAILED: {', '.join(failed)}" if failed else ""), markup=False)
    return not failed


def _save_notes(notes: Any) -> None:
    """The sandboxes' notes (restarts, dropped lines) into a log file, named on stderr."""
    from executor.state import state_home

    if not notes.lines:
        return
    path = state_home() / "doctor-security.log"
    try:
        notes.save(path)
    except (OSError, SandboxAgentError) as exc:
        err_console.print(f"note: the sandboxes' {len(notes.lines)} notes were not saved "
                          f"({inert_line(str(exc))})", markup=False, highlight=False)
        return
    err_console.print(f"the sandboxes' notes (restarts, dropped lines): {inert_line(str(path))}",
                      markup=False, highlight=False)


def _raise(exc: SandboxAgentError) -> str:
    raise exc


def _image(client: dict[str, Any], name: str) -> str:
    from executor.sandbox.image import image_exists

    docker = client.get("docker") or connect(timeout=10)
    if not image_exists(docker, name):
        raise ImageNotFoundError(f"{name} is not built", fix=IMAGE_FIX)
    return f"present ({docker.images.get(name).id[:19]})"


def _model(settings: Settings) -> str:
    from executor.models import build_model

    if settings.provider == "embedded":
        from executor.models.embedded import preflight, resolve_spec

        return preflight(resolve_spec(settings.model))
    model = _served(build_model(settings))
    try:
        return model.ping()
    finally:
        model.close()


def model_to_check(settings: Settings) -> str | None:
    """The model `ask` would use with these settings, when the server must have it by name
    (Ollama's default too; an OpenAI-compatible server without --model takes what it serves)."""
    from executor.models import DEFAULT_OLLAMA_MODEL

    if settings.provider == "embedded":
        return None
    if settings.provider == "ollama":
        return settings.model or DEFAULT_OLLAMA_MODEL
    return settings.model


def served_name(name: str, names: list[str], provider: str) -> str | None:
    """The server's name for model `name`: itself, or for Ollama `name:latest` (its tag when
    none is given); None when the server does not have it."""
    if name in names:
        return name
    if provider == "ollama" and ":" not in name and f"{name}:latest" in names:
        return f"{name}:latest"
    return None


def missing_model(settings: Settings, name: str, names: list[str]) -> ModelResponseError:
    """The error for a model the server does not have."""
    return ModelResponseError(
        f"the server does not have {name!r}",
        fix=f"the server has: {', '.join(names[:20]) or 'none'}"
        + (f"; or `ollama pull {name}`" if settings.provider == "ollama" else ""),
    )


def _has_model(settings: Settings, name: str) -> str:
    names = available_models(settings)
    found = served_name(name, names, settings.provider)
    if found is None:
        raise missing_model(settings, name, names)
    return "present" if found == name else f"present (as {found})"


def available_models(settings: Settings) -> list[str]:
    """The models the configured server (or the embedded provider) offers."""
    if settings.provider == "embedded":
        from executor.models.embedded import MODELS

        return list(MODELS)
    from executor.models import build_model

    model = _served(build_model(settings))
    try:
        return model.list_models()
    finally:
        model.close()


def _served(model: Model) -> ServedModel:
    """The model of a server provider (every provider but the embedded one is)."""
    from executor.protocols import ServedModel

    if not isinstance(model, ServedModel):
        model.close()
        raise ConfigError(f"provider of {model.name!r} has no server to ask")
    return model


@cli_errors
def models(
    provider: ProviderOpt = None,
    host: HostOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """List the models the configured server has (Ollama /api/tags, OpenAI /v1/models)."""
    from executor.config import load_settings

    values = {"provider": provider, "host": host}
    settings = load_settings({k: v for k, v in values.items() if v is not None})
    names = available_models(settings)
    if as_json:
        echo_result(json.dumps(names, ensure_ascii=False), json_text=True)
    elif names:
        echo_result("\n".join(inert_line(name) for name in names))
    else:
        err_console.print(f"the {markup_safe(settings.provider)} server lists no models")
