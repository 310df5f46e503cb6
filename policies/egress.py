"""A policy's ``[network]`` table, compiled: may a command connect to this host on this port?

    rules = policy.egress                       # None when the policy has no [network] table
    rules.decide("files.pythonhosted.org", 443) # Decision(ALLOW, "network.allow[1]", ...)
    rules.decide("evil.test", 443)              # Decision(DENY, "network.unlisted", ...)

A deny pattern that names the host and port decides first (deny wins), then an allow pattern,
then ``unlisted`` (deny, or ask someone). The host comes from a command, so it is never trusted:
anything that is not a host name or an IP address is denied, and no input raises. Deciding is a
dictionary lookup for the name itself and one more per label above it; nothing is remembered
between calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Literal, NamedTuple

from stockade.policies.decision import Decision, Effect
from stockade.policies.host_patterns import (
    DEFAULT_PORTS,
    HostPattern,
    check_address,
    check_name,
    check_network,
    is_address,
    normalise,
    parse_pattern,
)
from stockade.policies.policy_file import NetworkSpec

__all__ = ["EgressRules", "NetworkMode", "normalise"]

NetworkMode = Literal["none", "open", "filtered"]
"""How a policy's commands reach the network: ``none``; ``open`` (every host: ``[process]
network = true`` and no ``[network]`` table); ``filtered`` (the hosts ``[network]`` allows)."""

INVALID_RULE = "network.invalid"
UNLISTED_RULE = "network.unlisted"
_ACTION = "connect"
_SHOWN = 200  # characters of a bad host kept in a reason: enough to recognise it


class _Entry(NamedTuple):
    position: int  # in its list
    ports: frozenset[int] | None  # None: any port


class _Patterns:
    """One list (allow or deny), indexed by how its patterns match: names and addresses by
    themselves, ``*.domain`` by the domain, ``*`` apart."""

    def __init__(self, patterns: Sequence[HostPattern]) -> None:
        self.patterns = tuple(patterns)
        self._exact: dict[str, list[_Entry]] = {}
        self._under: dict[str, list[_Entry]] = {}
        self._every: list[_Entry] = []
        for index, pattern in enumerate(self.patterns):
            entry = _Entry(index, pattern.ports)
            if pattern.kind == "any":
                self._every.append(entry)
            else:
                table = self._exact if pattern.kind == "exact" else self._under
                table.setdefault(pattern.host, []).append(entry)

    def first(self, host: str, port: int, address: bool) -> tuple[int | None, bool]:
        """The index of the first pattern naming ``host`` on ``port`` (None if none), and
        whether any pattern names ``host`` on some port."""
        best: int | None = None
        named = False
        for entries in self._candidates(host, address):
            for index, ports in entries:
                named = True
                if (ports is None or port in ports) and (best is None or index < best):
                    best = index
                    break  # entries are in list order: the first that fits is the earliest
        return best, named

    def _candidates(self, host: str, address: bool) -> list[list[_Entry]]:
        found = [self._every, self._exact.get(host, [])]
        if not address and self._under:
            dot = host.find(".")
            while dot >= 0:  # every domain above the name: a.b.c -> b.c, c
                entries = self._under.get(host[dot + 1 :])
                if entries:
                    found.append(entries)
                dot = host.find(".", dot + 1)
        return found


class EgressRules:
    """The compiled ``[network]`` table. ``hosts`` maps each name (normalised) to the address
    used instead of DNS; ``reach_private`` holds the private networks allowed hosts may resolve
    to (as `ipaddress` writes them); ``ports`` every port an allow pattern names, with 80 and
    443 (the ports a connection made straight to an address may use); ``allow`` and ``deny``
    the patterns, read, in file order."""

    __slots__ = ("_allow", "_deny", "_unlisted", "hosts", "ports", "reach_private")

    def __init__(
        self,
        allow: Sequence[HostPattern] = (),
        deny: Sequence[HostPattern] = (),
        *,
        unlisted: Literal["deny", "ask"] = "deny",
        hosts: Mapping[str, str] | None = None,
        reach_private: Sequence[str] = (),
    ) -> None:
        self._allow = _Patterns(allow)
        self._deny = _Patterns(deny)
        self._unlisted = Effect.ASK if unlisted == "ask" else Effect.DENY
        self.hosts: Mapping[str, str] = MappingProxyType(dict(hosts or {}))
        self.reach_private: tuple[str, ...] = tuple(reach_private)
        named = (p.ports for p in self._allow.patterns if p.ports is not None)
        self.ports: frozenset[int] = DEFAULT_PORTS.union(*named)

    @classmethod
    def from_spec(cls, spec: NetworkSpec) -> EgressRules:
        """Compile a ``[network]`` table (validated already: its patterns, names and networks
        were checked when the policy was loaded)."""
        return cls(
            [parse_pattern(p) for p in spec.allow],
            [parse_pattern(p) for p in spec.deny],
            unlisted=spec.unlisted,
            hosts={check_name(name): check_address(a) for name, a in spec.hosts.items()},
            reach_private=[check_network(n) for n in spec.reach_private],
        )

    @property
    def allow(self) -> tuple[HostPattern, ...]:
        """The allow patterns, in file order."""
        return self._allow.patterns

    @property
    def deny(self) -> tuple[HostPattern, ...]:
        """The deny patterns, in file order."""
        return self._deny.patterns

    @property
    def unlisted(self) -> Effect:
        """What a host on neither list gets: DENY or ASK."""
        return self._unlisted

    def decide(self, host: str, port: int) -> Decision:
        """May a command connect to ``host`` on ``port``? The decision's action is ``connect``,
        its target ``host:port`` (normalised; an IPv6 address in brackets), its rule
        ``network.deny[i]``, ``network.allow[i]``, ``network.unlisted`` or, for what is not a
        host and a port, ``network.invalid``. Never raises."""
        if type(port) is not int or not 0 < port < 65536:
            shown = _shown(host)
            return Decision(
                Effect.DENY,
                INVALID_RULE,
                f"{_shown_port(port)} is not a port (1-65535): refused the connection to {shown}",
                _ACTION,
                shown,
            )
        name = normalise(host)
        if name is None:
            shown = _shown(host)
            return Decision(
                Effect.DENY,
                INVALID_RULE,
                f'"{shown}" is not a host name or an IP address: refused',
                _ACTION,
                f"{shown}:{port}",
            )
        address = is_address(name)
        target = f"[{name}]:{port}" if ":" in name else f"{name}:{port}"
        index, _ = self._deny.first(name, port, address)
        if index is not None:
            pattern = self._deny.patterns[index].text
            reason = f"{target} is denied by [network] deny {pattern!r}"
            return Decision(Effect.DENY, f"network.deny[{index}]", reason, _ACTION, target)
        index, named = self._allow.first(name, port, address)
        if index is not None:
            pattern = self._allow.patterns[index].text
            reason = f"{target} is allowed by [network] allow {pattern!r}"
            return Decision(Effect.ALLOW, f"network.allow[{index}]", reason, _ACTION, target)
        reason = f"{target} is not in [network] allow"
        if named:
            reason += f" (its patterns for {name} name other ports)"
        if self._unlisted is Effect.ASK:
            reason += '; unlisted = "ask": a connection to it needs approval'
        return Decision(self._unlisted, UNLISTED_RULE, reason, _ACTION, target)

    def __repr__(self) -> str:
        return (
            f"<EgressRules: {len(self.allow)} allow, {len(self.deny)} deny, "
            f"unlisted {self._unlisted.value}>"
        )


def _shown(host: object) -> str:
    """A host from a command, safe to put in a reason and a log: printable ASCII, bounded."""
    if not isinstance(host, str):
        return f"<{type(host).__name__}>"
    shown = host[:_SHOWN].encode("unicode_escape", "backslashreplace").decode("ascii")
    return shown + "..." if len(host) > _SHOWN else shown


def _shown_port(port: object) -> str:
    if type(port) is int and -(10**9) < port < 10**9:
        return f"port {port}"
    if type(port) is int:
        return "a port number that large"
    return f"a port given as {type(port).__name__}"
