"""The host side of a box's filtered network: one `Proxy` per run serves the sockets the box's
first program handed over (`stockade.sandbox.egress_stub`), judges every connection when it is
made, and relays what is allowed.

Threads, not an event loop: a run's connections are few, a judge may block for minutes (a
person asked), and a blocking copy loop moves data at memory speed with the clearest code.
Each accepted connection has a thread that reads where it wants to go, judges, connects and
copies one way; a second thread copies the other. `close` shuts every socket, which wakes
every thread; a thread still waiting on a judge then finds the proxy closed.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import logging
import os
import re
import socket
import threading
import time
from dataclasses import dataclass

from stockade.sandbox.egress import Connection, Egress, Verdict, Via, unreachable
from stockade.sandbox.egress_wire import (
    MAX_HEAD,
    MAX_HELLO,
    SOCKS_FAILED,
    SOCKS_REFUSED,
    WireError,
    absolute_target,
    dns_answer,
    hello_length,
    is_ip,
    is_tls_hello,
    origin_head,
    parse_request,
    read_head,
    server_name,
    socks_reply,
    socks_request,
    split_authority,
)

log = logging.getLogger("stockade.sandbox")

_FAKE_NET = ipaddress.IPv4Network("127.100.0.0/16")  # the DNS stub's addresses, one per name
_CHUNK = 1024 * 1024
_F_SETPIPE_SZ = 1031  # fcntl: a pipe's size (Linux; Python 3.10 names it, typeshed not always)
_HTTP_START = re.compile(rb"^[A-Z]{3,10} \S+ HTTP/1\.[01]\r\n")


@dataclass(slots=True)
class _Tally:
    """A connection while it lasts; its `Connection` record once it ends."""

    host: str
    port: int
    via: Via
    at: int
    started: float
    allowed: bool = True
    reason: str = ""
    address: str | None = None
    sent: int = 0
    received: int = 0

    def refuse(self, reason: str) -> None:
        self.allowed, self.reason = False, reason

    def record(self) -> Connection:
        return Connection(
            host=self.host,
            port=self.port,
            via=self.via,
            allowed=self.allowed,
            reason=self.reason,
            address=self.address,
            bytes_sent=self.sent,
            bytes_received=self.received,
            at=self.at,
            duration_s=round(time.monotonic() - self.started, 4),
        )


class Proxy:
    """One run's proxy. Give `box_end` to the box (``pass_fds``), call `started` once the box
    process exists, and `close` once it is gone; `connections` holds the records."""

    def __init__(self, egress: Egress) -> None:
        self.egress = egress
        self._networks = egress.networks()
        self._hosts = {name.lower().rstrip("."): a for name, a in egress.hosts.items()}
        self._ours, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._lock = threading.Lock()
        self._names: dict[str, str] = {}  # name -> the address the DNS stub gave it
        self._named: dict[str, str] = {}  # and back
        self._open: set[socket.socket] = {self._ours}
        self._threads: list[threading.Thread] = []
        self._active = 0
        self._closed = False
        self.connections: list[Connection] = []
        self.dropped = 0  # connections made past the records kept
        self._spawn(self._receive)

    @property
    def box_end(self) -> int:
        """The descriptor the box's first program hands its sockets over."""
        return self._theirs.fileno()

    def started(self) -> None:
        """The box has its end now: close this process's copy."""
        self._theirs.close()

    def close(self) -> None:
        """Stop serving: every socket shut and closed, the threads given a moment to end."""
        with self._lock:
            self._closed = True
            sockets = list(self._open)
            self._open.clear()
        self._theirs.close()
        for sock in sockets:
            _shut(sock)
        deadline = time.monotonic() + 2.0
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    # -- serving --------------------------------------------------------------------------------

    def _spawn(self, target: object, *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        thread.name = "stockade-egress"
        self._threads.append(thread)
        thread.start()

    def _track(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                _shut(sock)
                return False
            self._open.add(sock)
            return True

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        _shut(sock)

    def _receive(self) -> None:
        """Take the box's sockets and start serving each."""
        try:
            message, ancillary, _, _ = self._ours.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
            fds: list[int] = []
            for level, kind, data in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    usable = len(data) - len(data) % 4
                    fds += [int.from_bytes(data[i : i + 4], "little") for i in range(0, usable, 4)]
            kinds = json.loads(message) if message else []
            self._ours.sendall(b"k")
        except (OSError, ValueError):
            return  # the box ended before it handed anything over
        finally:
            self._forget(self._ours)
        for kind, fd in zip(kinds, fds, strict=False):
            sock = socket.socket(fileno=fd)
            if not self._track(sock):
                continue
            if kind == "dns":
                self._spawn(self._serve_dns, sock)
            else:
                self._spawn(self._accept, sock, kind)

    def _accept(self, listener: socket.socket, kind: str) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            if not self._track(client):
                return
            with self._lock:
                full = self._active >= self.egress.max_connections
                self._active += 0 if full else 1
            if full:
                self._forget(client)
                with self._lock:
                    self.dropped += 1
                continue
            self._spawn(self._handle, client, kind)

    def _serve_dns(self, sock: socket.socket) -> None:
        while True:
            try:
                query, sender = sock.recvfrom(4096)
            except OSError:
                return
            answer = dns_answer(query, self._address_for)
            if answer is not None:
                with contextlib.suppress(OSError):
                    sock.sendto(answer, sender)

    def _address_for(self, name: str) -> str | None:
        """The box's address for ``name``, one per name (None for what is no host name)."""
        name = name.lower().rstrip(".")
        if not name or is_ip(name) or len(name) > 253:
            return None
        with self._lock:
            address = self._names.get(name)
            if address is None:
                if len(self._names) >= _FAKE_NET.num_addresses - 2:
                    return None
                address = str(_FAKE_NET.network_address + len(self._names) + 1)
                self._names[name] = address
                self._named[address] = name
            return address

    # -- one connection -------------------------------------------------------------------------

    def _handle(self, client: socket.socket, kind: str) -> None:
        tally: _Tally | None = None
        upstream: socket.socket | None = None
        try:
            if kind == "http":
                tally, upstream, first = self._from_http(client)
            elif kind == "socks":
                tally, upstream, first = self._from_socks(client)
            else:
                tally, upstream, first = self._from_direct(client)
            if upstream is not None and tally is not None:
                self._relay(client, upstream, first, tally)
        except (OSError, WireError) as exc:
            if tally is not None and tally.allowed and not tally.reason:
                tally.reason = f"ended with an error: {exc}"
        finally:
            self._forget(client)
            if upstream is not None:
                self._forget(upstream)
            with self._lock:
                self._active -= 1
            if tally is not None:
                self._record(tally)

    def _from_http(
        self, client: socket.socket
    ) -> tuple[_Tally | None, socket.socket | None, bytes]:
        head, rest = read_head(client)
        request = parse_request(head)
        if request.method == "CONNECT":
            host, port = split_authority(request.target, None)
            tally = self._tally(host, port, "connect")
            upstream = self._connect(tally)
            if upstream is None:
                client.sendall(_refusal(tally))
                return tally, None, b""
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            return tally, upstream, rest
        try:
            host, port, path = absolute_target(request.target)
        except WireError as exc:
            client.sendall(_response(400, "Bad Request", f"stockade's proxy: {exc}"))
            raise
        tally = self._tally(host, port, "http")
        upstream = self._connect(tally)
        if upstream is None:
            client.sendall(_refusal(tally))
            return tally, None, b""
        authority = f"[{host}]" if ":" in host else host
        upstream.sendall(
            origin_head(request, path, f"{authority}:{port}" if port != 80 else authority)
        )
        return tally, upstream, rest

    def _from_socks(
        self, client: socket.socket
    ) -> tuple[_Tally | None, socket.socket | None, bytes]:
        host, port = socks_request(client)
        tally = self._tally(host, port, "socks")
        upstream = self._connect(tally)
        if upstream is None:
            socks_reply(client, SOCKS_REFUSED if not tally.allowed else SOCKS_FAILED)
            return tally, None, b""
        socks_reply(client, 0)
        return tally, upstream, b""

    def _from_direct(
        self, client: socket.socket
    ) -> tuple[_Tally | None, socket.socket | None, bytes]:
        address, port = client.getsockname()[:2]
        with self._lock:
            name = self._named.get(address)
        if name is None:
            tally = self._tally(address, port, "direct")
            tally.refuse(
                f"{address}:{port} is no address the box's DNS gave out, and nothing in the box "
                "listens there"
            )
            return tally, None, b""
        tally = self._tally(name, port, "direct")
        first = b""
        if port in (80, 443):  # a client speaks first there: check its name before connecting
            first = self._first_words(client, tally)
            if not tally.allowed:
                return tally, None, b""
        upstream = self._connect(tally)
        return tally, upstream, first

    def _first_words(self, client: socket.socket, tally: _Tally) -> bytes:
        """The client's first bytes, read far enough to see the name it asks for (a TLS server
        name, an HTTP ``Host``); refuses ``tally`` when that is not the host judged."""
        client.settimeout(30.0)
        data = client.recv(_CHUNK)
        if is_tls_hello(data):
            while len(data) < min(hello_length(data), MAX_HELLO):
                more = client.recv(_CHUNK)
                if not more:
                    break
                data += more
            self._check_name(tally, server_name(data), "TLS server name")
        elif _HTTP_START.match(data):
            while b"\r\n\r\n" not in data and len(data) <= MAX_HEAD:
                more = client.recv(_CHUNK)
                if not more:
                    break
                data += more
            host = parse_request(data[: data.find(b"\r\n\r\n") + 4]).header("host")
            if host is not None:
                self._check_name(tally, split_authority(host, tally.port)[0], "HTTP Host")
        client.settimeout(None)
        return data

    @staticmethod
    def _check_name(tally: _Tally, said: str | None, what: str) -> None:
        if said is not None and said.lower().rstrip(".") != tally.host:
            tally.refuse(
                f"the {what} {said!r} is not {tally.host!r}, the host the connection was judged for"
            )

    def _tally(self, host: str, port: int, via: Via) -> _Tally:
        return _Tally(host.lower().rstrip("."), port, via, time.time_ns(), time.monotonic())

    def _connect(self, tally: _Tally) -> socket.socket | None:
        """Judge ``tally``'s host and port, resolve, check the addresses, connect: the
        connection, or None with ``tally`` saying why not."""
        if not tally.allowed:
            return None
        try:
            verdict = self.egress.judge(tally.host, tally.port)
        except Exception as exc:
            verdict = Verdict(False, f"the judge failed ({type(exc).__name__}: {exc})")
        if self._closed:
            verdict = Verdict(False, "the command had ended before the answer")
        if not verdict.allowed:
            tally.refuse(verdict.reason or "refused by the policy")
            return None
        tally.reason = verdict.reason
        addresses = self._resolve(tally)
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            upstream = socket.socket(family, socket.SOCK_STREAM)
            if not self._track(upstream):
                return None
            try:
                upstream.settimeout(self.egress.connect_timeout_s)
                upstream.connect((address, tally.port))
                upstream.settimeout(None)
            except OSError as exc:
                self._forget(upstream)
                tally.reason = f"could not connect to {address}:{tally.port}: {exc.strerror or exc}"
                continue
            tally.address = address
            tally.reason = verdict.reason
            return upstream
        return None

    def _resolve(self, tally: _Tally) -> list[str]:
        """The addresses ``tally``'s host may be reached at (refusing it when none may)."""
        host = tally.host
        if is_ip(host):
            found = [host]
        elif host in self._hosts:
            found = [self._hosts[host]]
        else:
            try:
                infos = socket.getaddrinfo(host, tally.port, type=socket.SOCK_STREAM)
            except (OSError, UnicodeError) as exc:
                tally.reason = f"{host} could not be resolved: {exc}"
                return []
            found = list(dict.fromkeys(str(info[4][0]) for info in infos))
        usable = [a for a in found if unreachable(a, self._networks) is None]
        if not usable and found:
            kind = unreachable(found[0], self._networks)
            tally.refuse(
                f"{host} resolves to {found[0]}, {kind}; list its network in [network] "
                "reach_private to allow it"
            )
        return usable

    def _relay(
        self, client: socket.socket, upstream: socket.socket, first: bytes, tally: _Tally
    ) -> None:
        if tally.via != "direct" and tally.port == 443 and not first and not is_ip(tally.host):
            first = self._first_words(client, tally)
            if not tally.allowed:
                return
        if first:
            upstream.sendall(first)
            tally.sent += len(first)
        back = threading.Thread(
            target=self._copy, args=(upstream, client, tally, False), daemon=True
        )
        back.name = "stockade-egress"
        back.start()
        self._copy(client, upstream, tally, True)
        back.join()

    @staticmethod
    def _copy(source: socket.socket, target: socket.socket, tally: _Tally, outward: bool) -> None:
        """Copy until ``source`` ends, then end ``target``'s way out. The bytes go through a
        pipe by splice(2), never through this process's memory: a download through the proxy
        then costs little more than one straight from the server."""
        pipe_out, pipe_in = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe_in, _F_SETPIPE_SZ, _CHUNK)
        try:
            while True:
                size = os.splice(source.fileno(), pipe_in, _CHUNK)
                if not size:
                    break
                left = size
                while left:
                    left -= os.splice(pipe_out, target.fileno(), left)
                if outward:
                    tally.sent += size
                else:
                    tally.received += size
            with contextlib.suppress(OSError):
                target.shutdown(socket.SHUT_WR)
        except OSError:
            _shut(source)
            _shut(target)
        finally:
            os.close(pipe_out)
            os.close(pipe_in)

    def _record(self, tally: _Tally) -> None:
        record = tally.record()
        with self._lock:
            if len(self.connections) < self.egress.max_recorded:
                self.connections.append(record)
            else:
                self.dropped += 1
        if self.egress.on_connection is not None:
            try:
                self.egress.on_connection(record)
            except Exception:
                log.exception("the egress connection callback failed")


def _shut(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _refusal(tally: _Tally) -> bytes:
    if not tally.allowed:
        return _response(
            403, "Forbidden", f"stockade refused {tally.host}:{tally.port}: {tally.reason}"
        )
    return _response(
        502, "Bad Gateway", f"stockade could not reach {tally.host}:{tally.port}: {tally.reason}"
    )


def _response(code: int, phrase: str, text: str) -> bytes:
    body = (text + "\n").encode("utf-8", "replace")
    head = (
        f"HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\nX-Stockade-Refused: {code}\r\n\r\n"
    )
    return head.encode("ascii") + body
