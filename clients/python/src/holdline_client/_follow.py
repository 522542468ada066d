"""A lease following its partition to another node after a planned
hand-over (a node that gives a partition up on purpose: SIGTERM, a
rebalance).

A node that can hand over says `handover` = 1 in its `HELLO` map; only
then does a hold send `SECRET s` with its HOLD or TRYHOLD (`s`: 32 hex
digits from the system's random source, new for each hold). When the node
gives the key's partition up it pushes `["moved", lease, slot, "host:port"]`
(or answers the lease's RENEW or RELEASE `MOVED slot host:port`), and the
holder sends `REATTACH lock key secret` to that node, routed like a HOLD:
`MOVED` is followed, `CLUSTERDOWN` (nobody serves the slot for a moment)
waits 100 ms, a connection that fails is made again after the same pause.
All of it until the lease's own deadline; the answer `[lease, fence]` is
the lease's new id on that node (the fence unchanged), and `LOST` says
nothing was handed over under the secret.
"""

import asyncio
import secrets
import time
from typing import Optional, Tuple

from ._address import Address
from ._cluster import Router, parse_moved
from ._errors import Error
from ._pool import Pool
from ._resp import Reply, RespError
from ._texts import CLUSTER_DOWN_PAUSE_MS
from ._wire import DROPPED, Link

Attached = Tuple[Pool, Link, int, float, float]
"""A lease re-attached: the pool and connection it lives on now, its id
there, the REATTACH's send time and the time its answer was handled."""


def new_secret() -> str:
    """A hold's secret: 32 lowercase hex digits from the OS's CSPRNG."""
    return secrets.token_hex(16)


async def reattach(
    router: Router, lock: str, key: str, secret: str, where: Address, until: float
) -> Optional[Attached]:
    """Sends `REATTACH lock key secret` to `where`, following `MOVED` and
    pausing after `CLUSTERDOWN` or a failed connection, until `until`
    (monotonic); None once that passed, or when the node answers `LOST`
    (or any other error). A grant that comes after `until` is let go (its
    connection closed). A node that `MOVED` sent it to and that cannot be
    reached (the old owner, gone, named by a map not yet updated) sends it
    back to `where`, the node the hand-over named, after the pause."""
    pause = CLUSTER_DOWN_PAUSE_MS / 1000
    named = where
    while not router.closed:
        left = until - time.monotonic()
        if left <= 0:
            return None
        pool = router.pool_at(where)
        try:
            link = await asyncio.wait_for(pool.checkout(lock, key), left)
        except (Error, asyncio.TimeoutError):
            where = named
            await asyncio.sleep(min(pause, max(0.0, until - time.monotonic())))
            continue
        timing: Tuple[float, float] = (0.0, 0.0)

        def answered(reply: Reply, sent_at: float, now: float) -> None:
            nonlocal timing
            timing = (sent_at, now)

        try:
            pending = link.send("REATTACH", lock, key, secret, on_reply=answered)
            await asyncio.wait([pending.future], timeout=max(0.0, until - time.monotonic()))
        except Error:
            pool.checkin(link)
            where = named
            await asyncio.sleep(min(pause, max(0.0, until - time.monotonic())))
            continue
        except BaseException:
            link.close()  # a grant still on its way must not stay held
            pool.checkin(link)
            raise
        if not pending.future.done():
            link.close()  # too late: whatever the node grants now is let go
            pool.checkin(link)
            return None
        reply = pending.future.result()
        if isinstance(reply, list) and len(reply) == 2 and isinstance(reply[0], int):
            return pool, link, reply[0], timing[0], timing[1]
        pool.checkin(link)
        if reply is DROPPED:
            where = named
            await asyncio.sleep(min(pause, max(0.0, until - time.monotonic())))
            continue
        if isinstance(reply, RespError) and reply.word == "MOVED":
            moved = parse_moved(reply.text)
            if moved is None:
                return None
            router.moved(*moved)
            where = moved[1]
            continue
        if isinstance(reply, RespError) and reply.word == "CLUSTERDOWN":
            await asyncio.sleep(min(pause, max(0.0, until - time.monotonic())))
            continue
        return None  # LOST: nothing was handed over under the secret
    return None
