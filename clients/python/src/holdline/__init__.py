"""holdline: keyed locks with leases, over `holdline serve`.

```python
import holdline

store = await holdline.connect("127.0.0.1:7380")
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
from ._errors import Closed, Error, InUse, Invalid, Limit, Lost
from ._lock import Hold, Key, Lease, Lock
from ._store import DEFAULT_ADDRESS, Store, connect
from ._sync import SyncHold, SyncLease, SyncLock, SyncStore, connect_sync

__version__ = "0.1.0"

__all__ = [
    "connect",
    "connect_sync",
    "Store",
    "Lock",
    "Hold",
    "Lease",
    "SyncStore",
    "SyncLock",
    "SyncHold",
    "SyncLease",
    "Key",
    "Duration",
    "DEFAULT_ADDRESS",
    "Error",
    "Invalid",
    "InUse",
    "Lost",
    "Limit",
    "Closed",
]
