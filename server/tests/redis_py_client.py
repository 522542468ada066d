"""redis-py against holdline serve, with redis-py's default options.

Run by tests/real_clients.rs as: python3 redis_py_client.py PORT
Exits 0 when every check passed; prints what failed otherwise.
"""

import sys
import threading
import time

import redis

PORT = int(sys.argv[1])
OK = (b"OK", "OK", True)


def client(**options):
    # Default options otherwise: redis-py 8 speaks RESP3 (HELLO 3) and sends
    # CLIENT SETINFO and CLIENT MAINT_NOTIFICATIONS on connect.
    return redis.Redis(host="127.0.0.1", port=PORT, **options)


def field(stats, name):
    """STATS is a dict under RESP3 and a flat list under RESP2."""
    if isinstance(stats, dict):
        return stats[name.encode()]
    flat = list(stats)
    return flat[flat.index(name.encode()) + 1]


def redis_version():
    """redis-py's version as (major, minor)."""
    major, minor = redis.__version__.split(".")[:2]
    return int(major), int(minor)


def expect_error(call, text):
    try:
        result = call()
    except redis.ResponseError as e:
        assert str(e) == text, f"error {str(e)!r}, expected {text!r}"
        return
    raise AssertionError(f"expected the error {text!r}, got {result!r}")


def main():
    holder, other = client(), client()
    assert holder.ping()

    lease, fence = holder.execute_command("HOLD", "invoices", "9")
    assert isinstance(lease, int) and isinstance(fence, int), (lease, fence)
    assert other.execute_command("TRYHOLD", "invoices", "9") is None
    expect_error(
        lambda: other.execute_command("HOLD", "invoices", "9", "WAIT", 0),
        'INUSE lock invoices: key "9": held past the hold\'s wait: in use',
    )
    stats = holder.execute_command("STATS", "invoices")
    assert field(stats, "held_keys") == 1, stats
    assert field(stats, "timeouts") == 1, stats

    # A waiter in another thread gets the key when it is released.
    granted = {}

    def wait_for_it():
        granted["pair"] = other.execute_command("HOLD", "invoices", "9", "WAIT", 20000)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    deadline = time.time() + 20
    while field(holder.execute_command("STATS", "invoices"), "waiters") != 1:
        assert time.time() < deadline, "the waiter never stood in line"
        time.sleep(0.01)
    assert holder.execute_command("RELEASE", lease) in OK
    waiter.join(20)
    new_lease, new_fence = granted["pair"]
    assert new_fence > fence, (fence, new_fence)
    assert other.execute_command("PUT", "invoices", "9", new_fence, "owner", "py") in OK
    assert holder.execute_command("GET", "owner") == b"py"
    assert other.execute_command("RELEASE", new_lease) in OK

    # A lease revoked at maxHold: the RESP3 push arrives unasked, and the
    # RELEASE that follows answers the lost text. redis-py 8.2 and later
    # drain an idle pooled connection before handing it out and reconnect
    # one that holds anything but their own maintenance notices: the `lost`
    # push makes it reconnect, so the RELEASE goes out on a new connection,
    # which never held the lease (the key is gone either way).
    revoked = client()
    lease, _ = revoked.execute_command("HOLD", "invoices", "m", "MAXHOLD", 200)
    time.sleep(0.6)
    if redis_version() >= (8, 2):
        text = f"INVALID store: lease {lease} is not held by this connection: invalid"
    else:
        text = 'LOST lock invoices: key "m": the lease was lost: it was revoked at its maxHold'
    expect_error(lambda: revoked.execute_command("RELEASE", lease), text)
    assert revoked.ping()

    # RESP2, for clients configured that way.
    old = client(protocol=2)
    lease, _ = old.execute_command("TRYHOLD", "invoices", "7")
    assert field(old.execute_command("STATS", "invoices"), "held_keys") == 1
    assert old.execute_command("RELEASE", lease) in OK

    # INFO in Redis's format: redis-py's info() parses every section.
    info = holder.info()
    assert info["holdline_version"], info
    assert info["connected_clients"] >= 2, info
    assert info["lock_invoices"]["grants"] >= 3, info["lock_invoices"]
    assert set(holder.info("locks")) == {"lock_invoices"}, holder.info("locks")
    # CLIENT LIST through redis-py's own parser.
    listed = holder.client_list()
    assert all("leases" in c and "waiting" in c for c in listed), listed

    print("redis-py: all checks passed")


if __name__ == "__main__":
    main()
