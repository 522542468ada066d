"""Several nodes: where each key's commands go.

A store connects to the first of its addresses that answers `HELLO`, then
asks it `CLUSTER SLOTS` once. An error answer (a single `holdline serve`)
leaves the store in single-node mode: every command goes to that server,
as if only it had been given, with nothing more per hold. An array makes
it a cluster: the keys are hashed to 16384 slots as Redis Cluster hashes
them (`slot`), and each slot's commands go to the pool of the node that
serves it.

A node that does not serve a key's slot answers `MOVED slot host:port`:
the slot's entry is set to that node, the whole map is fetched again in
the background, and the command is sent again there (at most 5 times,
then `moved_loop`). A node that knows no owner for the slot (a failover
under way) answers `CLUSTERDOWN`: the map is fetched again, and after
100 ms the command is sent again (the 10th such answer fails it
`slot_unserved`). A connection that fails (refused, reset, closed by the
server) has the map fetched again too; what it carried fails as on a
single node (its leases lost, its waiting hold closed), and the next
command for its keys goes where the new map says.

Only HOLD, TRYHOLD, INSPECT, PUT and GET are routed: RELEASE and RENEW go
on the connection of their lease, never elsewhere.
"""

import asyncio
import binascii
from typing import Dict, List, Optional, Set, Tuple, Union

from ._address import Address, parse_node
from ._errors import Closed, Error
from ._pool import Closes, Dial, Holding, Pool
from ._resp import Arg, Reply, RespError
from ._texts import CLUSTER_DOWN_PAUSE_MS, CLUSTER_DOWN_TRIES, MAX_REDIRECTS, key_text
from ._wire import DROPPED, Link, closed_error

SLOTS = 16384

MAP_TIMEOUT_MS = 2_000
"""How long a node has to answer `CLUSTER SLOTS` when the map is fetched
again, connecting included (the connect timeout if shorter): a stopped
node is then asked no longer; the next one is. texts.json's rule
`map_refresh_node_timeout_ms`."""


def slot(key: Union[str, bytes]) -> int:
    """The key's slot, as Redis Cluster computes it: CRC16-XMODEM of its
    UTF-8 bytes mod 16384, only the part inside the first `{...}` when
    that part is not empty. `crc_hqx` from 0 is CRC16-XMODEM."""
    data = key.encode("utf-8") if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return binascii.crc_hqx(data, 0) % SLOTS


def _hostport(host: str, port: int) -> str:
    return Address(host, port).hostport


def _text(value: Reply) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def slot_map(reply: Reply, asked: Address) -> Tuple[List[Optional[str]], List[str]]:
    """`CLUSTER SLOTS`'s answer as each slot's node (`host:port`, None for
    a slot nobody serves) and the nodes in the order they first appear.
    An empty host means the node that was asked, as in Redis."""
    slots: List[Optional[str]] = [None] * SLOTS
    nodes: List[str] = []
    for entry in reply if isinstance(reply, list) else []:
        try:
            first, last, node = int(entry[0]), int(entry[1]), entry[2]
            where = _hostport(_text(node[0]) or asked.host, int(node[1]))
        except (TypeError, ValueError, IndexError, KeyError):
            continue  # not a range of Redis's form: nothing to learn from it
        first, last = max(first, 0), min(last, SLOTS - 1)
        if first > last:
            continue
        slots[first : last + 1] = [where] * (last - first + 1)
        if where not in nodes:
            nodes.append(where)
    return slots, nodes


def _parse_hostport(where: str) -> Address:
    host, _, port = where.rpartition(":")
    return Address(host.strip("[]"), int(port))


def parse_moved(text: str) -> Optional[Tuple[int, Address]]:
    """`MOVED`'s `slot host:port` (an IPv6 host bare or in brackets); None
    when it is not of that form."""
    parts = text.split(" ")
    if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) >= SLOTS:
        return None
    where = parse_node(parts[1])
    return None if where is None else (int(parts[0]), where)


