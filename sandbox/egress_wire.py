"""What the egress proxy reads off the wire to learn where a connection wants to go: an HTTP
request head (a CONNECT, or a plain request to an absolute URL), a SOCKS5 request, the server
name of a TLS ClientHello, a DNS query.

Everything here reads bytes an untrusted command wrote, so each reader has a size bound and
raises `WireError` (never anything else) for what it cannot read. DNS goes through dnspython.
The rest is written by hand, on purpose: the proxy must read the head and nothing more, then
relay every following byte untouched, which the HTTP libraries (built to consume whole
messages) do not offer, and no library reads a ClientHello's server name without a TLS stack.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

from stockade.sandbox.errors import SandboxError

MAX_HEAD = 64 * 1024  # an HTTP request head (browsers send a few KiB; servers cap at 8-64 KiB)
MAX_HELLO = 16 * 1024 + 5  # one TLS record: a ClientHello's most


class WireError(SandboxError):
    """What a client sent cannot be read as what its listener expects."""


@dataclass(frozen=True, slots=True)
class HttpRequest:
    """An HTTP request head, as sent to a proxy."""

    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((value for key, value in self.headers if key.lower() == wanted), None)


def recv_exact(sock: socket.socket, size: int) -> bytes:
    """``size`` bytes from ``sock``; WireError when it closes first."""
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise WireError(f"the connection closed after {len(data)} of {size} bytes")
        data += chunk
    return bytes(data)


def read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """An HTTP head (through its blank line) and what came after it in the same reads."""
    data = b""
    while True:
        end = data.find(b"\r\n\r\n")
        if end >= 0:
            return data[: end + 4], data[end + 4 :]
        if len(data) > MAX_HEAD:
            raise WireError(f"the request head is longer than {MAX_HEAD} bytes")
        chunk = sock.recv(65536)
        if not chunk:
            raise WireError("the connection closed before the request head ended")
        data += chunk


def parse_request(head: bytes) -> HttpRequest:
    """The request line and headers of ``head`` (ASCII, as HTTP/1 heads are)."""
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise WireError("the request head is not ASCII") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise WireError(f"not an HTTP/1 request line: {lines[0][:80]!r}")
    headers = []
    for line in lines[1:]:
        if not line:
            continue
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise WireError(f"not a header line: {line[:80]!r}")
        headers.append((name, value.strip()))
    return HttpRequest(parts[0], parts[1], parts[2], headers)


def split_authority(authority: str, default_port: int | None) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``, or the host alone with a default port) as (host, port)."""
    host, port_text = authority, ""
    if authority.startswith("["):
        close = authority.find("]")
        if close < 0:
            raise WireError(f"unclosed IPv6 address in {authority[:80]!r}")
        host, rest = authority[1:close], authority[close + 1 :]
        if rest and not rest.startswith(":"):
            raise WireError(f"not a host and port: {authority[:80]!r}")
        port_text = rest[1:]
    elif authority.count(":") == 1:
        host, port_text = authority.split(":")
    if not port_text:
        if default_port is None:
            raise WireError(f"no port in {authority[:80]!r}")
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise WireError(f"not a port number: {port_text[:20]!r}")
    return host, int(port_text)


def absolute_target(target: str) -> tuple[str, int, str]:
    """An ``http://host[:port]/path`` request target as (host, port, origin-form path)."""
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() != "http":
        raise WireError(
            f"a plain proxy request needs an http:// URL, got {target[:80]!r} (https goes "
            "through CONNECT)"
        )
    authority, slash, path = rest.partition("/")
    authority = authority.rpartition("@")[2]  # user:password@ is not part of where it goes
    host, port = split_authority(authority, 80)
    return host, port, slash + path if slash else "/"


def origin_head(request: HttpRequest, path: str, host_header: str) -> bytes:
    """The head to send the server: the path alone, its own ``Host``, no proxy headers, and
    ``Connection: close`` (each request on a proxy connection is judged on its own, so the
    server is not asked to keep one open for the next)."""
    kept = [
        (name, value)
        for name, value in request.headers
        if name.lower() not in ("host", "connection", "proxy-connection", "proxy-authorization")
        and not name.lower().startswith("keep-alive")
    ]
    lines = [f"{request.method} {path} {request.version}", f"Host: {host_header}"]
    lines += [f"{name}: {value}" for name, value in kept]
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("ascii")


# -- SOCKS5 -------------------------------------------------------------------------------------

SOCKS_REFUSED = 0x02  # connection not allowed by ruleset
SOCKS_UNREACHABLE = 0x04
SOCKS_FAILED = 0x05  # connection refused
SOCKS_UNSUPPORTED = 0x07


