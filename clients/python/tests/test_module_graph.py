"""The package's modules form layers: each imports only modules of lower
layers (imports under `TYPE_CHECKING` count too), so there is no import
cycle. A module added to the package must be placed in a layer here.
"""

import ast
from pathlib import Path
from typing import Dict, List, Optional, Set

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "holdline_client"

LAYERS: List[Set[str]] = [
    {"_blocks"},  # what leaving a `with` or `async with` block is, written once
    {"_errors"},  # error classes and the core's text shapes
    {"_texts", "_durations", "_resp"},  # the shared texts, durations, the RESP wire format
    {"_address", "_inspect"},  # where a server listens; what INSPECT answers
    {"_wire"},  # one connection
    {"_lease"},  # a lease and its clock, on a connection
    {"_pool"},  # one node's connections
    {"_cluster"},  # a store's nodes: which one each key's commands go to
    {"_follow"},  # a lease's REATTACH after a planned hand-over
    {"_election"},  # elections: a hold with a note and an observer, of the lock above
    {"_lock"},  # locks and their holds
    {"_store"},  # connect and the store
    {"_sync"},  # the blocking flavour
    {"__init__"},  # the public names
]


def imports_of(path: Path) -> Set[str]:
    """The package's modules that the module at `path` imports."""
    found: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module:  # from ._x import y
                found.add(node.module.split(".")[0])
            elif node.level == 1:  # from . import _x
                found.update(alias.name for alias in node.names)
            elif node.level == 0 and node.module and node.module.startswith("holdline_client."):
                found.add(node.module.split(".")[1])
            elif node.level == 0 and node.module == "holdline_client":
                found.update(alias.name for alias in node.names if alias.name.startswith("_"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("holdline_client."):
                    found.add(alias.name.split(".")[1])
    return found


def graph() -> Dict[str, Set[str]]:
    return {path.stem: imports_of(path) for path in sorted(PACKAGE.glob("*.py"))}


def find_cycle(edges: Dict[str, Set[str]]) -> Optional[List[str]]:
    """A cycle of `edges` as the list of its modules, or None."""
    state: Dict[str, int] = {}  # 1: on the current path, 2: done
    path: List[str] = []

    def visit(node: str) -> Optional[List[str]]:
        state[node] = 1
        path.append(node)
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle is not None:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            cycle = visit(node)
            if cycle is not None:
                return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_the_import_reader_sees_every_form(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from ._a import x\n"
        "from . import _b\n"
        "import holdline_client._c\n"
        "from holdline_client._d import y\n"
        "from holdline_client import _e\n"
        "if TYPE_CHECKING:\n"
        "    from ._f import Z\n"
    )
    assert imports_of(module) == {"_a", "_b", "_c", "_d", "_e", "_f"}


def test_no_import_cycle_among_the_packages_modules() -> None:
    edges = graph()
    assert find_cycle(edges) is None, f"an import cycle: {' -> '.join(find_cycle(edges) or [])}"


def test_each_module_imports_only_lower_layers() -> None:
    edges = graph()
    layer_of = {name: i for i, layer in enumerate(LAYERS) for name in layer}
    assert set(edges) == set(layer_of), "place every module of the package in a layer"
    for module, targets in edges.items():
        for target in targets:
            assert target in layer_of, f"{module} imports {target}, not a module of the package"
            assert layer_of[target] < layer_of[module], f"{module} imports {target}: a layer up"
