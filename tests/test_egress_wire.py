"""What the egress proxy reads off the wire: a command writes these bytes, so every reader must
answer what it can read and refuse the rest with a `WireError`, never anything else."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator

import dns.message
import dns.rcode
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stockade.sandbox.egress import unreachable
from stockade.sandbox.egress_wire import (
    WireError,
    absolute_target,
    dns_answer,
    origin_head,
    parse_request,
    read_head,
    server_name,
    socks_request,
    split_authority,
)


def client_hello(name: str | None) -> bytes:
    """The first record a real TLS client (Python's ssl) sends for ``name``."""
    context = ssl.create_default_context()
    context.check_hostname = False
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname=name)
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def test_the_server_name_of_a_real_client_hello_is_read() -> None:
    assert server_name(client_hello("pypi.org")) == "pypi.org"
    assert server_name(client_hello(None)) is None


@given(st.binary(max_size=600))
@settings(max_examples=400)
def test_a_garbled_client_hello_is_refused_never_crashes(data: bytes) -> None:
    hello = client_hello("files.pythonhosted.org")
    for candidate in (data, hello[: len(data) % len(hello)], b"\x16\x03\x01" + data):
        try:
            name = server_name(candidate)
        except WireError:
            continue
        assert name is None or isinstance(name, str)


@pytest.mark.parametrize(
    ("authority", "default", "expected"),
    [
        ("pypi.org:443", None, ("pypi.org", 443)),
        ("[::1]:8080", None, ("::1", 8080)),
        ("example.test", 80, ("example.test", 80)),
        ("[2001:db8::1]", 80, ("2001:db8::1", 80)),
    ],
)
def test_authorities(authority: str, default: int | None, expected: tuple[str, int]) -> None:
    assert split_authority(authority, default) == expected


@pytest.mark.parametrize(
    "bad", ["pypi.org:0", "pypi.org:65536", "pypi.org:x", "[::1", "a:b:c", "h"]
)
def test_bad_authorities_are_refused(bad: str) -> None:
    with pytest.raises(WireError):
        split_authority(bad, None)


def test_a_plain_proxy_request_is_sent_on_as_origin_form_without_proxy_headers() -> None:
    head = (
        b"GET http://user:pw@a.test:8080/x?y=1 HTTP/1.1\r\nHost: evil.test\r\n"
        b"Proxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nAccept: */*\r\n\r\n"
    )
    request = parse_request(head)
    host, port, path = absolute_target(request.target)
    assert (host, port, path) == ("a.test", 8080, "/x?y=1")
    sent = origin_head(request, path, "a.test:8080").decode()
    assert sent.startswith("GET /x?y=1 HTTP/1.1\r\nHost: a.test:8080\r\n")
    assert "evil.test" not in sent
    assert "Proxy-" not in sent
    assert "Connection: close" in sent


@pytest.mark.parametrize("target", ["https://a.test/", "/relative", "ftp://a.test/", "a.test:80"])
def test_a_plain_request_needs_an_http_url(target: str) -> None:
    with pytest.raises(WireError):
        absolute_target(target)


@given(st.binary(max_size=300))
def test_any_request_head_reads_or_is_refused(data: bytes) -> None:
    try:
        request = parse_request(data + b"\r\n\r\n")
        absolute_target(request.target)
    except WireError:
        pass


@contextlib.contextmanager
def _paired(data: bytes) -> Iterator[socket.socket]:
    """A socket that reads ``data`` then its end; what it writes is taken (and dropped)."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        theirs.sendall(data)
        theirs.shutdown(socket.SHUT_WR)
        yield ours


def test_a_head_longer_than_the_bound_is_refused() -> None:
    too_long = b"GET http://a.test/ HTTP/1.1\r\nX: " + b"a" * 70_000
    with _paired(too_long) as sock, pytest.raises(WireError, match="longer than"):
        read_head(sock)


@given(st.binary(max_size=80))
def test_any_socks_bytes_read_or_are_refused(data: bytes) -> None:
    with _paired(data) as sock:
        try:
            host, port = socks_request(sock)
        except (WireError, OSError):
            return
        assert 0 <= port < 65536
        assert isinstance(host, str)


def test_a_socks_connect_by_name_is_read() -> None:
    name = b"pypi.org"
    request = b"\x05\x01\x00" + b"\x05\x01\x00\x03" + bytes([len(name)]) + name + b"\x01\xbb"
    with _paired(request) as sock:
        assert socks_request(sock) == ("pypi.org", 443)


def _query(name: str, kind: str) -> bytes:
    return dns.message.make_query(name, kind).to_wire()


def _answered(query: bytes, address: str | None) -> dns.message.Message:
    wire = dns_answer(query, lambda name: address)
    assert wire is not None
    return dns.message.from_wire(wire)


def test_dns_answers_a_with_the_address_given_and_nothing_for_aaaa() -> None:
    answer = _answered(_query("pypi.org", "A"), "127.100.0.1")
    assert answer.answer[0].to_text().endswith("A 127.100.0.1")
    empty = _answered(_query("pypi.org", "AAAA"), "x")
    assert empty.answer == []
    assert empty.rcode() == dns.rcode.NOERROR
    refused = _answered(_query("pypi.org", "A"), None)
    assert refused.rcode() == dns.rcode.REFUSED


@given(st.binary(max_size=512))
@settings(max_examples=400)
def test_any_dns_bytes_answer_or_are_dropped(data: bytes) -> None:
    answer = dns_answer(data, lambda name: "127.100.0.9")
    assert answer is None or isinstance(answer, bytes)


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("169.254.169.254", "link-local"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("64:ff9b::a00:1", "private"),
        ("2002:a00:1::", "private"),
        ("0.0.0.0", "unspecified"),
        ("fe80::1", "link-local"),
        ("100.64.0.1", "not a public"),
        ("224.0.0.1", "multicast"),
    ],
)
def test_non_public_addresses_are_refused(address: str, kind: str) -> None:
    said = unreachable(address, ())
    assert said is not None
    assert kind in said


def test_public_addresses_and_listed_networks_may_be_reached() -> None:
    import ipaddress

    assert unreachable("151.101.0.223", ()) is None
    assert unreachable("2a04:4e42::223", ()) is None
    assert unreachable("10.1.2.3", (ipaddress.ip_network("10.0.0.0/8"),)) is None
    assert unreachable("::ffff:10.1.2.3", (ipaddress.ip_network("10.0.0.0/8"),)) is None
