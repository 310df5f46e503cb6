"""The policy file format: what a person writes, validated into typed data.

Every key is documented here and in the README. Unknown keys are errors (a misspelt
``efect`` must never silently mean "no effect"), and every error names the file, line and key.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from stockade.errors import StockadeError
from stockade.policies.array_lines import array_item_line
from stockade.policies.decision import Effect
from stockade.policies.host_patterns import (
    check_address,
    check_name,
    check_network,
    parse_pattern,
)
from stockade.policies.request import ACTIONS
from stockade.policies.source import SourceMap

EffectName = Literal["allow", "warn", "ask", "deny"]
RESERVED_IDS = frozenset(
    {
        "read-only-mode",
        "dangerous-path",
        "dangerous-command",
        "path-spelling",
        "require-isolation",
        "host-files",
        "stockade-state",
    }
)
RESERVED_PREFIXES = ("dangerous-path:", "dangerous-command:")


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a policy: where (source, line, key) and what."""

    source: str
    line: int | None
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        return f"{where}: {self.key}: {self.message}"


class PolicyError(StockadeError, ValueError):
    """A policy that cannot be used. The message names the source, line and key of each problem,
    which are also in ``problems``."""

    def __init__(self, message: str, problems: list[Problem] | None = None) -> None:
        if problems:
            message = message + ":\n  " + "\n  ".join(str(p) for p in problems)
        super().__init__(message)
        self.problems = problems or []


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def known_actions(actions: list[str]) -> list[str]:
    """``actions`` when each is one a rule can name, else a ValueError listing those."""
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        raise ValueError(
            f"unknown action(s) {', '.join(map(repr, unknown))}; use {', '.join(sorted(ACTIONS))}"
        )
    return actions


def not_empty(values: list[str]) -> list[str]:
    """``values`` when it lists at least one name and none is empty, else a ValueError."""
    if not values or any(not v for v in values):
        raise ValueError("must list at least one non-empty name or pattern ('*' for any)")
    return values


def _listed(value: object) -> object:
    return [value] if isinstance(value, str) else value


Paths = Annotated[list[str], BeforeValidator(_listed)]


class ExampleCall(_Strict):
    """A call written out for a policy test: the tool, and what it does. ``command`` makes it
    an ``execute`` call; otherwise it is a call of the tool with the paths it reads, writes or
    deletes (relative paths are taken from /workspace). ``read_only`` (whether the tool is
    marked read-only) is, unless given, true when the call only reads."""

    tool: str = Field(default="run_shell", min_length=1)
    subject: str = Field(default="agent", min_length=1)
    command: str | None = None
    read: Paths = Field(default_factory=list)
    write: Paths = Field(default_factory=list)
    delete: Paths = Field(default_factory=list)
    read_only: bool | None = None


Example = str | ExampleCall
"""A call in a policy test: a command line (as ``run_shell`` runs it), or an `ExampleCall`."""


class ExamplesSpec(_Strict):
    """Calls and the effect the whole policy must give each, checked when the policy loads."""

    allow: list[Example] = Field(default_factory=list)
    warn: list[Example] = Field(default_factory=list)
    ask: list[Example] = Field(default_factory=list)
    deny: list[Example] = Field(default_factory=list)


class _Conditions(_Strict):
    """What a rule and an approval match: who (``subjects``), which tools, which actions, and
    which paths or commands. Empty conditions match everything."""

    id: str = Field(min_length=1, description="Unique name, shown in every decision it makes.")
    subjects: list[str] = Field(default_factory=lambda: ["*"])
    tools: list[str] = Field(default_factory=lambda: ["*"])
    actions: list[str] = Field(default_factory=list, description="read/write/delete/execute/call")
    paths: list[str] = Field(default_factory=list, description="Globs; '!' excludes.")
    commands: list[str] = Field(default_factory=list, description="Command patterns.")

    @field_validator("actions")
    @classmethod
    def _known_actions(cls, actions: list[str]) -> list[str]:
        return known_actions(actions)

    @field_validator("subjects", "tools")
    @classmethod
    def _not_empty(cls, values: list[str]) -> list[str]:
        return not_empty(values)

    @field_validator("subjects")
    @classmethod
    def _plain_names(cls, values: list[str]) -> list[str]:
        return [_name(v) for v in values]


