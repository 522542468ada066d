"""Scripted cluster nodes, for what a real cluster will not do on cue:
answer MOVED for ever, CLUSTERDOWN for ever, a stale map, a slot nobody
serves. Each node is a `Scripted` stand-in server; `owners` says which
node serves each slot (None: nobody), and `slots_answer` what they answer
to `CLUSTER SLOTS` (the same map, unless a test sets another).
"""

import inspect
from typing import Awaitable, Callable, Dict, List, Optional, Union

from conftest import HANG_UP, Scripted

from holdline_client._cluster import SLOTS, slot

Answer = Callable[["FakeNode", List[bytes]], Union[Optional[bytes], Awaitable[Optional[bytes]]]]
"""An override: the answer, or an awaitable of it (to answer later)."""

SILENT = b""
"""What an override answers for the node to say nothing."""


def bulk(data: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(data), data)


class FakeNode:
    """One stand-in node of a `FakeCluster`."""

    def __init__(self, cluster: "FakeCluster", index: int, handover: bool = False) -> None:
        self.cluster = cluster
        self.index = index
        self.server = Scripted(self._handle, single=False, handover=handover)
        self.override: Optional[Answer] = None
        """Answers before the usual rules when set; None from it: the usual,
        SILENT: nothing."""

    @property
    def address(self) -> str:
        return self.server.address

    def sent(self, name: bytes) -> List[List[bytes]]:
        """The commands named `name` this node received."""
        return [c for c in self.server.commands if c[0].upper() == name]

    async def _handle(self, command: List[bytes]) -> Optional[bytes]:
        if self.override is not None:
            answer = self.override(self, command)
            if inspect.isawaitable(answer):
                answer = await answer
            if answer is not None:
                return None if answer == SILENT else answer
        name = command[0].upper()
        if name == b"CLUSTER":
            return self.cluster.slots_answer()
        if name in (b"HOLD", b"TRYHOLD", b"INSPECT", b"PUT", b"GET"):
            key = command[1] if name == b"GET" else command[2]
            return self.cluster.route(self, key, name)
        if name == b"PING":
            return b"+PONG\r\n"
        if name == b"STATS":
            return (
                b"*4\r\n"
                + bulk(b"grants")
                + b":%d\r\n" % (self.index + 1)
                + bulk(b"waiters")
                + b":0\r\n"
            )
        return b"+OK\r\n"  # RELEASE, RENEW


class FakeCluster:
    """`n` scripted nodes sharing one slot map: enter it with `async with`.
    `handover`: each node's `HELLO` says it can hand leases over."""

    def __init__(self, n: int = 3, handover: bool = False) -> None:
        self.nodes = [FakeNode(self, i, handover) for i in range(n)]
        self.owners: List[Optional[int]] = [i * n // SLOTS for i in range(SLOTS)]
        """Each slot's node (index), None for a slot nobody serves."""
        self.answered: Optional[List[Optional[int]]] = None
        """What CLUSTER SLOTS tells, when not `owners`."""
        self.fence = 0
        self.granted: Dict[bytes, int] = {}

    async def __aenter__(self) -> "FakeCluster":
        for node in self.nodes:
            await node.server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for node in self.nodes:
            await node.server.__aexit__()

    def key_on(self, index: int, prefix: str = "k") -> str:
        """A key whose slot node `index` serves."""
        return next(
            f"{prefix}{n}" for n in range(100_000) if self.owners[slot(f"{prefix}{n}")] == index
        )

    def slots_answer(self) -> bytes:
        """CLUSTER SLOTS as Redis answers it, from `answered` or `owners`."""
        owners = self.answered if self.answered is not None else self.owners
        ranges = []
        start = 0
        for s in range(1, SLOTS + 1):
            if s == SLOTS or owners[s] != owners[start]:
                owner = owners[start]
                if owner is not None:
                    ranges.append((start, s - 1, self.nodes[owner]))
                start = s
        out = [b"*%d\r\n" % len(ranges)]
        for first, last, node in ranges:
            host, _, port = node.address.rpartition(":")
            node_id = b"%040x" % (node.index + 1)
            out.append(b"*3\r\n:%d\r\n:%d\r\n*3\r\n" % (first, last))
            out.append(bulk(host.encode()) + b":%d\r\n" % int(port) + bulk(node_id))
        return b"".join(out)

    def route(self, node: FakeNode, key: bytes, name: bytes) -> bytes:
        """A keyed command's answer: MOVED, CLUSTERDOWN, or the node's own."""
        s = slot(key)
        owner = self.owners[s]
        if owner is None:
            return b"-CLUSTERDOWN Hash slot not served\r\n"
        if owner != node.index:
            return b"-MOVED %d %s\r\n" % (s, self.nodes[owner].address.encode())
        if name in (b"HOLD", b"TRYHOLD"):
            self.fence += 1
            self.granted[key] = node.index
            return b"*2\r\n:%d\r\n:%d\r\n" % (self.fence, self.fence)
        if name == b"GET":
            return bulk(b"node%d" % node.index)
        if name == b"INSPECT":
            return b"_\r\n"
        return b"+OK\r\n"


def hang_up_on(name: bytes) -> Answer:
    """An override that closes the connection on commands named `name`."""

    def answer(node: FakeNode, command: List[bytes]) -> Optional[bytes]:
        return HANG_UP if command[0].upper() == name else None

    return answer
