"""Building the sandbox image from `sandbox_image/Dockerfile` with the docker SDK."""

from __future__ import annotations

import re
from collections.abc import Callable
from importlib import resources
from typing import Any

from executor.config import DEFAULT_BASE_IMAGE, DEFAULT_IMAGE, OFFLINE_BASE_IMAGE
from executor.errors import ConfigError, ImageNotFoundError, SandboxError
from executor.sandbox.engine import connect, docker_errors, endpoint

Progress = Callable[[str], None]

BASE_FIX = (
    "no registry? build a base from Debian packages (in a clone of sandbox-agent: "
    "`make base-image`; installed with pip: `debootstrap --variant=minbase "
    "--include=python3,ripgrep,git bookworm DIR && tar -C DIR -c . | docker import - "
    f"{OFFLINE_BASE_IMAGE}`) and pass --base {OFFLINE_BASE_IMAGE}"
)


def image_exists(client: Any, name: str) -> bool:
    """Whether `name` is present in the local engine."""
    import docker.errors

    with docker_errors(f"looking up image {name}"):
        try:
            client.images.get(name)
        except docker.errors.ImageNotFound:
            return False
    return True


def ensure_base(client: Any, base: str, progress: Progress) -> None:
    """Make sure `base` is local: present already, or pulled."""
    import docker.errors

    if image_exists(client, base):
        return
    progress(f"pulling {base} ...")
    with docker_errors(f"pulling {base}"):  # connection problems; a refused pull is below
        try:
            client.images.pull(base)
        except docker.errors.APIError as exc:
            raise ImageNotFoundError(f"cannot pull base image {base!r}: {exc.explanation}",
                                     fix=BASE_FIX) from exc


_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REFERENCE = re.compile(rf"(?:[A-Za-z0-9.-]+(?::[0-9]+)?/)?{_PART}(?:/{_PART})*"
                        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?")
"""An image name with an optional tag, as the engine takes it (distribution's grammar)."""


def build_image(
    tag: str = DEFAULT_IMAGE,
    base: str = DEFAULT_BASE_IMAGE,
    *,
    client: Any = None,
    progress: Progress = lambda line: None,
) -> str:
    """Build the sandbox image `tag` FROM `base`; returns the image id."""
    if not _REFERENCE.fullmatch(tag):  # before a base image is pulled for nothing
        raise ConfigError(f"not an image name: {tag!r}",
                          fix=f"lower-case NAME[:TAG], e.g. --tag {DEFAULT_IMAGE}")
    client = client or connect()
    ensure_base(client, base, progress)
    context = resources.files("sandbox_image")
    with resources.as_file(context) as path, docker_errors(f"building {tag}"):
        stream = client.api.build(
            path=str(path), tag=tag, buildargs={"BASE": base}, rm=True, forcerm=True,
            decode=True, labels={"sandbox-agent.base": base},
        )
        return _follow(stream, tag, progress)


def _follow(stream: Any, tag: str, progress: Progress) -> str:
    image_id = ""
    for chunk in stream:
        if "error" in chunk:
            raise SandboxError(f"building {tag} failed: {chunk['error'].strip()}")
        if chunk.get("stream", "").strip():
            progress(chunk["stream"].rstrip())
        image_id = chunk.get("aux", {}).get("ID", image_id)
    return image_id


def copy_image(name: str, to_url: str, *, source: Any = None, target: Any = None,
               progress: Progress = lambda line: None) -> str:
    """Ship image `name` from this engine to the engine at `to_url` (which need not reach a
    registry); returns the image id there. An image already there is left as it is."""
    source = source or connect()
    target = target or connect(url=to_url)
    with docker_errors(f"looking up image {name}"):
        local = source.images.get(name)
    if image_exists(target, local.id):
        progress(f"{endpoint(to_url)} already has {name} ({local.id[:19]})")
        _tag(target, local.id, name)
        return str(local.id)
    progress(f"copying {name} ({local.id[:19]}) to {endpoint(to_url)} ...")
    with docker_errors(f"saving {name}"):
        stream = source.api.get_image(local.id)
    with docker_errors(f"loading {name} into {endpoint(to_url)}"):
        for chunk in target.api.load_image(stream):
            if "error" in chunk:
                raise SandboxError(f"loading {name} failed: {chunk['error']}")
    _tag(target, local.id, name)
    return str(local.id)


def _tag(target: Any, image_id: str, name: str) -> None:
    repository, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (
        name, "", "latest")
    with docker_errors(f"tagging {name}"):
        target.api.tag(image_id, repository, tag or "latest")

