"""The package layout holds: no import cycles, layers import in one direction only, the rooms exist.

Imports are read with :mod:`ast` (module level and inside functions, ``TYPE_CHECKING`` blocks
included); an import built at run time (``importlib.import_module(f"...{name}")``) is not seen.
Each import becomes an edge from the importing module to the project module it names: ``import
a.b.c`` -> ``a.b.c``; ``from a.b import c`` -> ``a.b.c`` when that is a module, else ``a.b`` (a
package ``__init__`` is named by its package). Relative imports are resolved first.

Cycle rule: an edge from a package's ``__init__`` to one of its own submodules (the package
re-exporting its contents) is left out; every other edge counts. So ``simulator.calibration`` ->
``simulator.calibration.fit`` is fine, while two modules that import each other, even from inside
functions (the old ``simulator.calibration`` <-> ``simulator.validation`` pair), are a cycle.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import networkx as nx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nodeperf", "simulator", "hwmodels", "workloads")


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Dotted name -> file of every module under ``packages`` in ``root``."""
    out = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            out[module_name(path, root)] = path
    return out


def _imported(node: ast.AST, name: str, is_package: bool) -> list[str]:
    """Dotted names an import statement in module ``name`` refers to (candidates, most specific first)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module or ""
    return [f"{prefix}.{a.name}" for a in node.names] + [prefix]


def _resolve(dotted: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of ``dotted`` that is a project module, or None."""
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        cand = ".".join(parts[:n])
        if cand in modules:
            return cand
    return None


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> nx.DiGraph:
    """Module -> imported project module, with the line of the (first) import on each edge."""
    modules = project_modules(root, packages)
    g = nx.DiGraph()
    for name, path in modules.items():
        g.add_node(name, package=path.name == "__init__.py")
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            cands = _imported(node, name, is_package)
            if isinstance(node, ast.ImportFrom):  # `from a.b import c`: a.b.c if a module, else a.b
                targets = {_resolve(c, modules) for c in cands[:-1]}
            else:
                targets = {_resolve(c, modules) for c in cands}
            for t in sorted(x for x in targets if x and x != name):
                if not g.has_edge(name, t):
                    g.add_edge(name, t, line=node.lineno)
    return g


def cycle_graph(g: nx.DiGraph) -> nx.DiGraph:
    """``g`` without the edges from a package ``__init__`` to its own submodules (see the module docstring)."""
    h = g.copy()
    h.remove_edges_from([(u, v) for u, v in g.edges if g.nodes[u]["package"] and v.startswith(u + ".")])
    return h


def cycles(g: nx.DiGraph, limit: int = 5) -> list[list[str]]:
    """Up to ``limit`` import cycles of ``g`` under the cycle rule."""
    return list(itertools.islice(nx.simple_cycles(cycle_graph(g)), limit))


def _describe(g: nx.DiGraph, cycle: list[str]) -> str:
    hops = zip(cycle, cycle[1:] + cycle[:1], strict=True)
    return " -> ".join(f"{u} (line {g.edges[u, v]['line']})" for u, v in hops) + f" -> {cycle[0]}"


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph(REPO_ROOT)


# --- (a) no import cycles ------------------------------------------------------------------------------

def test_no_import_cycles(graph):
    found = cycles(graph, limit=50)
    assert not found, "import cycles:\n  " + "\n  ".join(_describe(graph, c) for c in found)


def test_the_rule_catches_mutual_imports_and_allows_reexports(tmp_path):
    # the old layout: calibration and validation imported each other (one of them inside a function)
    files = {
        "simulator/__init__.py": "from simulator.engine import evaluate\n",
        "simulator/engine.py": "def evaluate(): ...\n",
        "simulator/calibration.py": "from simulator.engine import evaluate\n\n"
                                    "def fit():\n    from simulator.validation import run_options\n",
        "simulator/validation.py": "from simulator.calibration import ErrorSummary\n",
        "simulator/report/__init__.py": "from simulator.report.report import CostReport\n",
        "simulator/report/report.py": "from . import formatting\n",
        "simulator/report/formatting.py": "import math\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    g = import_graph(tmp_path, ("simulator",))
    assert g.has_edge("simulator.report.report", "simulator.report.formatting")  # relative import resolved
    assert cycles(g) == [["simulator.calibration", "simulator.validation"]] or \
        cycles(g) == [["simulator.validation", "simulator.calibration"]]
    (tmp_path / "simulator/validation.py").write_text("from simulator.engine import evaluate\n")
    assert cycles(import_graph(tmp_path, ("simulator",))) == []


def test_the_graph_sees_function_level_imports(graph):
    # simulator.hardware imports the catalog inside load_hardware only
    assert graph.has_edge("simulator.hardware", "hwmodels.catalog")
    assert graph.has_edge("workloads.resolve", "workloads.serialize")


# --- (b) layers in one direction ------------------------------------------------------------------------

def _violations(graph: nx.DiGraph, layer: str, allowed: object) -> list[str]:
    return [f"{u} imports {v} (line {graph.edges[u, v]['line']})" for u, v in sorted(graph.edges)
            if (u == layer or u.startswith(layer + ".")) and not allowed(v)]


def _top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("leaf", ["workloads", "hwmodels"])
def test_leaf_layers_import_only_themselves_and_suggest(graph, leaf):
    bad = _violations(graph, leaf, lambda v: _top(v) == leaf or v in ("nodeperf.suggest", "nodeperf.files"))
    assert not bad, f"{leaf} is a leaf layer:\n  " + "\n  ".join(bad)


def test_simulator_imports_no_api_package_but_suggest(graph):
    bad = _violations(graph, "simulator", lambda v: _top(v) != "nodeperf" or v in ("nodeperf.suggest", "nodeperf.files"))
    assert not bad, "simulator must not import the public API package:\n  " + "\n  ".join(bad)


def test_suggest_uses_the_standard_library_only(graph):
    assert list(graph.successors("nodeperf.suggest")) == []


def test_api_package_imports_no_layer_at_import_time():
    # nodeperf/__init__ resolves its names lazily (the leaves import nodeperf.suggest, which runs it)
    tree = ast.parse((REPO_ROOT / "nodeperf" / "__init__.py").read_text(encoding="utf-8"))
    top_level = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = [a.name for n in top_level for a in n.names] + [n.module or "" for n in top_level
                                                            if isinstance(n, ast.ImportFrom)]
    assert not [n for n in names if _top(n) in PACKAGES], names


# --- (c) the rooms exist --------------------------------------------------------------------------------

EXPECTED = [
    "simulator/lowering/gpu", "simulator/lowering/cpu", "simulator/lowering/tpu", "simulator/lowering/common",
    "simulator/engines/analytical", "simulator/engines/discrete_event",
    "simulator/calibration/measurements", "simulator/calibration/harness", "simulator/calibration/executor",
    "simulator/calibration/fit", "simulator/calibration/validation",
    "simulator/report/report", "simulator/report/trace", "simulator/report/formatting", "simulator/report/memory",
    "simulator/cli", "simulator/parallel", "simulator/sweep", "simulator/realtime",
    "simulator/hardware", "nodeperf/suggest",
]


@pytest.mark.parametrize("rel", EXPECTED)
def test_expected_module_or_package_exists(rel):
    p = REPO_ROOT / rel
    assert (p.with_suffix(".py")).is_file() or (p / "__init__.py").is_file(), f"{rel}: missing module or package"
