"""`with x:` for what is started and stopped (house style: resources are context managers).

One shape, shared by the sandboxes (docker.py, lazy.py, the tests' fake) and the Runner: the
block starts the thing, and stops it however the block ends. A leaf: it imports nothing of
the product, so any layer may use it.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, TypeVar


class _Startable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


_T = TypeVar("_T", bound=_Startable)


class StartStop:
    """Mixin: `__enter__` is `start()` (returning the object), `__exit__` is `stop()`.

    A class that starts on first use instead (sandbox/lazy.py) overrides `__enter__` only.
    """

    def __enter__(self: _T) -> _T:
        self.start()
        return self

    def __exit__(self: _T, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
