"""Host names, addresses and the patterns of a policy's ``[network]`` table, read one way.

A pattern and a host a command asks for are both brought to one spelling before they meet:
lower case, one trailing dot dropped, a Unicode name in its IDNA (punycode) form, an IP address
as `ipaddress` writes it. A name that does not survive that (a space, a NUL, an underscore, a
label longer than 63) is no name, and nothing matches it.

Patterns: ``pypi.org`` (that host), ``*.pythonhosted.org`` (any name under it, at any depth,
not the domain itself), ``10.0.0.5`` or ``[::1]`` (an address), ``*`` (every host); each may end
in ``:port`` or ``:*`` (any port), and without one means ports 80 and 443.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

DEFAULT_PORTS = frozenset({80, 443})
MAX_NAME = 253  # DNS: a name is at most 253 characters written out, a label at most 63
_MAX_TEXT = 1024  # past this nothing is looked at: the work per host stays bounded
_LDH = "abcdefghijklmnopqrstuvwxyz0123456789-"
_HEX = frozenset("0123456789abcdef")
_EXAMPLE = "give a host such as pypi.org, *.pythonhosted.org, 10.0.0.5 or [::1]:8080"

PatternKind = Literal["any", "exact", "subdomains"]


@dataclass(frozen=True, slots=True)
class HostPattern:
    """One pattern, read: ``kind`` is ``any`` (``*``), ``exact`` (a name or an address) or
    ``subdomains`` (``*.domain``: names under ``host``); ``ports`` None means any port."""

    text: str
    kind: PatternKind
    host: str
    ports: frozenset[int] | None

    def matches_host(self, host: str, is_address: bool) -> bool:
        """Whether ``host`` (normalised) is one this pattern names, whatever the port."""
        if self.kind == "any":
            return True
        if self.kind == "exact":
            return host == self.host
        return not is_address and host.endswith("." + self.host)

    def overlaps(self, other: HostPattern) -> bool:
        """Whether some host and port is named by both patterns."""
        if not _ports_overlap(self.ports, other.ports):
            return False
        if self.kind == "any" or other.kind == "any":
            return True
        if self.kind == "exact" and other.kind == "exact":
            return self.host == other.host
        if self.kind == "exact":
            return other.matches_host(self.host, is_address(self.host))
        if other.kind == "exact":
            return self.matches_host(other.host, is_address(other.host))
        return _within(self.host, other.host) or _within(other.host, self.host)

    def covers(self, other: HostPattern) -> bool:
        """Whether every host and port ``other`` names is named by this pattern too."""
        if self.ports is not None and (other.ports is None or not other.ports <= self.ports):
            return False
        if self.kind == "any":
            return True
        if other.kind == "any":
            return False
        if other.kind == "exact":
            return self.matches_host(other.host, is_address(other.host))
        return self.kind == "subdomains" and _within(other.host, self.host)


def normalise(host: str) -> str | None:
    """``host`` in the one spelling patterns are matched in, or None when it is neither a host
    name nor an IP address. Never raises, whatever the text (it may come from a command)."""
    if not isinstance(host, str) or not host or len(host) > _MAX_TEXT:
        return None
    if ":" in host or host.startswith("["):
        return _ipv6(host)
    name = host[:-1] if host.endswith(".") else host
    if not name.isascii():
        mapped = _idna(name)
        if mapped is None:
            return None
        name = mapped[:-1] if mapped.endswith(".") else mapped  # a full stop mapped to "."
    return _ascii_name(name.lower())


def is_address(host: str) -> bool:
    """Whether a normalised host is an IP address (not a name)."""
    return ":" in host or host.rpartition(".")[2].isdigit()


def parse_pattern(text: str) -> HostPattern:
    """A ``[network]`` allow or deny pattern, read; ValueError saying what is wrong with it
    and what to write instead."""
    if not text or not text.strip():
        raise ValueError(f"an empty pattern; {_EXAMPLE}")
    words = text.split()
    if len(words) > 1:
        each = ", ".join(f'"{word}"' for word in words)
        raise ValueError(
            f"{text!r} has a space in it; a pattern is one host: write each as a string of its "
            f"own, e.g. [{each}]"
        )
    if words[0] != text:
        raise ValueError(f"{text!r} has spaces around it; write {words[0]!r}")
    if "://" in text or "/" in text:
        kind = "is a URL" if "://" in text else "has a path in it"
        raise ValueError(
            f"{text!r} {kind}, but patterns name hosts: give the host alone, e.g. {_hint(text)}"
        )
    host, ports = _split_port(text)
    if host == "*":
        return HostPattern(text, "any", "", ports)
    if host.startswith("*.") and "*" not in host[2:]:
        found = normalise(host[2:])
        if found is None:
            raise ValueError(f"{text!r}: after '*.', {host[2:]!r} is {_what_is_wrong(host[2:])}")
        if is_address(found):
            raise ValueError(
                f"{text!r} puts '*.' before an address; '*.' goes before a domain name "
                f"(*.example.com); for the address, write {found!r}"
            )
        return HostPattern(text, "subdomains", found, ports)
    if "*" in host:
        raise ValueError(
            f"{text!r} has a '*' that is not a whole first label: write *.example.com for "
            "every name under example.com, * for every host, or name the host"
        )
    found = normalise(host)
    if found is None:
        raise ValueError(f"{text!r} is {_what_is_wrong(host)}")
    return HostPattern(text, "exact", found, ports)


def check_name(text: str) -> str:
    """A name for ``[network] hosts`` (no address, no pattern), normalised; ValueError
    otherwise."""
    found = normalise(text) if "*" not in text else None
    if found is None:
        raise ValueError(f"{text!r} is {_what_is_wrong(text)}")
    if is_address(found):
        raise ValueError(f"{text!r} is an address; hosts maps names to addresses")
    return found


def check_address(text: str) -> str:
    """An IP address, as `ipaddress` writes it; ValueError otherwise."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(
            f"{text!r} is not an IP address; give one such as 127.0.0.1 or ::1"
        ) from None
    if "%" in text:
        raise ValueError(f"{text!r} names a network interface; give the address alone")
    return str(address)


