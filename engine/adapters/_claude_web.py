"""The host a ``WebFetch`` URL reaches, read the way Claude Code's fetch reads it, and whether
that host is on the user's own machine or network, for Claude Code's hook.

    web_target("https://docs.python.org/3/")   # WebTarget('https', 'docs.python.org', 443)
    web_target("https://a.test\\@b.test/")     # None: two readings, two hosts
    is_internal("2130706433")                  # True: 127.0.0.1 to a browser's URL parser

Written by hand because the hook and the fetch must agree on the host, and Python's `urlsplit`
is not the WHATWG URL parser Claude Code's runtime uses: a backslash is a ``/`` to WHATWG
(``https://a.test\\@b.test/`` goes to ``a.test``) and a character of ``userinfo`` to Python
(``b.test``); WHATWG reads ``2130706433``, ``0x7f.1`` and ``127.1`` as IPv4 addresses, Python
as names. A URL that could be read two ways is refused a host (None); numeric hosts are read
as WHATWG reads them.
"""

from __future__ import annotations

import ipaddress
from typing import NamedTuple
from urllib.parse import urlsplit

# names that never leave the machine or the local network
_LOCAL_SUFFIXES = (
    ".localhost",
    ".local",
    ".localdomain",
    ".internal",
    ".intranet",
    ".lan",
    ".home",
    ".corp",
    ".home.arpa",
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


class WebTarget(NamedTuple):
    """Where a URL goes: its scheme (lowercase), host (lowercase, no brackets) and port."""

    scheme: str
    host: str
    port: int


def web_target(url: str) -> WebTarget | None:
    """Where ``url`` goes, or None when it cannot be read one way only (a backslash, a space
    or control character, a port out of range, no host)."""
    if any(ch == "\\" or ord(ch) <= 0x20 or ord(ch) == 0x7F for ch in url):
        return None
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if not host:
        return None
    numeric = _whatwg_ipv4(host)
    if numeric is not None:
        host = numeric
    return WebTarget(scheme, host, port or _DEFAULT_PORTS.get(scheme, 443))


def is_internal(host: str) -> bool:
    """Whether ``host`` is this machine or a private network: loopback, private, link-local
    (cloud metadata) and reserved addresses, ``localhost`` and local-only names, and a name
    of one label (found through the local resolver's search domains)."""
    host = host.lower().strip("[]").rstrip(".")
    try:
        address = ipaddress.ip_address(_whatwg_ipv4(host) or host)
    except ValueError:
        address = None
    if address is not None:
        mapped = getattr(address, "ipv4_mapped", None)
        return not (mapped or address).is_global
    if host == "localhost" or host.endswith(_LOCAL_SUFFIXES):
        return True
    return "." not in host


def _whatwg_ipv4(host: str) -> str | None:
    """``host`` as the dotted IPv4 address WHATWG reads in it (``0x7f.1`` -> ``127.0.0.1``);
    None when it is a name. A host that ends in a number but is no address is ``0.0.0.0``,
    which is internal: WHATWG refuses it, and it is refused here too."""
    labels = host.split(".")
    if ":" in host or not _number_like(labels[-1]):  # an IPv6 address, or a name
        return None
    try:
        numbers = [_whatwg_number(label) for label in labels]
        if len(numbers) > 4 or any(n > 255 for n in numbers[:-1]):
            raise ValueError
        last_bytes = 5 - len(numbers)
        if numbers[-1] >= 256**last_bytes:
            raise ValueError
        value = numbers[-1]
        for index, number in enumerate(numbers[:-1]):
            value += number << (8 * (3 - index))
        return str(ipaddress.IPv4Address(value))
    except ValueError:
        return "0.0.0.0"


def _number_like(label: str) -> bool:
    if label.lower().startswith("0x"):
        return all(ch in "0123456789abcdefABCDEF" for ch in label[2:])
    return label.isdigit() and label.isascii()


def _whatwg_number(label: str) -> int:
    if label.lower().startswith("0x"):
        return int(label[2:] or "0", 16)
    if len(label) > 1 and label.startswith("0"):
        return int(label[1:], 8)
    return int(label)


__all__ = ["WebTarget", "is_internal", "web_target"]