class RuleSpec(_Conditions):
    """One rule: its conditions (`_Conditions`) and the effect."""

    effect: EffectName
    reason: str = Field(
        default="", description="Why the rule exists; shown to the agent and the user."
    )
    read_only_tools: bool | None = Field(
        default=None, description="true: only tools marked read-only; false: only the others."
    )
    examples: ExamplesSpec | None = Field(
        default=None,
        description="Calls and the effect the policy must give each, checked when it loads.",
    )


class ApprovalSpec(_Conditions):
    """A lasting yes (TOML ``[[approvals]]``, written by an "always" answer or by hand): a call
    that would be asked is allowed without asking when approvals cover every part of it that
    asks. An approval matches like a rule (tools, actions, paths or commands); it never
    softens a deny, a protected path, a dangerous command or a command run without isolation."""

    reason: str = Field(default="", description="Who approved what, and when.")


class DangerousSpec(_Strict):
    """Protected paths: the built-in list, changed with ``extend``/``remove`` or ``replace``."""

    effect: EffectName = "ask"
    extend: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)
    replace: list[str] | None = None


class DangerousCommandsSpec(_Strict):
    """Dangerous commands: the built-in checks (``remove`` drops some by id) plus ``extend``
    patterns, matched like command rules. Denied unless the file says otherwise."""

    effect: EffectName = "deny"
    extend: list[str] = Field(default_factory=list)
    remove: list[str] = Field(default_factory=list)


class ProcessSpec(_Strict):
    """How commands run: whether isolation is required, whether the network is reachable, and
    the limits every process gets (a tool may ask for less, never for more)."""

    require_isolation: bool = Field(
        default=False,
        description="Deny commands that would run without isolation (no bubblewrap here).",
    )
    network: bool = Field(default=False, description="Let commands reach the network.")
    timeout_s: float = Field(default=120.0, gt=0, description="Most wall-clock seconds a run.")
    memory_mb: int = Field(default=2048, ge=16, description="Resident memory of the tree.")
    cpu_s: float = Field(default=120.0, gt=0, description="CPU seconds of the whole tree.")
    max_procs: int = Field(default=256, ge=1, description="Processes alive at once.")
    output_bytes: int = Field(default=1_000_000, ge=1, description="Output kept per stream.")
    file_mb: int = Field(default=1024, ge=1, description="Largest file a process may write.")


def _pattern(text: str) -> str:
    parse_pattern(text)  # kept as written: lint and errors quote it; EgressRules compiles it
    return text


def _host_name(text: str) -> str:
    check_name(text)
    return text


def _address(text: str) -> str:
    check_address(text)
    return text


def _network(text: str) -> str:
    check_network(text)
    return text


HostPatternText = Annotated[str, AfterValidator(_pattern)]


class NetworkSpec(_Strict):
    """Which hosts commands may reach, by name (TOML ``[network]``); with this table a
    command's network goes through a proxy that asks these lists about every connection."""

    allow: list[HostPatternText] = Field(
        default_factory=list,
        description="Host patterns commands may reach: pypi.org, *.pythonhosted.org (names "
        "under it, not itself), 10.0.0.5, [::1], * (every host); :port or :* (any port) after "
        "one, else ports 80 and 443.",
    )
    deny: list[HostPatternText] = Field(
        default_factory=list,
        description="Host patterns commands may not reach, written like allow; deny wins.",
    )
    unlisted: Literal["deny", "ask"] = Field(
        default="deny",
        description="What a connection to a host on neither list gets: deny, or ask someone.",
    )
    reach_private: list[Annotated[str, AfterValidator(_network)]] = Field(
        default_factory=list,
        description="Networks (CIDRs: 10.0.0.0/8, 127.0.0.1/32, fd00::/8) that allowed hosts "
        "may resolve to although loopback, link-local or private; none by default.",
    )
    hosts: dict[
        Annotated[str, AfterValidator(_host_name)], Annotated[str, AfterValidator(_address)]
    ] = Field(
        default_factory=dict,
        description="Name = IP address, used instead of DNS (like /etc/hosts): for local "
        "services and tests.",
    )

    @field_validator("hosts")
    @classmethod
    def _one_address_per_name(cls, hosts: dict[str, str]) -> dict[str, str]:
        seen: dict[str, str] = {}
        for name in hosts:
            normal = check_name(name)
            if normal in seen:
                raise ValueError(
                    f"{seen[normal]!r} and {name!r} are the same name; keep one of them"
                )
            seen[normal] = name
        return hosts


