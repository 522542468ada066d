"""Whole scripts in processes of their own: the README's Python snippets
run as written (against a test server: only the address differs), and a
store left unclosed ends quietly when the script ends."""

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Optional

import pytest
from certs import Ca
from conftest import Server

README = Path(__file__).resolve().parents[1] / "README.md"


def run_script(
    source: str, timeout: float = 60, cwd: Optional[Path] = None
) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )


def readme_snippets() -> List[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_the_readme_has_runnable_snippets() -> None:
    snippets = readme_snippets()
    assert len(snippets) >= 3
    assert any("async with holdline_client.connect(" in s for s in snippets)
    assert all("127.0.0.1:7380" in s for s in snippets)


@pytest.mark.parametrize("index", range(len(readme_snippets())))
def test_each_readme_snippet_runs_as_written(index: int, tmp_path: Path) -> None:
    snippet = readme_snippets()[index]
    flags: List[str] = []
    if "ssl=" in snippet:
        # A TLS snippet trusts `ca.pem` in its working directory.
        flags = Ca(tmp_path, "ca").leaf().serve_flags()
    if "alice" in snippet:
        # A users snippet connects as alice, who may name team-a.* only.
        users = tmp_path / "users"
        users.write_text("alice alice-token-0123456789 locks=team-a.*\n")
        flags += ["--users", str(users)]
    with Server(*flags) as server:
        done = run_script(snippet.replace("127.0.0.1:7380", server.address), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (0, ""), done.stdout


UNCLOSED_ASYNC = """
import asyncio, sys
import holdline_client

async def main() -> None:
    store = await holdline_client.connect(sys.argv[1])
    invoices = store.lock("invoices")
    async with invoices.hold(9) as lease:
        print("held", lease.fence)
    async with invoices.hold(9):
        # A waiter still in line when the script ends: asyncio.run cancels it.
        asyncio.ensure_future(invoices.hold(9, wait="30s").__aenter__())
        await asyncio.sleep(0.2)
    print("done")

asyncio.run(main())
"""

UNCLOSED_HOLDING = """
import asyncio, sys
import holdline_client

async def hold_forever(store: holdline_client.Store, held: asyncio.Event) -> None:
    async with store.lock("invoices").hold(7):
        held.set()
        await asyncio.sleep(3600)

async def main() -> None:
    store = await holdline_client.connect(sys.argv[1])
    held = asyncio.Event()
    asyncio.ensure_future(hold_forever(store, held))  # still holding at the end
    await held.wait()
    print("done")

asyncio.run(main())
"""

UNCLOSED_LOOP = """
import asyncio, sys
import holdline_client

async def main() -> None:
    store = await holdline_client.connect(sys.argv[1])
    async with store.lock("invoices").hold(9) as lease:
        print("held", lease.fence)
    print("done")

# A loop run by hand and never closed: nothing of the store is left
# pending for the interpreter to find at exit.
loop = asyncio.new_event_loop()
loop.run_until_complete(main())
"""

UNCLOSED_SYNC = """
import sys
import holdline_client

store = holdline_client.connect_sync(sys.argv[1])
with store.lock("invoices").hold(9) as lease:
    print("held", lease.fence)
print("done")
"""


@pytest.mark.parametrize(
    "source",
    [UNCLOSED_ASYNC, UNCLOSED_HOLDING, UNCLOSED_LOOP, UNCLOSED_SYNC],
    ids=["after-holds", "holding", "loop-left-open", "blocking"],
)
def test_an_unclosed_store_ends_quietly(source: str, server: Server) -> None:
    done = subprocess.run(
        [sys.executable, "-c", source, server.address],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.rstrip().endswith("done")
