"""The first program of a box with filtered network: it opens the box's listening sockets, hands
them to the host, drops its capabilities and becomes the command.

It runs inside the box's own network namespace, before the command and as ``python -I -S -c``
(its source is handed over as text: the box does not see Stockade's package), so it imports
the standard library alone. Arguments: the descriptor of the hand-over socket, the ports to
capture, ``--``, then the command::

    python -I -S -c SOURCE 5 80,443 -- prlimit ... bash -c 'pip install ...'

It opens, on the namespace's loopback: the HTTP proxy (``127.0.0.1:3128``), the SOCKS5 proxy
(``127.0.0.1:1080``), the DNS stub (UDP ``127.0.0.1:53``, where the box's ``resolv.conf``
points) and a listener on every captured port for connections made straight to an address.
It sends all of them to the host over the hand-over socket (``SCM_RIGHTS``) and closes its
own copies, so only the host's proxy holds them: the command cannot accept on them, cannot
bind their ports, and cannot stop the proxy (it runs in the host process, outside the box).
Binding ports below 1024 needs ``CAP_NET_BIND_SERVICE`` in the namespace, which bubblewrap
gives this program alone: it drops it, with everything else, before the command runs.
"""

from __future__ import annotations

import array
import ctypes
import json
import os
import socket
import sys

HTTP_PROXY = ("127.0.0.1", 3128)
SOCKS_PROXY = ("127.0.0.1", 1080)
DNS_STUB = ("127.0.0.1", 53)
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_SETPCAP = 8
_CAP_NET_BIND_SERVICE = 10
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _listener(address: tuple[str, int]) -> socket.socket:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(address)
    server.listen(128)
    return server


def _sockets(ports: list[int]) -> list[tuple[str, socket.socket]]:
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns.bind(DNS_STUB)
    made = [("http", _listener(HTTP_PROXY)), ("socks", _listener(SOCKS_PROXY)), ("dns", dns)]
    for port in ports:
        made.append((f"direct:{port}", _listener(("0.0.0.0", port))))
    return made


def _hand_over(channel: int, made: list[tuple[str, socket.socket]]) -> None:
    kinds = json.dumps([kind for kind, _ in made]).encode()
    fds = array.array("i", [sock.fileno() for _, sock in made])
    with socket.socket(fileno=channel) as link:
        link.sendmsg([kinds], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        link.recv(1)  # the host has them: nothing queued is lost while the command starts
    for _, sock in made:
        sock.close()


def _drop_capabilities() -> None:
    """No capability survives into the command: the bounding set loses the two bubblewrap
    added (while this still holds ``CAP_SETPCAP``, which dropping needs), the ambient set is
    cleared, and the effective, permitted and inheritable sets are emptied."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (_CAP_NET_BIND_SERVICE, _CAP_SETPCAP):
        if libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"dropping capability {capability}")
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two zeroed {effective, permitted, inheritable}
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "emptying the capability sets")


def main(argv: list[str]) -> None:
    split = argv.index("--")
    channel, ports = int(argv[0]), [int(p) for p in argv[1].split(",") if p]
    command = argv[split + 1 :]
    try:
        _hand_over(channel, _sockets(ports))
        _drop_capabilities()
    except OSError as exc:
        sys.stderr.write(f"stockade: the box's network could not be set up: {exc}\n")
        sys.exit(125)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