class LimitsSpec(_Strict):
    """How many calls may be in flight, and which tools always run alone."""

    max_in_flight: int | None = Field(default=None, ge=1)
    per_tool: dict[str, int] = Field(default_factory=dict)
    per_subject: dict[str, int] = Field(default_factory=dict)
    exclusive: list[str] = Field(default_factory=list)

    @field_validator("per_tool", "per_subject")
    @classmethod
    def _positive(cls, caps: dict[str, int]) -> dict[str, int]:
        bad = {k: v for k, v in caps.items() if v < 1}
        if bad:
            raise ValueError(f"caps must be at least 1, got {bad}")
        return caps


def _name(value: str) -> str:
    """Subject and role names are stored as casbin fields: keep them plain."""
    if not value or value != value.strip() or any(ch in value for ch in ",[]()%"):
        raise ValueError(
            f"{value!r} is not a usable subject or role name: "
            "no edge spaces, and none of , [ ] ( ) %"
        )
    return value


class McpSpec(_Strict):
    """Tools from MCP servers: whose annotations to believe."""

    trusted_servers: list[str] = Field(
        default_factory=list,
        description="MCP servers (by the name they were added under) whose readOnlyHint makes "
        "a tool read-only for the policy; other servers' hints are ignored.",
    )


class HostFilesSpec(_Strict):
    """Tools on host paths (the raw host-file tools, outside the sandbox): allowed, warned
    about, or denied on every call, on top of the rules that judge their paths."""

    mode: Literal["deny", "warn", "allow"] = Field(
        default="warn",
        description="deny: refused; warn: run, and every call warned about; allow: run.",
    )


class PolicySpec(_Strict):
    """A whole policy file."""

    version: Literal[1] = 1
    description: str = ""
    default: EffectName = "allow"
    read_only: bool = False
    shadow: bool = False
    roles: dict[str, list[str]] = Field(default_factory=dict)
    dangerous_paths: DangerousSpec = Field(default_factory=lambda: DangerousSpec())
    dangerous_commands: DangerousCommandsSpec = Field(
        default_factory=lambda: DangerousCommandsSpec()
    )
    limits: LimitsSpec = Field(default_factory=lambda: LimitsSpec())
    # before process: process's validator reads it
    network: NetworkSpec | None = Field(
        default=None,
        description="Hosts commands may reach, by name; without it, [process] network says "
        "all or nothing.",
    )
    process: ProcessSpec = Field(default_factory=lambda: ProcessSpec(), validate_default=True)
    mcp: McpSpec = Field(default_factory=lambda: McpSpec())
    host_files: HostFilesSpec = Field(default_factory=lambda: HostFilesSpec())
    rules: list[RuleSpec] = Field(default_factory=list)
    approvals: list[ApprovalSpec] = Field(
        default_factory=list,
        description='Lasting yeses to asks, as an "always" answer appends them.',
    )

    @field_validator("roles")
    @classmethod
    def _role_names(cls, roles: dict[str, list[str]]) -> dict[str, list[str]]:
        return {_name(role): [_name(m) for m in members] for role, members in roles.items()}

    @field_validator("process")
    @classmethod
    def _networked_when_filtered(cls, process: ProcessSpec, info: ValidationInfo) -> ProcessSpec:
        """A [network] table gives commands a network filtered by name, which the engine hands
        to the command tools that take one (an ``egress`` parameter); ``process.network``, what
        a command tool that does not take one passes on, is then false: no such tool can open
        every host while a table lists some (``Policy.network_mode`` says "filtered")."""
        if info.data.get("network") is None:
            return process
        if "network" in process.model_fields_set and not process.network:
            raise PydanticCustomError(
                "network_contradiction",
                "network = false, but a [network] table lets commands reach the hosts it "
                "allows; remove network = false (or the [network] table, to keep commands "
                "offline)",
            )
        return process.model_copy(update={"network": False}) if process.network else process

    @property
    def default_effect(self) -> Effect:
        """The effect when no rule matches."""
        return Effect(self.default)


