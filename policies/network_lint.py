"""Lint findings on how a policy lets commands reach the network: its ``[network]`` table, and
a network left open to every host.

Loading refuses a pattern that is not one (a URL, a bad port); this reports patterns that are
valid but almost certainly not meant: one that allows every host, one over a whole top-level
domain or a suffix shared by unrelated owners (``*.com``, ``*.co.uk``, ``*.github.io``), an
allow entry a deny entry always beats, private networks that hold the whole loopback range.
"""

from __future__ import annotations

import ipaddress
from typing import Literal

from stockade.policies.array_lines import array_item_line
from stockade.policies.egress import EgressRules
from stockade.policies.host_patterns import HostPattern, normalise
from stockade.policies.policy_file import PolicySpec
from stockade.policies.source import SourceMap

Severity = Literal["error", "warning", "info"]
NetworkFinding = tuple[Severity, int | None, str, str]
"""severity, line, key (dotted), message"""

# Suffixes under which names belong to unrelated owners (from the Public Suffix List): a
# pattern over one of them allows strangers' hosts. A short list of the common ones; a
# single-label suffix (com, io, localhost) is caught whatever it is.
SHARED_SUFFIXES = frozenset(
    {
        *("co.uk", "org.uk", "ac.uk", "gov.uk", "me.uk", "ltd.uk", "plc.uk", "net.uk"),
        *("com.au", "net.au", "org.au", "edu.au", "gov.au", "co.nz", "org.nz", "net.nz"),
        *("co.jp", "ne.jp", "or.jp", "ac.jp", "co.kr", "or.kr", "co.in", "net.in", "org.in"),
        *("com.br", "net.br", "org.br", "com.cn", "net.cn", "org.cn", "com.hk", "com.tw"),
        *("com.sg", "com.my", "com.ph", "com.vn", "co.id", "co.il", "co.za", "com.mx"),
        *("com.ar", "com.tr", "com.ua", "com.pl", "co.at", "eu.org"),
        *("github.io", "gitlab.io", "githubusercontent.com", "herokuapp.com", "appspot.com"),
        *("azurewebsites.net", "cloudapp.net", "cloudfront.net", "amazonaws.com"),
        *("s3.amazonaws.com", "elasticbeanstalk.com", "blogspot.com", "netlify.app"),
        *("vercel.app", "pages.dev", "workers.dev", "r2.dev", "web.app", "firebaseapp.com"),
        *("ngrok.io", "ngrok.app", "ngrok-free.app", "fly.dev", "onrender.com", "glitch.me"),
        *("readthedocs.io", "trycloudflare.com", "duckdns.org"),
    }
)
_LOOPBACK_V4 = ipaddress.IPv4Network("127.0.0.0/8")
_WHOLE_V4 = "the whole loopback range, 127.0.0.0/8"
_LOOPBACK_V6 = "every IPv6 address, ::1 among them"
_LISTS = ("allow", "deny", "reach_private")


def network_findings(spec: PolicySpec, text: str) -> list[NetworkFinding]:
    """What is probably a mistake in how ``spec`` (read from ``text``) lets commands reach
    the network, in no particular order."""
    lines = SourceMap(text)
    found: list[NetworkFinding] = []

    def add(severity: Severity, location: tuple[str | int, ...], message: str) -> None:
        line = lines.line(location)
        if line and len(location) == 3 and location[1] in _LISTS and isinstance(location[2], int):
            line = array_item_line(text, line, location[2]) or line
        found.append((severity, line, ".".join(map(str, location)), message))

    if spec.network is None:
        if spec.process.network:
            add(
                "warning",
                ("process", "network"),
                "commands may reach every host; list the hosts they need in a [network] table "
                '(allow = ["pypi.org", "*.pythonhosted.org"]) to let them reach those alone',
            )
        return found
    rules = EgressRules.from_spec(spec.network)
    for index, pattern in enumerate(rules.allow):
        message = _broad(pattern)
        if message is not None:
            severity: Severity = "error" if pattern.kind == "any" else "warning"
            add(severity, ("network", "allow", index), message)
        for number, denied in enumerate(rules.deny):
            if denied.covers(pattern):
                add("warning", ("network", "allow", index), _beaten(pattern, denied, number))
                break
    if rules.unlisted.value == "deny":
        for index, denied in enumerate(rules.deny):
            if not any(denied.overlaps(allowed) for allowed in rules.allow):
                add(
                    "info",
                    ("network", "deny", index),
                    f"deny {denied.text!r} changes nothing: no allow pattern reaches what it "
                    "names, and unlisted hosts are denied anyway",
                )
    for index, (written, network) in enumerate(
        zip(spec.network.reach_private, rules.reach_private, strict=True)
    ):
        if _holds_loopback(network):
            add(
                "warning",
                ("network", "reach_private", index),
                f"{written!r} holds {_LOOPBACK_V6 if ':' in network else _WHOLE_V4}: commands "
                "may reach every local service of this machine (on the ports allow names); "
                "give the services' own addresses, e.g. 127.0.0.1/32",
            )
    for written in spec.network.hosts:
        name = normalise(written) or written  # valid: loading checked it
        if not any(p.matches_host(name, False) for p in rules.allow):
            unless = (
                ' unless someone approves a connection to it (unlisted = "ask")'
                if rules.unlisted.value == "ask"
                else ""
            )
            add(
                "warning",
                ("network", "hosts", written),
                f"hosts maps {written!r}, which no allow pattern allows: the mapping is never "
                f"used{unless}; add the name to allow, or drop the mapping",
            )
    return found


def _broad(pattern: HostPattern) -> str | None:
    """What is wrong with an allow pattern that reaches far more than anyone means, if so."""
    if pattern.kind == "any":
        ports = "any port" if pattern.ports is None else "ports " + _ports(pattern.ports)
        return (
            f"{pattern.text!r} allows every host (on {ports}): commands may reach anything; "
            "list the hosts they need instead, e.g. pypi.org or *.pythonhosted.org"
        )
    if pattern.kind != "subdomains":
        return None
    if "." not in pattern.host:
        what = "a whole top-level domain"
    elif pattern.host in SHARED_SUFFIXES:
        what = "a suffix under which names belong to unrelated owners"
    else:
        return None
    return (
        f"{pattern.text!r} allows every name under {pattern.host!r}, {what}; name the domain "
        f"you mean, e.g. *.example.{pattern.host}"
    )


def _beaten(pattern: HostPattern, denied: HostPattern, number: int) -> str:
    if (pattern.kind, pattern.host, pattern.ports) == (denied.kind, denied.host, denied.ports):
        return (
            f"{pattern.text!r} is in deny too (deny[{number}]): deny wins, so this allow entry "
            "never applies"
        )
    return (
        f"allow {pattern.text!r} never applies: deny {denied.text!r} (deny[{number}]) names "
        "every host and port it does, and deny wins"
    )


def _holds_loopback(network: str) -> bool:
    parsed = ipaddress.ip_network(network)
    if isinstance(parsed, ipaddress.IPv4Network):
        return _LOOPBACK_V4.subnet_of(parsed)
    return parsed.prefixlen == 0


def _ports(ports: frozenset[int]) -> str:
    return ", ".join(map(str, sorted(ports)))
