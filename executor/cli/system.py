"""`doctor`, `image build` and `gc`: the machinery around the agent."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from executor.choices import DEFAULT_BASE_IMAGE, DEFAULT_IMAGE
from executor.cli.common import cli_errors, echo_result, err_console, fail, out_console
from executor.cli.options import HostOpt, ProviderOpt
from executor.errors import (
    ConfigError,
    ImageNotFoundError,
    ModelResponseError,
    SandboxAgentError,
)
from executor.sandbox.engine import IMAGE_FIX, connect, endpoint, engine_version
from executor.text import inert, inert_line, markup_safe

if TYPE_CHECKING:  # imported where used: `--help` must not load pydantic or the docker SDK
    from executor.config import Settings

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
) -> None:
    """Remove sandbox containers whose session is no longer running (e.g. after a crash)."""
    if root is not None and not root.is_dir():
        raise ConfigError(f"project root {root} does not exist",
                          fix="pass the root the sessions ran on, or leave out --root")
    from executor.sandbox.gc import gc as collect

    result = collect(root=str(root) if root else None, all_hosts=all_hosts, force=force)
    for name in result.removed:
        out_console.print(f"removed {inert_line(name)}", markup=False)
    err_console.print(
        f"[dim]{len(result.removed)} removed, {len(result.in_use)} in use, "
        f"{len(result.skipped)} from other hosts left alone[/]"
    )


def doctor(
    provider: ProviderOpt = None,
    host: HostOpt = None,
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Also check that the server has this model.",
                     show_default=False),
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Sandbox image to check.", show_default=False)
    ] = None,
) -> None:
    """Check the Docker engine, the sandbox image and the model server (and model); print fixes."""
    from executor.config import load_settings

    values = {"provider": provider, "host": host, "model": model, "image": image}
    try:
        settings = load_settings({k: v for k, v in values.items() if v is not None})
    except ConfigError as exc:
        raise fail(exc) from None
    client: dict[str, Any] = {}
    checks: list[tuple[str, Check]] = [
        ("Docker engine", lambda: _engine(client)),
        (f"sandbox image {settings.image}", lambda: _image(client, settings.image)),
        (f"model provider {settings.provider}", lambda: _model(settings)),
    ]
    if settings.model and settings.provider != "embedded":  # embedded: the provider check
        checks.append((f"model {settings.model}", lambda: _has_model(settings)))
    failed = [name for name, check in checks if not _run_check(name, check)]
    if failed:
        raise typer.Exit(1)


def _run_check(name: str, check: Check) -> bool:
    try:
        detail = check()
    except SandboxAgentError as exc:
        # A model server's error text is the server's choice: shown inert.
        out_console.print(f"[red]✗[/] {markup_safe(name)}: {markup_safe(exc.message)}")
        if exc.fix:
            out_console.print(f"    fix: {inert(exc.fix)}", markup=False)
        return False
    out_console.print(f"[green]✓[/] {markup_safe(name)}: {markup_safe(detail)}")
    return True


def _engine(client: dict[str, Any]) -> str:
    client["docker"] = connect(timeout=10)
    return f"Docker {engine_version(client['docker'])} at {endpoint()}"


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
    model = build_model(settings)
    try:
        return str(model.ping())  # type: ignore[attr-defined]
    finally:
        model.close()


def _has_model(settings: Settings) -> str:
    names = available_models(settings)
    if settings.model not in names:
        raise ModelResponseError(
            f"the server does not have {settings.model!r}",
            fix=f"the server has: {', '.join(names[:20]) or 'none'}"
            + (f"; or `ollama pull {settings.model}`" if settings.provider == "ollama" else ""),
        )
    return "present"


def available_models(settings: Settings) -> list[str]:
    """The models the configured server (or the embedded provider) offers."""
    if settings.provider == "embedded":
        from executor.models.embedded import MODELS

        return list(MODELS)
    from executor.models import build_model

    model = build_model(settings)
    try:
        return list(model.list_models())  # type: ignore[attr-defined]
    finally:
        model.close()


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
