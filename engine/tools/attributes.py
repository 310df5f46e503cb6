"""What a tool declares about itself: `ToolSpec`, the one list of tool attributes, and `@tool`.

Every way of making a tool takes exactly these attributes and nothing else: ``@tool(...)``
keywords, `ToolBase` class attributes, and the spec a compiled tool carries. They are spelled out
once, as the fields of `ToolSpec`; the decorator and `ToolBase.spec` read them from there, so a
new attribute is one new field.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, TypeVar, overload

from stockade.engine.errors import ToolDefinitionError
from stockade.engine.tools.retry import RetryPolicy, as_retry_policy
from stockade.policies.request import ACCESSES, Access

SPEC_ATTRIBUTE = "__stockade_tool__"
PATH_SPACES = ("logical", "host")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """The attributes a tool declares. Policies, the scheduler and the MCP hints read them.

    ``read_only``: the tool changes nothing. ``concurrency_safe`` (default: ``read_only``): its
    calls may run alongside others. ``destructive``: it may destroy what was there.
    ``idempotent``: calling it twice is like calling it once (so failures may be retried).
    ``external``: it is carried out outside the engine; its call returns ``pending``.
    ``timeout`` (seconds) and ``retry`` (a `RetryPolicy`, a number of attempts, or a bool) for
    its calls. ``paths`` maps parameter names to the access the tool makes to the path given in
    that parameter (``read``, ``write`` or ``delete``), so the policy judges the paths before
    the tool runs; ``dangerous_paths`` are patterns it declares dangerous on top of the
    policy's. ``command`` names the parameter holding a command line the tool executes: the
    policy then judges the call as ``execute`` of that command; ``command_prefix`` words are put
    before the parameter's text when it is not a command line itself (``run_python`` declares
    ``("python3", "-c")``). ``path_space`` says whether paths are logical (through the virtual
    filesystem; the default) or host paths (the raw host-file tools). ``open_world``: the tool
    reaches beyond the machine (the network, other people). ``origin`` names where a tool came
    from when it is not Python code of yours (``"mcp:files"``), and ``read_only_hint`` is that
    source's claim that it changes nothing: a claim, so the policy treats the tool as read-only
    only when it trusts the source.
    """

    name: str | None = None
    description: str | None = None
    read_only: bool = False
    concurrency_safe: bool | None = None
    destructive: bool = False
    idempotent: bool = False
    external: bool = False
    timeout: float | None = None
    retry: RetryPolicy | None = None
    paths: Mapping[str, Access] = field(default_factory=lambda: MappingProxyType({}))
    dangerous_paths: tuple[str, ...] = ()
    command: str | None = None
    command_prefix: tuple[str, ...] = ()
    path_space: Literal["logical", "host"] = "logical"
    open_world: bool = False
    origin: str | None = None
    read_only_hint: bool = False

    def __post_init__(self) -> None:
        if self.timeout is not None and (not math.isfinite(self.timeout) or self.timeout <= 0):
            raise ToolDefinitionError(
                f"timeout must be a positive number of seconds, got {self.timeout}"
            )
        paths = dict(self.paths or {})
        bad = {k: v for k, v in paths.items() if v not in ACCESSES}
        if bad:
            raise ToolDefinitionError(
                f"paths must map parameter names to 'read', 'write' or 'delete'; got {bad}"
            )
        if self.path_space not in PATH_SPACES:
            raise ToolDefinitionError(
                f"path_space must be 'logical' or 'host', not {self.path_space!r}"
            )
        # accepted loosely where a person writes them (a list, a number of attempts), kept in
        # one shape: immutable, so a spec can be shared by every toolkit that holds the tool
        object.__setattr__(self, "paths", MappingProxyType(paths))
        object.__setattr__(self, "retry", as_retry_policy(self.retry))
        object.__setattr__(self, "dangerous_paths", tuple(self.dangerous_paths))
        object.__setattr__(self, "command_prefix", tuple(self.command_prefix))

    @property
    def shares(self) -> bool:
        """Whether calls of this tool may run alongside other sharing calls."""
        return self.read_only if self.concurrency_safe is None else self.concurrency_safe

    @classmethod
    def of(cls, attributes: Mapping[str, Any], *, label: str) -> ToolSpec:
        """A spec from attributes given by name; an unknown name or a bad value is a
        `ToolDefinitionError` naming the tool (``label``) and what to write instead."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(attributes) - known)
        if unknown:
            raise ToolDefinitionError(
                f"tool {label!r}: unknown attribute(s) {', '.join(unknown)}; a tool declares "
                f"{', '.join(f.name for f in fields(cls))}"
            )
        try:
            return cls(**attributes)
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(f"tool {label!r}: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(f"tool {label!r}: {exc}") from None


def attribute_names() -> tuple[str, ...]:
    """The names of the attributes a tool may declare, in `ToolSpec`'s order."""
    return tuple(f.name for f in fields(ToolSpec))


@overload
def tool(fn: F, /) -> F: ...
@overload
def tool(**attributes: Any) -> Callable[[F], F]: ...
def tool(fn: Callable[..., Any] | None = None, /, **attributes: Any) -> Any:
    """Mark a function (or method) as a tool. Usable bare (``@tool``) or with any `ToolSpec`
    attribute as a keyword (``@tool(read_only=True, timeout=5)``).

    The function is returned unchanged apart from the attached spec, so it can still be called
    and tested directly. Its schema comes from the signature and docstring at registration.
    """

    def mark(func: F) -> F:
        target = func.__func__ if inspect.ismethod(func) else func
        label = str(attributes.get("name") or getattr(target, "__name__", repr(target)))
        spec = ToolSpec.of(attributes, label=label)
        try:
            setattr(target, SPEC_ATTRIBUTE, spec)
        except (AttributeError, TypeError):
            raise ToolDefinitionError(
                f"@tool cannot mark {func!r}; register it with Toolkit.add(...) instead"
            ) from None
        return func

    return mark(fn) if fn is not None else mark


def marked_methods(cls: type) -> list[str]:
    """Names of @tool-marked methods, in definition order, base classes first."""
    seen: dict[str, None] = {}
    for klass in reversed(cls.__mro__):
        for attr, value in vars(klass).items():
            func = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            if inspect.isfunction(func) and hasattr(func, SPEC_ATTRIBUTE):
                seen[attr] = None
            elif attr in seen and not hasattr(func, SPEC_ATTRIBUTE):
                del seen[attr]  # overridden without the marker
    return list(seen)


__all__ = ["SPEC_ATTRIBUTE", "ToolSpec", "attribute_names", "marked_methods", "tool"]