def check_network(text: str) -> str:
    """A CIDR (``10.0.0.0/8``; a lone address is one host), as `ipaddress` writes it;
    ValueError otherwise."""
    try:
        return str(ipaddress.ip_network(text, strict=False))
    except ValueError:
        raise ValueError(
            f"{text!r} is not a network; give a CIDR such as 10.0.0.0/8, 127.0.0.1/32 or fd00::/8"
        ) from None


# -- reading hosts -------------------------------------------------------------------------


def _ipv6(host: str) -> str | None:
    inner = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if "%" in inner or "[" in inner or "]" in inner:
        return None
    try:
        address = ipaddress.ip_address(inner)
    except ValueError:
        return None
    # an IPv4 address belongs outside brackets (and a bare one never reaches here: no colon)
    return str(address) if isinstance(address, ipaddress.IPv6Address) else None


def _idna(name: str) -> str | None:
    import idna  # its tables load only when a name that is not ASCII is met

    try:
        return idna.encode(name, uts46=True).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        return None


def _ascii_name(name: str) -> str | None:
    if not name or len(name) > MAX_NAME:
        return None
    labels = name.split(".")
    for label in labels:
        # strip() removes allowed characters from both ends: anything left is one not allowed
        if not 0 < len(label) <= 63 or label[0] == "-" or label[-1] == "-" or label.strip(_LDH):
            return None
    last = labels[-1]
    if last.isdigit():  # an IPv4 address, or a spelling of one (127.1) that is not written out
        try:
            return str(ipaddress.IPv4Address(name))
        except ValueError:
            return None
    if last.startswith("0x") and set(last[2:]) <= _HEX:
        return None  # 0x7f.1: a resolver reads it as an address
    if any(label.startswith("xn--") for label in labels) and _idna(name) != name:
        return None  # punycode that does not decode, or not in its one spelling
    return name


def _split_port(text: str) -> tuple[str, frozenset[int] | None]:
    if text.startswith("["):
        close = text.find("]")
        host, rest = (text[: close + 1], text[close + 1 :]) if close > 0 else (text, "")
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r} has {rest!r} after the address; {_EXAMPLE}")
        return host, _port(text, rest[1:]) if rest else DEFAULT_PORTS
    if text.count(":") > 1:  # an IPv6 address without brackets: it has no port
        return text, DEFAULT_PORTS
    host, colon, port = text.partition(":")
    return host, _port(text, port) if colon else DEFAULT_PORTS


def _port(text: str, port: str) -> frozenset[int] | None:
    if port == "*":
        return None
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise ValueError(
            f"{text!r} has the port {port!r}; give a number from 1 to 65535, or * for any port"
        )
    return frozenset({int(port)})


def _what_is_wrong(host: str) -> str:
    if host.count(":") > 1 and not host.startswith("["):
        return "not an IPv6 address; an IPv6 address with a port goes in brackets, e.g. [::1]:8080"
    if host.isascii() and host.rstrip(".").rpartition(".")[2].isdigit():
        return (
            "not an IP address written in full; write IPv4 addresses as four numbers, "
            "e.g. 127.0.0.1"
        )
    return (
        "not a host name or IP address: names are letters, digits and hyphens between dots "
        "(e.g. pypi.org), addresses are written 10.0.0.5 or [::1]"
    )


def _hint(text: str) -> str:
    """The host a pattern written as a URL or with a path most likely meant."""
    try:
        parts = urlsplit(text if "://" in text else "//" + text)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or normalise(host) is None:
        return "pypi.org"
    return f"{host}:{port}" if port else host


# -- comparing patterns --------------------------------------------------------------------


def _within(name: str, domain: str) -> bool:
    return name == domain or name.endswith("." + domain)


def _ports_overlap(first: frozenset[int] | None, second: frozenset[int] | None) -> bool:
    return first is None or second is None or bool(first & second)
