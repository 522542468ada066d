"""holdline: keyed locks with leases, over `holdline serve`.

```python
import holdline_client

async with holdline_client.connect("127.0.0.1:7380") as store:
    invoices = store.lock("invoices", ttl="10s", max_hold="2m")
    async with invoices.hold(invoice.id) as lease:
        await charge(invoice, fence=lease.fence)
    async with invoices.try_hold(invoice.id) as lease:
        if lease is None:
            say("someone is charging it already")
```

Holders wait in one FIFO line per key with Rust threads and other clients
of the same server; every grant carries a fence; `lease.signal` is set the
moment the lease is lost. `connect_sync` gives the same with `with` blocks.
"""

from ._durations import Duration
from ._election import Campaign, Election, Leader, Leadership
from ._errors import Closed, Error, InUse, Invalid, Limit, Lost, NoPerm
from ._inspect import KeyHolder, KeyState
from ._lease import Lease
from ._lock import Hold, Key, Lock, TryHold
from ._store import DEFAULT_ADDRESS, Connecting, Store, connect
from ._sync import (
    SyncCampaign,
    SyncElection,
    SyncHold,
    SyncLeadership,
    SyncLease,
    SyncLock,
    SyncObserver,
    SyncStore,
    SyncTryHold,
    connect_sync,
)

__version__ = "0.1.0"

__all__ = [
    "connect",
    "connect_sync",
    "Connecting",
    "Store",
    "Lock",
    "Hold",
    "TryHold",
    "Lease",
    "Election",
    "Campaign",
    "Leadership",
    "Leader",
    "KeyState",
    "KeyHolder",
    "SyncStore",
    "SyncLock",
    "SyncHold",
    "SyncTryHold",
    "SyncLease",
    "SyncElection",
    "SyncCampaign",
    "SyncLeadership",
    "SyncObserver",
    "Key",
    "Duration",
    "DEFAULT_ADDRESS",
    "Error",
    "Invalid",
    "NoPerm",
    "InUse",
    "Lost",
    "Limit",
    "Closed",
]