class Router(Closes):
    """A store's nodes: a pool of connections for each, the slot map, and
    what the store's holds share (the holds in progress)."""

    def __init__(self, seeds: List[Address], dial: Dial) -> None:
        super().__init__()
        self.seeds = seeds
        self.dial = dial
        self._pools: Dict[str, Pool] = {}
        self.home = self.pool_at(seeds[0])
        """The pool of the node the store connected to (every command's in single mode)."""
        self._slots: Optional[List[Optional[str]]] = None  # None: single-node mode
        self._nodes: List[str] = []
        self._refreshing: "Optional[asyncio.Task[None]]" = None
        self._again = False
        self._fetching = False
        self._failing: Set[str] = set()  # nodes whose connections failed
        self.holding: Set[Holding] = set()
        """Every hold in progress: a hold of a key its owner holds is `Invalid`."""

    @property
    def address(self) -> Address:
        return self.home.address

    @property
    def clustered(self) -> bool:
        """True once `CLUSTER SLOTS` answered a map."""
        return self._slots is not None

    @property
    def nodes(self) -> List[str]:
        """Each node of the slot map (`host:port`); the one server in single-node mode."""
        return list(self._nodes) if self._slots is not None else [self.address.hostport]

    def pool_at(self, where: Union[str, Address]) -> Pool:
        """The pool of the node at `where` (`host:port`), made on first use."""
        if isinstance(where, str) and where in self._pools:
            return self._pools[where]  # the map's names are the pools' own
        address = _parse_hostport(where) if isinstance(where, str) else where
        name = address.hostport
        pool = self._pools.get(name)
        if pool is None:
            pool = Pool(address, self.dial)
            pool.on_failure = lambda: self._failed(name)
            self._pools[name] = pool
        return pool

    def pool_for(self, slot_of_key: int) -> Pool:
        """The pool of the node serving the slot; any known node's when the
        map names none (it answers where to go)."""
        slots = self._slots
        if slots is None:
            return self.home
        where = slots[slot_of_key] or (self._nodes[0] if self._nodes else None)
        return self.home if where is None else self.pool_at(where)

    def route(self, lock: Optional[str], key: str) -> "Route":
        return Route(self, lock, key)

    async def connect(self) -> None:
        """Connects to the first address that answers `HELLO` (else raises
        the last one's error), and asks it `CLUSTER SLOTS`."""
        link = await self._first_link()
        try:
            reply = await link.send("CLUSTER", "SLOTS").future
        except BaseException:
            link.close()
            raise
        if reply is DROPPED:
            raise closed_error()
        if isinstance(reply, list):
            self._slots, self._nodes = slot_map(reply, link.address)
        self.home.checkin(link)

    async def _first_link(self) -> Link:
        last: Optional[Error] = None
        for address in self.seeds:
            pool = self.pool_at(address)
            try:
                link = await pool.open()
            except Error as err:
                last = err
                continue
            self.home = pool
            return link
        assert last is not None
        raise last

    def moved(self, slot_of_key: int, where: Address) -> None:
        """A node said another serves the slot: noted, and the map fetched again."""
        if self._slots is not None:
            self._slots[slot_of_key] = where.hostport
        self.refresh_soon()

    def _failed(self, node: str) -> None:
        """A connection to `node` failed: it is asked for the map last, and
        the map is fetched again (unless it failed that fetch itself)."""
        self._failing.add(node)
        if self._slots is not None and not self._closed and not self._fetching:
            self.refresh_soon()

    def refresh_soon(self) -> "asyncio.Task[None]":
        """Fetches the map again in the background (once more after the
        fetch under way, if one is)."""
        task = self._refreshing
        if task is None or task.done():
            task = self._refreshing = asyncio.get_running_loop().create_task(self._refresh())
        else:
            self._again = True
        return task

    async def refresh(self) -> None:
        """Fetches the map again and waits for it."""
        task = self.refresh_soon()
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this caller was cancelled, not the fetch (the store closing)

    async def _refresh(self) -> None:
        self._again = True
        while self._again and not self._closed:
            self._again = False
            self._fetching = True  # its own failed connections ask for no other fetch
            try:
                await self._fetch_map()
            finally:
                self._fetching = False

    async def _fetch_map(self) -> None:
        """`CLUSTER SLOTS` from the first node that answers one: the map's
        nodes, then the others known, then the seed addresses; those whose
        connections failed last."""
        seeds = [address.hostport for address in self.seeds]
        known = list(dict.fromkeys([*self._nodes, *self._pools, *seeds]))
        for where in sorted(known, key=lambda node: node in self._failing):
            if self._closed:
                return
            pool = self.pool_at(where)
            try:
                reply = await self._ask_slots(pool)
            except Error:
                self._failing.add(where)
                continue
            self._failing.discard(where)
            if isinstance(reply, list):
                self._slots, self._nodes = slot_map(reply, pool.address)
                return

    async def _ask_slots(self, pool: Pool) -> Reply:
        """`CLUSTER SLOTS`'s answer from `pool`'s node, given
        `MAP_TIMEOUT_MS` (or the connect timeout, if shorter) for all of
        it, a new connection's `HELLO` included; `Closed` past that."""
        timeout = min(self.dial.connect_timeout_ms, MAP_TIMEOUT_MS) / 1000
        try:
            return await asyncio.wait_for(self._slots_of(pool), timeout)
        except asyncio.TimeoutError:
            raise closed_error() from None

    @staticmethod
    async def _slots_of(pool: Pool) -> Reply:
        link = await pool.checkout()
        try:
            reply = await link.send("CLUSTER", "SLOTS").future
        except BaseException:
            link.close()  # a node that says nothing in time is asked no more
            raise
        finally:
            pool.checkin(link)
        if reply is DROPPED:
            raise closed_error()
        return reply

    async def call(self, route_key: str, *args: Arg, lock: Optional[str] = None) -> Reply:
        """Sends a command for `route_key`'s slot to the node serving it,
        following `MOVED` and `CLUSTERDOWN`; answers the reply as sent."""
        route = Route(self, lock, route_key)
        while True:
            reply = await route.pool().one_command(*args)
            if not await route.again(reply):
                return reply

    async def everywhere(self, *args: Arg) -> List[Reply]:
        """A command's replies from every node of the map (the one server's
        in single-node mode)."""
        if self._slots is None:
            return [await self.home.one_command(*args)]
        return list(
            await asyncio.gather(*(self.pool_at(node).one_command(*args) for node in self.nodes))
        )

    async def close(self) -> None:
        """Closes every node's connections; later checkouts fail `Closed`. Idempotent."""
        self._closed = True
        if self._refreshing is not None:
            self._refreshing.cancel()
        await asyncio.gather(*(pool.close() for pool in list(self._pools.values())))


