"""Every name of the toolbox package in one namespace, as the tests knew the single file.

For reading and calling only: to change a module's setting (monkeypatch), patch the module
that defines it (`executor.toolbox.tracking`, ...), which `home(name)` names.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import ModuleType
from typing import Any

from executor import toolbox as _package

MODULES: list[ModuleType] = [importlib.import_module(info.name) for info in pkgutil.walk_packages(
    _package.__path__, _package.__name__ + ".")]
_here = sys.modules[__name__]
for _module in MODULES:
    for _name, _value in vars(_module).items():
        if not _name.startswith("__") and not isinstance(_value, ModuleType):
            setattr(_here, _name, _value)


def patch(monkeypatch: Any, name: str, value: Any) -> None:
    """Set `name` in every toolbox module that holds it (each import binds its own copy)."""
    holders = [module for module in MODULES if name in vars(module)]
    assert holders, name
    for module in holders:
        monkeypatch.setattr(module, name, value)


COMMAND = [sys.executable, "-m", "executor.toolbox"]
"""The toolbox as a process of this Python (the container gets the bundle instead)."""
