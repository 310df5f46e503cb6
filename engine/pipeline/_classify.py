"""Step 3, classify: the facts a policy decides on, gathered from the call and the sandbox.

Who calls which tool; whether the tool is read-only (its own word, or the claim of a source the
policy trusts); every path it will touch and how, canonical, resolved through the virtual
filesystem (a symlink's name and its target are both judged); the command it will run, the
files its redirections open, and whether it runs isolated, with the folders an isolated run
has to itself (which are not judged: nothing else can see them); and whether its paths are
host paths (the raw host-file tools), which the policy's ``[host_files]`` table governs.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from stockade.engine.messages import ToolCall
from stockade.engine.tools import RegisteredTool
from stockade.policies import PathSpellingError, Policy, Request, canonical
from stockade.policies.request import Access
from stockade.sandbox import BOX_PRIVATE_PATHS, PathEscapeError, SandboxError, VirtualFS

_MAX_CACHED = 4096


class Classifier:
    """Builds the `Request` of each call for one engine (its policy and file system)."""

    __slots__ = ("_cache", "_private", "fs", "policy", "stages", "trusted")

    def __init__(
        self,
        policy: Policy,
        fs: VirtualFS | None,
        stages: Callable[[RegisteredTool], bool] = lambda tool: False,
    ) -> None:
        self.policy = policy
        self.fs = fs
        # whether a boxed call of a tool runs on a staged view, its changes judged after: under
        # a read-only policy they are all discarded, so the call changes nothing
        self.stages = stages
        self.trusted = policy.trusted_origins
        self._private = _box_private(fs)
        # calls of a tool without paths or a command are all alike for the policy
        self._cache: dict[tuple[RegisteredTool, str], Request] = {}

    def request(
        self, tool: RegisteredTool, call: ToolCall, kwargs: Mapping[str, Any], isolated: bool
    ) -> Request:
        """The call as the policy sees it. ``isolated``: its command runs boxed. Raises
        `PathEscapeError` for a path that leads out of the sandbox (nothing to ask a policy
        about: the call is denied)."""
        spec = tool.spec
        if not spec.paths and spec.command is None:
            key = (tool, call.subject)
            request = self._cache.get(key)
            if request is None:
                if len(self._cache) >= _MAX_CACHED:
                    self._cache.clear()
                request = self._cache[key] = Request(
                    call.subject,
                    tool.name,
                    "call",
                    (),
                    None,
                    self.read_only(tool),
                    spec.dangerous_paths,
                    False,
                    (),
                    spec.path_space == "host",
                )
            return request
        private = self._private if isolated and spec.command is not None else ()
        paths: list[tuple[str, Access]] = []
        for name, access in spec.paths.items():
            value = kwargs.get(name)
            values = value if isinstance(value, list | tuple | set | frozenset) else [value]
            for item in values:
                if item is None:
                    continue  # an optional path left out touches nothing
                # a pydantic Path, or anything else: judge its text, never skip it
                text = os.fsdecode(item) if isinstance(item, os.PathLike) else str(item)
                paths.extend((where, access) for where in self.where(text, spec.path_space))
        command = None
        if spec.command is not None:
            given = kwargs.get(spec.command)
            command = given if isinstance(given, str) else str(given)
            if spec.command_prefix:
                command = shlex.join([*spec.command_prefix, command])
            else:
                # the files its redirections open, resolved like any path argument (on a staged
                # view what they write is judged again after the run, as it was written)
                for target, opened in self.policy.command_line(command).paths():
                    if not _within(target, private):
                        paths.extend((where, opened) for where in self.where(target, "logical"))
        read_only = self.read_only(tool) or (
            self.policy.read_only and isolated and spec.command is not None and self.stages(tool)
        )
        return Request(
            call.subject,
            tool.name,
            "execute" if spec.command is not None else "call",
            tuple(paths),
            command,
            read_only,
            spec.dangerous_paths,
            isolated,
            private,
            spec.path_space == "host",
        )

    def bare(self, tool: RegisteredTool, call: ToolCall) -> Request:
        """The request of a call whose paths could not be classified."""
        return Request(call.subject, tool.name, "call", (), None, self.read_only(tool))

    def read_only(self, tool: RegisteredTool) -> bool:
        """Whether the policy treats ``tool`` as read-only: its own word, or the claim of a
        source (an MCP server) the policy trusts."""
        spec = tool.spec
        return spec.read_only or (spec.read_only_hint and spec.origin in self.trusted)

    def where(self, path: str, space: str) -> list[str]:
        """Where a path argument really is, for the policy. When its last component is a
        symlink, both the link (what a delete or a rename acts on) and its target (what a read
        or a write reaches) are judged, so a link can neither launder a protected target nor
        hide a protected name. Logical paths resolve through the virtual filesystem (lexically
        without one), host paths through the host (raw tools). A path that leads out of the
        sandbox raises PathEscapeError."""
        if space == "host":
            spelled = _canonical(path)
            return list(dict.fromkeys((spelled, os.path.realpath(spelled))))
        if self.fs is None:
            return [_canonical(path)]
        try:
            name = self.fs.canonical(path, follow_last=False)
            target = self.fs.canonical(path)
        except PathEscapeError:
            raise
        except SandboxError:
            # not a refusal but a plain mistake (a file used as a folder, a link loop): judge
            # the spelling, and let the tool report the real error when it runs
            return [_canonical(path)]
        return [name] if name == target else [name, target]


def _box_private(fs: VirtualFS | None) -> tuple[str, ...]:
    """The folders a boxed run has to itself, but those a mount of ``fs`` lies in (or over): the
    box binds each host mount at its prefix, so a mount at /tmp/shared puts the host's files
    inside the box's /tmp, and there every path is judged."""
    prefixes = [m.prefix for m in fs.mounts] if fs is not None else []
    return tuple(
        folder
        for folder in BOX_PRIVATE_PATHS
        if not any(_within(p, (folder,)) or _within(folder, (p,)) for p in prefixes)
    )


def _within(path: str, folders: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + "/") for f in folders)


def _canonical(path: str) -> str:
    """A path as the policy sees it without a filesystem: absolute, normalised, POSIX. A path
    no file can have (NUL, empty) is passed on as written, and the policy refuses it."""
    try:
        return canonical(path)
    except PathSpellingError:
        return path
