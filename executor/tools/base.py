"""The typed `Tool` base class and the registry the agent offers tools from.

Built-in tools forward to the sandbox's toolbox (their semantics live there); custom tools
run host-side and reach the container only through `ToolContext.sandbox`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from executor.choices import RiskLevel as RiskLevel
from executor.messages import ToolResult, ToolSpec
from executor.protocols import OutputCallback, Sandbox


@dataclass(frozen=True)
class ToolContext:
    """What a tool may use while it runs."""

    sandbox: Sandbox
    """The session's sandbox: the only way into the container."""
    root: Path
    """The project root on the host (mounted at /workspace in the container)."""
    read_only: bool
    """Whether the run mounts the root read-only."""
    session_id: str
    """Id of the running session."""
    host_args: Mapping[str, Any] = field(default_factory=dict)
    """Arguments the approved call carries that the model cannot give (`Preview.host_args`)."""
    on_output: OutputCallback | None = None
    """Where a running command's output goes while it runs (the agent emits `tool_output`)."""
    read_page: int | None = None
    """Lines one `read_file` call shows at most (None: the toolbox's own cap): a page that fits
    a small context window, with a note that names the next `start_line`."""


@dataclass(frozen=True)
class Preview:
    """What a person is shown before approving a call: what it will really do."""

    text: str
    """The call in full: the command, or a title line and the diff. Untrusted: print it inert."""
    error: str | None = None
    """Why the call would fail as it stands, when that is known beforehand."""
    fold: bool = True
    """Whether a text of many lines may be shown folded even when the screen could hold it (its
    first lines; the rest on request). A text taller than the screen is always folded."""
    runs: tuple[str, ...] = ()
    """What the call runs, one item each (a shell command's simple commands, as written; the
    first command of each program before the others): named right above the question, however
    long `text` is. Untrusted: print it inert."""
    host_args: Mapping[str, Any] = field(default_factory=dict)
    """Added to the call once approved, e.g. the `expect_sha256` of the file that was shown."""


class Tool:
    """Base class for tools: subclass, set the class attributes, implement `call`."""

    name: ClassVar[str]
    """Name the model uses to call the tool."""
    description: ClassVar[str]
    """One or two sentences telling the model what the tool does."""
    Args: ClassVar[type[BaseModel]]
    """Pydantic model of the arguments; the JSON schema offered to the model comes from it."""
    risk: ClassVar[RiskLevel] = RiskLevel.LOW
    """Harm the tool can do."""
    read_only_safe: ClassVar[bool] = False
    """Whether the tool is offered in read-only runs."""
    approval: ClassVar[bool | None] = None
    """Force approval on (True) or off (False); None derives it from `risk`."""
    core_args: ClassVar[tuple[str, ...] | None] = None
    """What weak models are offered (json protocols): these arguments only, all required, in
    this order. None offers every argument as `Args` defines it."""

    @property
    def requires_approval(self) -> bool:
        """Whether a person (or `--yes`, or a policy rule) must approve each call."""
        if self.approval is not None:
            return self.approval
        return self.risk in (RiskLevel.HIGH, RiskLevel.CRITICAL)

    def call(self, args: Any, ctx: ToolContext) -> ToolResult:
        """Run the tool with validated `args` (an instance of `Args`)."""
        raise NotImplementedError

    def validate(self, raw: dict[str, Any]) -> BaseModel:
        """Parse raw model-supplied arguments; raises `ValidationError`."""
        return self.Args.model_validate(raw)

    def describe(self, args: BaseModel) -> str:
        """A short human-readable summary of a call, shown when asking for approval."""
        return f"{self.name}({args.model_dump_json(exclude_none=True)})"

    def preview(self, args: Any, ctx: ToolContext) -> Preview:
        """What a person approving the call is shown; by default `describe(args)`.

        Override it to look at the sandbox first (`ctx.sandbox`), as the file tools do.
        """
        return Preview(self.describe(args))

    @classmethod
    def spec(cls) -> ToolSpec:
        """The tool as offered to the model."""
        core = list(cls.core_args) if cls.core_args is not None else None
        return ToolSpec(name=cls.name, description=cls.description,
                        parameters=schema_of(cls.Args), core=core)


def schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """A flat JSON schema without pydantic's titles (small models read titles as fields)."""
    schema = copy.deepcopy(model.model_json_schema())
    _strip_titles(schema)
    for name, prop in schema.get("properties", {}).items():
        schema["properties"][name] = _drop_null_option(prop)
    schema.setdefault("properties", {})
    schema["additionalProperties"] = False
    return schema


def _drop_null_option(prop: dict[str, Any]) -> dict[str, Any]:
    """`X | None = None` is offered as an optional X: simpler for small models and grammars."""
    options = prop.get("anyOf")
    if not options or prop.get("default", ...) is not None:
        return prop
    kept = [o for o in options if o != {"type": "null"}]
    if len(kept) != 1:
        return prop
    rest = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
    return {**kept[0], **rest}


def _strip_titles(node: Any) -> None:
    if isinstance(node, dict):
        node.pop("title", None)
        for key, value in node.items():
            if key != "properties":
                _strip_titles(value)
            else:
                for prop in value.values():
                    _strip_titles(prop)
    elif isinstance(node, list):
        for item in node:
            _strip_titles(item)


def format_validation_error(tool: str, exc: ValidationError) -> str:
    """One actionable line per problem, for the model to fix its call."""
    lines = [f"Invalid arguments for {tool}:"]
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        lines.append(f"- {where}: {err['msg']}")
    return "\n".join(lines)


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool | type[Tool]) -> Tool:
        """Add a tool (an instance, or a class with a no-argument constructor)."""
        instance = tool() if isinstance(tool, type) else tool
        if not getattr(instance, "name", ""):
            raise TypeError(f"{type(instance).__name__} has no name")
        self._tools[instance.name] = instance
        return instance

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        """Tool names in order."""
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        """What the model is offered."""
        return [tool.spec() for tool in self._tools.values()]

    def filtered(
        self,
        *,
        read_only: bool = False,
        deny: Iterable[str] = (),
        deny_prefixes: Iterable[str] = (),
    ) -> ToolRegistry:
        """A copy without denied tools, and without unsafe tools in read-only runs."""
        deny_set, prefixes = set(deny), tuple(deny_prefixes)
        kept = [
            t for t in self._tools.values()
            if t.name not in deny_set
            and not (prefixes and t.name.startswith(prefixes))
            and (t.read_only_safe or not read_only)
        ]
        return ToolRegistry(kept)