def parse(data: Mapping[str, Any], *, source: str, text: str | None = None) -> PolicySpec:
    """Validate policy data; errors name ``source``, the line (when ``text`` is given) and key."""
    try:
        spec = PolicySpec.model_validate(data)
    except ValidationError as exc:
        lines = SourceMap(text) if text is not None else None
        problems = []
        for err in exc.errors(include_url=False):
            location = err["loc"]
            message = err["msg"]
            if err["type"] == "extra_forbidden":
                # imported where used: only a file with an unknown key needs the hints
                from stockade.policies.key_hints import unknown_key_message

                message = unknown_key_message(PolicySpec, location)
            elif err["type"] == "literal_error" and location[-1:] in (("effect",), ("default",)):
                message = "unknown effect; use allow, warn, ask or deny"
            elif err["type"] == "network_contradiction":
                location = ("process", "network")
            elif err["type"] == "string_type" and location[:2] == ("network", "hosts"):
                message = 'give an address as a string; quote a name with dots: "db.test" = ...'
            elif err["type"] == "value_error" and location[:1] == ("network",):
                message = message.removeprefix("Value error, ")  # ours say it all
            if location[-1:] == ("[key]",):  # a bad key of a table: the key names it
                location = location[:-1]
            line = lines.line(location) if lines else None
            item = location[2] if len(location) == 3 and location[0] == "network" else None
            if line and text and isinstance(item, int):  # one pattern of a list: its own line
                line = array_item_line(text, line, item) or line
            problems.append(Problem(source, line, _dotted(location), message))
        raise PolicyError("invalid policy", problems) from None
    seen: dict[str, str] = {}
    lines = SourceMap(text) if text is not None else None
    entries = [("rules", i, r.id) for i, r in enumerate(spec.rules)]
    entries += [("approvals", i, a.id) for i, a in enumerate(spec.approvals)]
    for table, index, rule_id in entries:
        problem = None
        if rule_id in RESERVED_IDS or rule_id.startswith(RESERVED_PREFIXES):
            problem = f"rule id {rule_id!r} is reserved for Stockade's own rules; choose another"
        elif rule_id in seen:
            problem = f"id {rule_id!r} is already used by {seen[rule_id]}; ids must be unique"
        elif (
            table == "approvals" and spec.approvals[index].paths and spec.approvals[index].commands
        ):
            problem = "an approval covers paths or commands, not both; split it in two"
        if problem is not None:
            location = (table, index, "id")
            line = lines.line(location) if lines else None
            raise PolicyError("invalid policy", [Problem(source, line, _dotted(location), problem)])
        seen[rule_id] = f"{table}.{index}"
    return spec


def read(path: Path) -> tuple[PolicySpec, str]:
    """Read and validate a policy file; returns the spec and the file's text."""
    data, text = read_toml(path, "policy file", PolicyError)
    return parse(data, source=str(path), text=text), text


def read_toml(
    path: Path, what: str, error: type[PolicyError] = PolicyError
) -> tuple[dict[str, Any], str]:
    """The data and text of the TOML file at ``path`` (``what`` it is, for the messages);
    raises ``error`` saying why it cannot be read, with the line of a TOML mistake."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise error(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{what} {path} is not UTF-8 text ({exc.reason})") from exc
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        problem = Problem(str(path), _toml_line(str(exc)), "(file)", f"not valid TOML: {exc}")
        raise error(f"invalid {what}", [problem]) from exc


def _toml_line(message: str) -> int | None:
    found = re.search(r"at line (\d+)", message)
    return int(found.group(1)) if found else None


def _dotted(location: tuple[str | int, ...]) -> str:
    return ".".join(str(part) for part in location) or "(file)"
