"""One test host's servers in one process: plain HTTP, HTTPS and a raw sink (TCP and UDP).

Run as a script (``python -I -S net_hosts_server.py ...``), usually inside the host's network
namespace; it uses the standard library only, so it starts fast and needs no virtualenv. It
writes every connection, TLS handshake, request line, sink chunk and datagram it receives to a
JSON-lines log (the tests read it to prove what did, and what did not, reach the host), prints
one JSON line with its ports once every socket listens, and exits when its parent dies (a test
run killed mid-way leaves no server behind).
"""

from __future__ import annotations

import argparse
import base64
import functools
import json
import os
import socketserver
import ssl
import sys
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

IDLE_LIMIT = 30.0  # seconds a connection may sit silent; threads are daemons either way


class Log:
    """The host's request log: one JSON object per line, written whole under a lock."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def record(self, service: str, event: str, peer: Any, **fields: str | None) -> None:
        entry = {"service": service, "event": event, "peer": _peer(peer), **fields}
        with self._lock:
            self._file.write(json.dumps(entry) + "\n")
            self._file.flush()


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address)


class QuietHandler(SimpleHTTPRequestHandler):
    """Serves the host's folder and logs each request line with its Host header."""

    server: LoggingHTTPServer

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        headers = getattr(self, "headers", None)
        host = headers.get("Host") if parsed and headers is not None else None
        self.server.log.record(
            self.server.service, "request", self.client_address, line=self.requestline, host=host
        )
        return parsed

    def log_message(self, format: str, *args: Any) -> None:
        """The JSON log says it all; stderr is kept for real errors."""


class LoggingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], root: Path, log: Log, service: str) -> None:
        self.log = log
        self.service = service
        super().__init__(address, functools.partial(QuietHandler, directory=str(root)))

    def finish_request(self, request: Any, client_address: Any) -> None:
        self.log.record(self.service, "connect", client_address)
        request.settimeout(IDLE_LIMIT)
        secured = self.secure(request, client_address)
        if secured is None:
            return
        try:
            super().finish_request(secured, client_address)
        finally:
            if secured is not request:
                secured.close()

    def secure(self, request: Any, client_address: Any) -> Any:
        """The connection to speak HTTP on, None if there is none; plain HTTP's is as it came."""
        return request


class LoggingHTTPSServer(LoggingHTTPServer):
    """The handshake runs in the connection's thread, so a client that never speaks TLS holds
    up no one else."""

    def __init__(self, address: tuple[str, int], root: Path, log: Log, tls: ssl.SSLContext) -> None:
        super().__init__(address, root, log, "https")
        tls.sni_callback = self._saw_sni
        self.tls = tls

    def _saw_sni(self, connection: Any, server_name: str | None, _context: Any) -> None:
        self.log.record("https", "tls", connection.getpeername(), sni=server_name)

    def secure(self, request: Any, client_address: Any) -> Any:
        try:
            return self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as error:
            self.log.record("https", "tls-error", client_address, error=str(error))
            return None


class SinkHandler(socketserver.BaseRequestHandler):
    """Answers nothing; logs the connection and every chunk sent, until the peer closes."""

    server: SinkServer

    def handle(self) -> None:
        log, peer = self.server.log, self.client_address
        log.record("sink", "connect", peer)
        self.request.settimeout(IDLE_LIMIT)
        try:
            while chunk := self.request.recv(65536):
                log.record("sink", "data", peer, **_payload(chunk))
        except OSError as error:
            log.record("sink", "error", peer, error=str(error))
        log.record("sink", "close", peer)


def _payload(chunk: bytes) -> dict[str, str]:
    """The bytes to read (undecodable ones as escapes) and exactly, in base64, to compare."""
    return {
        "data": chunk.decode("utf-8", "backslashreplace"),
        "raw": base64.b64encode(chunk).decode(),
    }


class SinkServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], log: Log) -> None:
        self.log = log
        super().__init__(address, SinkHandler)


class DatagramSinkHandler(socketserver.BaseRequestHandler):
    """Logs each datagram; answers nothing."""

    server: DatagramSinkServer

    def handle(self) -> None:
        self.server.log.record("sink", "datagram", self.client_address, **_payload(self.request[0]))


class DatagramSinkServer(socketserver.UDPServer):
    """The same port as the TCP sink, for UDP: what a box must not send past its proxy."""

    max_packet_size = 65536

    def __init__(self, address: tuple[str, int], log: Log) -> None:
        self.log = log
        super().__init__(address, DatagramSinkHandler)


def _exit_with_parent(parent: int) -> None:
    """A server whose test run died goes with it (``ip netns exec`` execs, so our parent is the
    test process itself)."""
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(0)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bind", required=True)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--http-port", type=int, required=True)
    parser.add_argument("--https-port", type=int, required=True)
    parser.add_argument("--sink-port", type=int, required=True)
    parser.add_argument("--parent", type=int, required=True)
    args = parser.parse_args(argv)

    log = Log(args.log)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(args.cert, args.key)
    sink = SinkServer((args.bind, args.sink_port), log)
    servers: list[socketserver.TCPServer] = [
        LoggingHTTPServer((args.bind, args.http_port), args.root, log, "http"),
        LoggingHTTPSServer((args.bind, args.https_port), args.root, log, tls),
        sink,
        DatagramSinkServer((args.bind, sink.server_address[1]), log),
    ]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ports = [server.server_address[1] for server in servers[:3]]
    print(json.dumps(dict(zip(("http", "https", "sink"), ports, strict=True))), flush=True)
    sys.stdout.close()
    _exit_with_parent(args.parent)


if __name__ == "__main__":
    main(sys.argv[1:])
