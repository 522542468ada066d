"""The blocking flavour: `with` blocks on `connect_sync`, threads in line."""

import threading
import time
from typing import Iterator, List

import pytest
from conftest import Server

import holdline_client


@pytest.fixture
def sync_store(server: Server) -> Iterator[holdline_client.SyncStore]:
    store = holdline_client.connect_sync(server.address)
    try:
        yield store
    finally:
        store.close()


def test_the_usage_example_with_blocks(sync_store: holdline_client.SyncStore) -> None:
    invoices = sync_store.lock("invoices", ttl="10s", max_hold="2m")
    with invoices.hold(9) as lease:
        assert lease is not None and lease.key == "9"
        first = lease.fence
    with invoices.hold(9, wait="30s") as lease:
        assert lease is not None and lease.fence > first
    with invoices.try_hold(9) as lease:
        assert lease is not None


def test_threads_wait_in_line_and_time_out_in_use(sync_store: holdline_client.SyncStore) -> None:
    lock = sync_store.lock("threads")
    order: List[int] = []
    errors: List[BaseException] = []

    def wait_in_line(i: int) -> None:
        try:
            with lock.hold("k", wait="30s"):
                order.append(i)
        except BaseException as err:  # reported below
            errors.append(err)

    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with lock.hold("k"):
            held.set()
            release.wait(30)

    first = threading.Thread(target=holder)
    first.start()
    assert held.wait(10)
    with pytest.raises(holdline_client.InUse) as caught:
        with lock.hold("k", wait="200ms"):
            pass
    assert str(caught.value) == 'lock threads: key "k": held past the hold\'s wait: in use'
    threads = []
    for i in range(5):
        t = threading.Thread(target=wait_in_line, args=(i,))
        t.start()
        threads.append(t)
        deadline = time.monotonic() + 10
        while sync_store.stats("threads")["waiters"] != i + 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    release.set()
    for t in [first, *threads]:
        t.join(10)
    assert errors == []
    assert order == list(range(5))


def test_blocking_work_keeps_its_lease_and_max_hold_sets_the_event(
    sync_store: holdline_client.SyncStore,
) -> None:
    lock = sync_store.lock("work", ttl="1s", max_hold="4s")
    with pytest.raises(holdline_client.Lost) as caught:
        with lock.hold("k") as lease:
            assert lease is not None
            time.sleep(2.5)  # blocking work past two ttls: renewals go on in the loop thread
            assert not lease.lost and not lease.signal.is_set()
            assert lease.signal.wait(10)
            assert lease.lost
    expected = 'lock work: key "k": the lease was lost: it was revoked at its maxHold'
    assert str(caught.value) == expected


def test_hold_inside_a_hold_of_the_same_key_on_one_thread_is_invalid(
    sync_store: holdline_client.SyncStore,
) -> None:
    lock = sync_store.lock("nested")
    with lock.hold("k"):
        with pytest.raises(holdline_client.Invalid) as caught:
            with lock.hold("k"):
                pass
        expected = 'lock nested: key "k": hold inside a hold of the same key: invalid'
        assert str(caught.value) == expected
        with lock.try_hold("k") as inner:
            assert inner is None


def test_an_abandoned_wait_leaves_the_line(sync_store: holdline_client.SyncStore) -> None:
    # What KeyboardInterrupt in a waiting thread leads to: the loop thread
    # is asked to abandon the hold, and cancels it there.
    lock = sync_store.lock("abandon")
    outcome: List[BaseException] = []
    with lock.hold("k"):
        waiting = lock.hold("k", wait="30s")

        def wait() -> None:
            try:
                with waiting:
                    pass
            except BaseException as err:
                outcome.append(err)

        thread = threading.Thread(target=wait)
        thread.start()
        deadline = time.monotonic() + 10
        while sync_store.stats("abandon")["waiters"] != 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        sync_store._runner.loop.call_soon_threadsafe(waiting._abandon)
        thread.join(10)
        assert len(outcome) == 1 and not isinstance(outcome[0], holdline_client.Error)
        while sync_store.stats("abandon")["waiters"] != 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
    with lock.try_hold("k") as lease:
        assert lease is not None
