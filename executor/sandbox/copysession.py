"""A copy session's loading as the sandbox drives it: plan before the container, load while
the toolbox starts, wait before the first call. Without a loader (a bind session) each step
does nothing, except planning, which a copy workspace cannot do without one."""

from __future__ import annotations

from executor.errors import SandboxError
from executor.sandbox.config import mount_user
from executor.sandbox.copy import CopyLoader
from executor.sandbox.deployment import Deployment, Warn
from executor.sandbox.hardening import copy_storage


class CopySession:
    """The `CopyLoader` whoever built the sandbox passed in (copy.py), or none."""

    def __init__(self, loader: CopyLoader | None) -> None:
        self._loader = loader

    def plan(self, place: Deployment, warn: Warn) -> None:
        """Walk the root and check the size guard before any container exists; the copy's
        storage and size go into the Deployment's config."""
        if self._loader is None:
            raise SandboxError("this sandbox was built without a copy loader: it cannot run a "
                               "copy workspace", fix="use --workspace bind")
        uid, gid = (int(n) for n in mount_user(place.config).split(":"))
        size = self._loader.plan(place.config, (uid, gid))
        storage = copy_storage(place.config, size, podman=place.podman, warn=warn)
        place.config = place.config.model_copy(
            update={"copy_storage": storage, "copy_bytes": size})

    def start(self, place: Deployment) -> None:
        """Load the copy while the toolbox starts; a re-attached container holds its own."""
        if self._loader is None:
            return
        if place.reattached:
            self._loader.drop()
            return
        self._loader.start(place.client.api, place.container, user=mount_user(place.config),
                           read_only=place.config.read_only)

    def wait(self) -> None:
        """Block until the copy is in the container; raise what stopped it."""
        if self._loader is not None:
            self._loader.wait()

    def abort(self) -> None:
        """End a copy still arriving."""
        if self._loader is not None:
            self._loader.abort()

    def close(self) -> None:
        """After the container went: let the loading end, release the plan."""
        if self._loader is not None:
            self._loader.close()

    def manifest(self) -> object | None:
        """What this start copied in (after `wait`); None: an existing copy, or none."""
        return None if self._loader is None else self._loader.manifest()

    def sent(self) -> object | None:
        """What this start copies in, once read (it may still be arriving); None: none."""
        return None if self._loader is None else self._loader.sent()

    @property
    def notes(self) -> list[str]:
        """What the copy left out, and why."""
        return [] if self._loader is None else self._loader.notes