class Route:
    """One command's way to the node serving its key: the redirects and
    the `CLUSTERDOWN` answers it met."""

    __slots__ = ("_router", "lock", "key", "_slot", "_moved", "_down")

    def __init__(self, router: Router, lock: Optional[str], key: str) -> None:
        self._router = router
        self.lock = lock
        self.key = key
        self._slot = -1
        self._moved = 0
        self._down = 0

    @property
    def slot(self) -> int:
        if self._slot < 0:
            self._slot = slot(self.key)
        return self._slot

    def pool(self) -> Pool:
        """The pool of the node to ask now."""
        router = self._router
        if router.closed:
            raise router.closed_error(self.lock, self.key)
        return router.pool_for(self.slot) if router.clustered else router.home

    async def checkout(self) -> Tuple[Pool, Link]:
        """The pool of the node to ask now and a connection from it;
        `Closed` as on a single node when it cannot be reached."""
        pool = self.pool()
        return pool, await pool.checkout(self.lock, self.key)

    async def again(self, reply: Reply) -> bool:
        """Whether to send the command again after `reply`: a `MOVED` (the
        map is told) or a `CLUSTERDOWN` (after a fresh map and a pause);
        `Closed` (moved_loop, slot_unserved) past their limits."""
        router = self._router
        if not isinstance(reply, RespError) or not router.clustered:
            return False
        if reply.word == "MOVED":
            moved = parse_moved(reply.text)
            if moved is None:
                return False
            self._moved += 1
            if self._moved > MAX_REDIRECTS:
                raise Closed(self._text("moved_loop"))
            router.moved(*moved)
            return True
        if reply.word == "CLUSTERDOWN":
            self._down += 1
            if self._down >= CLUSTER_DOWN_TRIES:
                raise Closed(self._text("slot_unserved", slot=str(self.slot)))
            await router.refresh()
            await asyncio.sleep(CLUSTER_DOWN_PAUSE_MS / 1000)
            return True
        return False

    def _text(self, name: str, **values: str) -> str:
        if self.lock is not None:
            return key_text(name, self.lock, self.key, **values)
        # A command of no lock (GET row): the store speaks, as in text_for.
        return "store: " + key_text(name, "", self.key, **values)[len("lock : ") :]
