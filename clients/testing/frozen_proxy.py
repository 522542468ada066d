#!/usr/bin/env python3
"""A TCP forwarder for the clients' network-safety tests.

    python3 frozen_proxy.py HOST:PORT
    python3 frozen_proxy.py -        (HOST:PORT read from stdin's first line)

Listens on a free loopback port, prints that port on its first line, then
forwards every accepted connection to HOST:PORT, both ways, byte for byte.
Stopping it with SIGSTOP freezes every path through it while both sockets
stay open (what a stalled switch or a dropped NAT entry looks like to each
end); SIGCONT lets the bytes flow again. A side that closes is passed on.
Standard library only, one thread, so a stopped process forwards nothing.
"""

import selectors
import socket
import sys


def main() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(256)
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    # `-`: the target is the first line of stdin, for a server that must
    # be told this proxy's address before it starts (and says its own).
    where = sys.stdin.readline().strip() if sys.argv[1] == "-" else sys.argv[1]
    host, _, port = where.rpartition(":")
    target = (host.strip("[]"), int(port))
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, None)
    peers = {}
    while True:
        for key, _ in sel.select():
            sock = key.fileobj
            if sock is listener:
                accept(listener, target, sel, peers)
            else:
                forward(sock, sel, peers)


def accept(listener, target, sel, peers) -> None:
    try:
        client, _ = listener.accept()
    except BlockingIOError:
        return
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(True)
        sel.register(s, selectors.EVENT_READ, None)
    peers[client] = upstream
    peers[upstream] = client


def forward(sock, sel, peers) -> None:
    other = peers.get(sock)
    try:
        data = sock.recv(65536)
    except OSError:
        data = b""
    if data and other is not None:
        try:
            other.sendall(data)
            return
        except OSError:
            pass
    for s in (sock, other):
        if s is not None and s in peers:
            sel.unregister(s)
            peers.pop(s, None)
            s.close()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
