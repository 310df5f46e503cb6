"""A command's network, filtered by name: the box has no way out but the host's proxy, which
asks a judge about every connection and keeps a record of each.

    egress = Egress(judge=lambda host, port: Verdict(host == "pypi.org", "only pypi.org"))
    result = run_process("pip download requests", fs=fs, timeout=60, network=egress)
    result.connections  # [Connection(host="pypi.org", port=443, allowed=True, ...), ...]

How the box is made (`stockade.sandbox.egress_stub`, `stockade.sandbox.egress_proxy`): the
command gets its own network namespace, where only loopback exists. Its first program opens,
there, an HTTP proxy and a SOCKS5 proxy port, a DNS stub, and a listener on each captured port
(80, 443 and the ports the egress names), and hands them all to this process, which serves
them. The standard proxy variables point at the two proxies, for the tools that honour them.
For those that do not (``curl --noproxy '*'``, a socket opened by hand), the DNS stub answers
every name with an address of the box's own loopback (``127.100.x.y``, one per name), whose
connections land on the captured ports: the proxy knows the name from the address. A
connection to any other address finds no route.

Each connection is judged when it is made, on the host and port it is for: the CONNECT line,
the SOCKS request, the URL of a plain HTTP request, or the name behind the address. Allowed,
the name is resolved here (or through ``hosts``), and every address it resolves to must be
public unless a network of ``reach_private`` holds it: a name that leads to loopback,
link-local or private addresses is refused (the address resolved is the one connected to, so
a second answer cannot differ). A TLS connection whose server name is not the host judged, or
a direct HTTP connection whose ``Host`` is not, is refused too. TLS is never decrypted.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

from stockade.sandbox.errors import SandboxError

Via = Literal["connect", "http", "socks", "direct"]
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# what tools that honour proxy variables read; the socks5h scheme makes them send the name
PROXY_ENV: Mapping[str, str] = {
    **dict.fromkeys(
        ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"), "http://127.0.0.1:3128"
    ),
    "ALL_PROXY": "socks5h://127.0.0.1:1080",
    "all_proxy": "socks5h://127.0.0.1:1080",
    "NO_PROXY": "localhost,127.0.0.1,::1",
    "no_proxy": "localhost,127.0.0.1,::1",
}
RESOLV_CONF = "nameserver 127.0.0.1\noptions attempts:2 timeout:2\n"
HOSTS = "127.0.0.1\tlocalhost stockade\n::1\tlocalhost ip6-localhost ip6-loopback\n"


class Verdict(NamedTuple):
    """A judge's answer about one connection: whether it may be made, and why (or why not)."""

    allowed: bool
    reason: str = ""


Judge = Callable[[str, int], Verdict]
"""``judge(host, port)``: may the command connect to ``host`` (a lower-case name without a
trailing dot, or an IP address) on ``port``? Called from a proxy thread, once per connection,
when it is made; it may block (to ask a person). An exception it raises refuses."""


class Connection(BaseModel):
    """One connection the command asked for, as the proxy saw it.

    ``via`` is how it asked (``connect``: an HTTP CONNECT; ``http``: a plain HTTP request to
    the proxy; ``socks``; ``direct``: a connection to an address the DNS stub gave). ``address``
    is where it went (None when refused before). ``allowed`` is False when it was refused, by
    the judge or by the proxy's own checks, with ``reason`` saying why; an allowed connection
    that could not be made keeps ``allowed`` True and says why in ``reason``. ``bytes_sent``
    went from the command, ``bytes_received`` to it. ``at`` is when it was asked for (Unix
    time, nanoseconds)."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int
    via: Via
    allowed: bool
    reason: str = ""
    address: str | None = None
    bytes_sent: int = 0
    bytes_received: int = 0
    at: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True)
class Egress:
    """What a command's network may reach: ``judge`` decides each connection; ``hosts`` maps
    names to addresses ahead of DNS; ``reach_private`` lists the networks (CIDRs) that may be
    reached although loopback, link-local or private; ``ports`` are captured for connections
    made straight to an address (80 and 443 always). ``on_connection`` is told each connection
    once it has ended (from a proxy thread), so a caller keeps them even when the run fails.
    At most ``max_connections`` are open at once; past it, new ones are refused."""

    judge: Judge
    hosts: Mapping[str, str] = field(default_factory=dict)
    reach_private: Sequence[str] = ()
    ports: Sequence[int] = (80, 443)
    on_connection: Callable[[Connection], None] | None = None
    connect_timeout_s: float = 10.0
    max_connections: int = 256
    max_recorded: int = 1000

    def __post_init__(self) -> None:
        for name, address in self.hosts.items():
            try:
                ipaddress.ip_address(address)
            except ValueError:
                raise SandboxError(
                    f"hosts maps {name!r} to {address!r}, which is not an IP address; give one"
                ) from None
        self.networks()  # check the CIDRs now, not at the first connection
        bad = [p for p in self.ports if not isinstance(p, int) or not 0 < p < 65536]
        if bad:
            raise SandboxError(f"ports must be numbers from 1 to 65535, got {bad}")

    def networks(self) -> tuple[IPNetwork, ...]:
        """``reach_private`` as networks."""
        try:
            return tuple(ipaddress.ip_network(n, strict=False) for n in self.reach_private)
        except ValueError as exc:
            raise SandboxError(f"reach_private: {exc}; give CIDRs like 10.0.0.0/8") from None

    def captured(self) -> list[int]:
        """The ports captured in the box, in order."""
        return sorted({80, 443, *self.ports})


def unreachable(address: str, allowed: Sequence[IPNetwork]) -> str | None:
    """None when ``address`` may be connected to, else what kind of address it is: loopback,
    link-local, private and the other non-public ranges are refused unless a network of
    ``allowed`` holds them (an IPv4 address inside IPv6, mapped, NAT64 or 6to4, is judged as
    the IPv4 address it carries)."""
    try:
        ip: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(address)
    except ValueError:
        return "not an IP address"
    if isinstance(ip, ipaddress.IPv6Address):
        inner = ip.ipv4_mapped or ip.sixtofour
        if ip in _NAT64:
            inner = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
        if inner is not None:
            ip = inner
    if any(ip.version == net.version and ip in net for net in allowed):
        return None
    for kind, test in _KINDS:
        if test(ip):
            return kind
    return None


_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_KINDS: tuple[tuple[str, Callable[[ipaddress.IPv4Address | ipaddress.IPv6Address], bool]], ...] = (
    ("a loopback address", lambda ip: ip.is_loopback),
    ("an unspecified address", lambda ip: ip.is_unspecified),
    ("a link-local address", lambda ip: ip.is_link_local),
    ("a multicast address", lambda ip: ip.is_multicast),
    ("a private address", lambda ip: ip.is_private),
    ("a reserved address", lambda ip: ip.is_reserved),
    ("not a public address", lambda ip: not ip.is_global),
)
