"""TLS: a real `holdline serve --tls-cert ... --tls-key ...` (and
`--tls-client-ca ...`) with certificates made for the test (`certs.py`).
Holds over TLS, `rediss://` addresses, a client that trusts another CA,
a server that wants client certificates, plain text meeting TLS either
way, and the lease's clock behind a frozen link, unchanged by TLS."""

import ssl
from pathlib import Path
from typing import Iterator

import pytest
from certs import Ca
from conftest import Proxy, Server
from test_network import lost_before_the_key_moves_on
from texts import assert_text

import holdline_client


@pytest.fixture
def ca(tmp_path: Path) -> Ca:
    return Ca(tmp_path)


def tls_server(ca: Ca, *flags: str) -> Server:
    return Server(*ca.leaf().serve_flags(), *flags)


@pytest.fixture
def server_tls(ca: Ca) -> Iterator[Server]:
    with tls_server(ca) as srv:
        yield srv


async def test_holds_go_over_tls_with_a_context_or_a_rediss_url(
    ca: Ca, server_tls: Server, tmp_path: Path
) -> None:
    trusted = ca.trusting()
    port = server_tls.port
    for address in [server_tls.address, f"localhost:{port}", f"rediss://127.0.0.1:{port}"]:
        async with holdline_client.connect(address, ssl=trusted) as store:
            first = store.lock("tls").hold("k")
            async with first as lease:
                assert not lease.lost
                state = await store.lock("tls").inspect("k")
                assert state is not None and state.held and state.fence == lease.fence
            assert not lease.lost
    # A token in a rediss:// URL, as in a redis:// one.
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n", encoding="ascii")
    with tls_server(ca, "--token-file", str(token_file)) as guarded:
        url = f"rediss://:s3cret@127.0.0.1:{guarded.port}"
        async with holdline_client.connect(url, ssl=trusted) as store:
            async with store.lock("tls").hold("k") as lease:
                assert lease.fence >= 1
        with pytest.raises(holdline_client.Invalid) as caught:
            await holdline_client.connect(f"rediss://127.0.0.1:{guarded.port}", ssl=trusted)
        assert_text(caught.value, "token_missing")


def test_the_blocking_flavour_takes_ssl_too(ca: Ca, server_tls: Server) -> None:
    with holdline_client.connect_sync(server_tls.address, ssl=ca.trusting()) as store:
        with store.lock("tls").hold("k") as lease:
            assert not lease.lost
    with pytest.raises(holdline_client.Closed) as caught:
        holdline_client.connect_sync(server_tls.address, ssl=Ca(ca.folder, "other").trusting())
    assert_text(caught.value, "tls_failed", hostport=server_tls.address)


async def test_a_client_trusting_another_ca_fails_at_connect(ca: Ca, server_tls: Server) -> None:
    other = Ca(ca.folder, "other").trusting()
    with pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(server_tls.address, ssl=other)
    assert caught.value.kind == "closed"
    assert_text(caught.value, "tls_failed", hostport=server_tls.address)
    assert "certificate verify failed" in str(caught.value)
    # rediss:// without a context trusts the system's CAs, which do not
    # include the test's own.
    with pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(f"rediss://{server_tls.address}")
    assert_text(caught.value, "tls_failed", hostport=server_tls.address)
    assert "certificate verify failed" in str(caught.value)


async def test_a_server_wanting_client_certificates_serves_only_clients_with_one(
    ca: Ca,
) -> None:
    with tls_server(ca, "--tls-client-ca", ca.cert) as strict:
        async with holdline_client.connect(strict.address, ssl=ca.trusting(client=True)) as store:
            async with store.lock("mtls").hold("k") as lease:
                assert lease.fence >= 1
        for _ in range(5):  # the refusal comes as an alert after the handshake: it may race
            with pytest.raises(holdline_client.Closed) as caught:
                await holdline_client.connect(strict.address, ssl=ca.trusting())
            assert_text(caught.value, "tls_failed", hostport=strict.address)
            assert "certificate required" in str(caught.value)
        stranger = Ca(ca.folder, "stranger")
        with pytest.raises(holdline_client.Closed) as caught:
            context = ca.trusting()
            leaf = stranger.leaf(client=True)
            context.load_cert_chain(leaf.cert, leaf.key)
            await holdline_client.connect(strict.address, ssl=context)
        assert_text(caught.value, "tls_failed", hostport=strict.address)


async def test_plain_text_and_tls_meeting_fail_at_connect_saying_so(
    ca: Ca, server_tls: Server, server: Server
) -> None:
    with pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(server_tls.address)
    assert_text(caught.value, "tls_failed", hostport=server_tls.address)
    assert "the server speaks TLS" in str(caught.value)
    with pytest.raises(holdline_client.Closed) as caught:
        await holdline_client.connect(server.address, ssl=ca.trusting())
    assert_text(caught.value, "tls_failed", hostport=server.address)


async def test_over_tls_a_holder_behind_a_frozen_link_is_lost_before_the_key_moves_on(
    ca: Ca, server_tls: Server
) -> None:
    trusted = ca.trusting()
    with Proxy(server_tls.address) as proxy:
        async with holdline_client.connect(proxy.address, ssl=trusted) as far:
            async with holdline_client.connect(server_tls.address, ssl=trusted) as near:
                await lost_before_the_key_moves_on(proxy, far, near)


def test_an_ssl_context_is_what_ssl_takes() -> None:
    # Typed as an SSLContext; the default context of a rediss:// URL is
    # one that checks the server's certificate and name.
    pool = holdline_client.connect("rediss://h:1")._router
    assert isinstance(pool.dial.tls, ssl.SSLContext)
    assert pool.dial.tls.verify_mode == ssl.CERT_REQUIRED and pool.dial.tls.check_hostname
    assert holdline_client.connect("redis://h:1")._router.dial.tls is None
    assert holdline_client.connect("h:1")._router.dial.tls is None