def socks_request(sock: socket.socket) -> tuple[str, int]:
    """Read a SOCKS5 greeting and CONNECT request (no authentication); (host, port). Anything
    else gets its refusal here and raises WireError."""
    version, count = recv_exact(sock, 2)
    if version != 5:
        raise WireError(f"not SOCKS5 (version byte {version})")
    methods = recv_exact(sock, count)
    if 0 not in methods:
        sock.sendall(b"\x05\xff")
        raise WireError("the SOCKS client offers no method without authentication")
    sock.sendall(b"\x05\x00")
    version, command, _, kind = recv_exact(sock, 4)
    if kind == 1:
        host = socket.inet_ntop(socket.AF_INET, recv_exact(sock, 4))
    elif kind == 4:
        host = socket.inet_ntop(socket.AF_INET6, recv_exact(sock, 16))
    elif kind == 3:
        host = recv_exact(sock, recv_exact(sock, 1)[0]).decode("ascii", "replace")
    else:
        socks_reply(sock, SOCKS_UNSUPPORTED)
        raise WireError(f"SOCKS address type {kind} is not known")
    (port,) = struct.unpack("!H", recv_exact(sock, 2))
    if version != 5 or command != 1:
        socks_reply(sock, SOCKS_UNSUPPORTED)
        raise WireError(f"SOCKS command {command} is not offered (only CONNECT is)")
    return host, port


def socks_reply(sock: socket.socket, code: int) -> None:
    """Answer a SOCKS5 request: 0 for success, else why not."""
    sock.sendall(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))


# -- TLS ----------------------------------------------------------------------------------------


def is_tls_hello(data: bytes) -> bool:
    """Whether ``data`` begins a TLS handshake record (a ClientHello, from a client)."""
    return len(data) >= 3 and data[0] == 0x16 and data[1] == 3


def hello_length(data: bytes) -> int:
    """How many bytes the first TLS record of ``data`` takes (header included)."""
    return 5 + int.from_bytes(data[3:5], "big") if len(data) >= 5 else MAX_HELLO


def server_name(hello: bytes) -> str | None:
    """The server name (SNI) a ClientHello record asks for, or None when it names none."""
    try:
        return _server_name(memoryview(hello))
    except (IndexError, ValueError, UnicodeDecodeError):
        raise WireError("the TLS ClientHello cannot be read") from None


def _server_name(data: memoryview) -> str | None:
    if data[5] != 1:
        raise ValueError("not a ClientHello")
    at = 5 + 4 + 2 + 32  # record header, handshake header, version, random
    at += 1 + data[at]  # session id
    at += 2 + int.from_bytes(data[at : at + 2], "big")  # cipher suites
    at += 1 + data[at]  # compression methods
    if at >= len(data):
        return None  # no extensions
    end = at + 2 + int.from_bytes(data[at : at + 2], "big")
    at += 2
    while at + 4 <= end:
        kind = int.from_bytes(data[at : at + 2], "big")
        size = int.from_bytes(data[at + 2 : at + 4], "big")
        body = data[at + 4 : at + 4 + size]
        if kind == 0:  # server_name: a list of (type, name); type 0 is a host name
            length = int.from_bytes(body[3:5], "big")
            if body[2] != 0 or len(body[5 : 5 + length]) != length:
                raise ValueError("bad server name")
            return bytes(body[5 : 5 + length]).decode("ascii")
        at += 4 + size
    return None


# -- DNS ----------------------------------------------------------------------------------------


def dns_answer(query: bytes, address_of: Callable[[str], str | None]) -> bytes | None:
    """The answer to a DNS query: an A record from ``address_of(name)`` (no record when it
    gives None), no records for any other type (so clients fall back to IPv4), and None for
    what is not a query at all (dropped, as a resolver drops garbage)."""
    try:
        message = dns.message.from_wire(query)
    except (dns.exception.DNSException, ValueError, IndexError, UnicodeError):
        return None
    if message.flags & dns.flags.QR or len(message.question) != 1:
        return None
    question = message.question[0]
    response = dns.message.make_response(message)
    response.flags |= dns.flags.RA
    name = question.name.to_text(omit_final_dot=True)
    if question.rdclass == dns.rdataclass.IN and question.rdtype == dns.rdatatype.A:
        address = address_of(name)
        if address is None:
            response.set_rcode(dns.rcode.REFUSED)
        else:
            response.answer.append(dns.rrset.from_text(question.name, 1, "IN", "A", address))
    return response.to_wire()


def is_ip(host: str) -> bool:
    """Whether ``host`` is an IP address literal."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
