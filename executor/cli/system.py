"""`doctor`, `image build` and `gc`: the machinery around the agent."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from executor.cli.common import cli_errors, err_console, out_console
from executor.config import DEFAULT_BASE_IMAGE, DEFAULT_IMAGE, Settings
from executor.errors import ImageNotFoundError, SandboxAgentError
from executor.sandbox.engine import IMAGE_FIX, connect, endpoint, engine_version
from executor.sandbox.gc import gc as collect
from executor.sandbox.image import build_image, copy_image, image_exists

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
        (lambda line: None) if quiet else (lambda line: err_console.print(line, markup=False))
    )
    image_id = build_image(tag, base, progress=progress)
    err_console.print(f"built [bold]{escape(tag)}[/] ({image_id[:19]}) from {escape(base)}")


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
    image_id = copy_image(image, to, progress=lambda line: err_console.print(line, markup=False))
    err_console.print(f"{escape(endpoint(to))} has [bold]{escape(image)}[/] ({image_id[:19]})")


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
    result = collect(root=str(root) if root else None, all_hosts=all_hosts, force=force)
    for name in result.removed:
        out_console.print(f"removed {name}")
    err_console.print(
        f"[dim]{len(result.removed)} removed, {len(result.in_use)} in use, "
        f"{len(result.skipped)} from other hosts left alone[/]"
    )


def doctor(
    provider: Annotated[
        str | None,
        typer.Option("--provider", "-p", help="Model provider to check.", show_default=False),
    ] = None,
    host: Annotated[
        str | None, typer.Option("--host", help="Model server URL to check.", show_default=False)
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="Model to check.", show_default=False)
    ] = None,
    image: Annotated[
        str | None, typer.Option("--image", help="Sandbox image to check.", show_default=False)
    ] = None,
) -> None:
    """Check the Docker engine, the sandbox image and the model server; print each fix."""
    values = {
        k: v
        for k, v in {"provider": provider, "host": host, "model": model, "image": image}.items()
        if v is not None
    }
    try:
        settings = Settings.model_validate({**Settings().model_dump(), **values})
    except ValueError as exc:
        err_console.print(f"[bold red]error:[/] {escape(str(exc))}")
        raise typer.Exit(2) from None
    client: dict[str, Any] = {}
    checks: list[tuple[str, Check]] = [
        ("Docker engine", lambda: _engine(client)),
        (f"sandbox image {settings.image}", lambda: _image(client, settings.image)),
        (f"model provider {settings.provider}", lambda: _model(settings)),
    ]
    failed = [name for name, check in checks if not _run_check(name, check)]
    if failed:
        raise typer.Exit(1)


def _run_check(name: str, check: Check) -> bool:
    try:
        detail = check()
    except SandboxAgentError as exc:
        out_console.print(f"[red]✗[/] {escape(name)}: {escape(exc.message)}")
        if exc.fix:
            out_console.print(f"    fix: {exc.fix}", markup=False)
        return False
    out_console.print(f"[green]✓[/] {escape(name)}: {escape(detail)}")
    return True


def _engine(client: dict[str, Any]) -> str:
    client["docker"] = connect(timeout=10)
    return f"Docker {engine_version(client['docker'])} at {endpoint()}"


def _image(client: dict[str, Any], name: str) -> str:
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
