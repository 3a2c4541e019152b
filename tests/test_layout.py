"""The package layout holds: no import cycles, layers import in one direction only, the rooms exist, no
private name crosses rooms.

Imports are read with :mod:`ast` (module level and inside functions, ``TYPE_CHECKING`` blocks
included); an import built at run time (``importlib.import_module(f"...{name}")``) is not seen, except
the lazy re-export tables of package ``__init__`` files (a module-level ``_EXPORTS`` dict whose values
name modules, or ``(module, attribute)`` pairs): each module named there is an edge, as an eager
import would be. Each import becomes an edge from the importing module to the project module it
names: ``import a.b.c`` -> ``a.b.c``; ``from a.b import c`` -> ``a.b.c`` when that is a module, else
``a.b`` (a package ``__init__`` is named by its package). Relative imports are resolved first.

Cycle rule: every edge counts, a package ``__init__``'s edges to its own submodules included (the
package re-exporting its contents: a submodule that takes a name from its package's ``__init__`` while
that ``__init__`` imports it is a cycle). The only edge left out is an ``import`` of a module's own
ancestor package (``import simulator`` inside ``simulator.cli.main``), which Python performs anyway
before the module runs and which uses nothing the ``__init__`` defines. So two modules that import each
other, even from inside functions (the old ``simulator.calibration`` <-> ``simulator.validation``
pair), are a cycle, and so are ``pkg/__init__`` -> ``pkg.a`` -> ``from pkg import helper``.
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


def _lazy_exports(tree: ast.Module) -> list[tuple[str, int]]:
    """(module, line) of each entry of a module-level ``_EXPORTS`` table (a lazy package ``__init__``)."""
    out = []
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        if not (isinstance(target, ast.Name) and target.id == "_EXPORTS" and isinstance(node.value, ast.Dict)):
            continue
        for v in node.value.values:
            if isinstance(v, ast.Tuple) and v.elts:
                v = v.elts[0]
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                out.append((v.value, v.lineno))
    return out


def _is_ancestor(package: str, module: str) -> bool:
    return module.startswith(package + ".")


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> nx.DiGraph:
    """Module -> imported project module, with the line of the (first) import on each edge; ``implicit``
    marks an edge that is only a plain ``import`` of the module's own ancestor package."""
    modules = project_modules(root, packages)
    g = nx.DiGraph()
    for name, path in modules.items():
        g.add_node(name, package=path.name == "__init__.py")

    def add(u: str, v: str, line: int, implicit: bool) -> None:
        if not g.has_edge(u, v):
            g.add_edge(u, v, line=line, implicit=implicit)
        elif not implicit:
            g.edges[u, v]["implicit"] = False

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
                add(name, t, node.lineno, isinstance(node, ast.Import) and _is_ancestor(t, name))
        for mod, line in _lazy_exports(tree):
            t = _resolve(mod, modules)
            if t and t != name:
                add(name, t, line, False)
    return g


def cycle_graph(g: nx.DiGraph) -> nx.DiGraph:
    """``g`` without the plain imports of a module's own ancestor package (see the module docstring)."""
    h = g.copy()
    h.remove_edges_from([(u, v) for u, v, implicit in g.edges(data="implicit") if implicit])
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


def test_the_rule_counts_package_edges_and_lazy_exports(tmp_path):
    files = {
        # a package that imports a submodule which takes a helper from the package: a cycle
        "workloads/__init__.py": "",
        "workloads/importers/__init__.py": "def unique_name(): ...\n\n"
                                           "def import_onnx():\n    from workloads.importers.onnx_import import f\n",
        "workloads/importers/onnx_import.py": "from workloads.importers import unique_name\n",
        # a plain import of the module's own package is the one edge left out
        "workloads/ir.py": "import workloads\n",
        # a lazy re-export table is an edge; a submodule using its package's name through it is a cycle
        "workloads/zoo/__init__.py": '_EXPORTS: dict[str, str] = {"build": "workloads.zoo.build"}\n',
        "workloads/zoo/build.py": "from workloads.zoo import build_helper\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    g = import_graph(tmp_path, ("workloads",))
    assert g.edges["workloads.ir", "workloads"]["implicit"]
    assert g.has_edge("workloads.zoo", "workloads.zoo.build")
    assert sorted(sorted(c) for c in cycles(g)) == [["workloads.importers", "workloads.importers.onnx_import"],
                                                    ["workloads.zoo", "workloads.zoo.build"]]
    (tmp_path / "workloads/importers/naming.py").write_text("def unique_name(): ...\n")
    (tmp_path / "workloads/importers/onnx_import.py").write_text("from workloads.importers.naming import unique_name\n")
    (tmp_path / "workloads/zoo/build.py").write_text("import workloads.zoo\n")
    assert cycles(import_graph(tmp_path, ("workloads",))) == []


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


#: Modules of the API package that every layer may import: they import nothing from the project
#: (near-match suggestions; the root exception and warning classes; safe file reading).
BASE_MODULES = ("nodeperf.suggest", "nodeperf.errors", "nodeperf.files")


@pytest.mark.parametrize("leaf", ["workloads", "hwmodels"])
def test_leaf_layers_import_only_themselves_and_the_base_modules(graph, leaf):
    bad = _violations(graph, leaf, lambda v: _top(v) == leaf or v in BASE_MODULES)
    assert not bad, f"{leaf} is a leaf layer:\n  " + "\n  ".join(bad)


def test_simulator_imports_no_api_package_but_the_base_modules(graph):
    bad = _violations(graph, "simulator", lambda v: _top(v) != "nodeperf" or v in BASE_MODULES)
    assert not bad, "simulator must not import the public API package:\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("base", BASE_MODULES)
def test_base_modules_use_the_standard_library_only(graph, base):
    assert list(graph.successors(base)) == []


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
    "simulator/hardware", "nodeperf/suggest", "nodeperf/errors", "simulator/report/scheduled",
]


@pytest.mark.parametrize("rel", EXPECTED)
def test_expected_module_or_package_exists(rel):
    p = REPO_ROOT / rel
    assert (p.with_suffix(".py")).is_file() or (p / "__init__.py").is_file(), f"{rel}: missing module or package"


# --- (d) no private name crosses rooms ------------------------------------------------------------------
# A room is a subpackage of simulator/ (simulator.engines, simulator.sweep, ...), or a top-level package
# (its modules outside such subpackages: simulator.hardware is in room "simulator"). A name starting with
# one underscore is private to its room: another room takes it neither by `from X import _name` nor as an
# attribute `m._name` of a project module `m` it imported.

def _room_of(module: str, modules: dict[str, Path]) -> str:
    """The room of a project module: simulator.X when simulator/X/ is a package, else the top level."""
    parts = module.split(".")
    if parts[0] == "simulator" and len(parts) > 1 and modules.get(f"simulator.{parts[1]}", Path()).name == "__init__.py":
        return f"simulator.{parts[1]}"
    return parts[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_crossings(root: Path, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``importer:line: name from module`` for every private name one room takes from another."""
    modules = project_modules(root, packages)
    out = []
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        here = _room_of(name, modules)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        aliases: dict[str, str] = {}  # local name -> project module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                cands = _imported(node, name, is_package)
                source = _resolve(cands[-1], modules)
                for a, cand in zip(node.names, cands[:-1], strict=True):
                    if cand in modules:  # `from a.b import c` with c a module
                        aliases[a.asname or a.name] = cand
                    elif source and _private(a.name) and _room_of(source, modules) != here:
                        out.append(f"{name}:{node.lineno}: {a.name} from {source}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname and a.name in modules:
                        aliases[a.asname] = a.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and _private(node.attr)
                    and node.value.id in aliases and _room_of(aliases[node.value.id], modules) != here):
                out.append(f"{name}:{node.lineno}: {node.attr} of {aliases[node.value.id]}")
    return sorted(set(out))


def test_no_private_name_crosses_rooms():
    found = private_crossings(REPO_ROOT)
    assert not found, "private names taken from another room:\n  " + "\n  ".join(found)


def test_the_private_name_check_sees_imports_and_attributes(tmp_path):
    files = {
        "simulator/__init__.py": "",
        "simulator/hardware.py": "from simulator.cli.common import _helper\n",  # room simulator <- simulator.cli
        "simulator/cli/__init__.py": "",
        "simulator/cli/common.py": "from workloads.resolve import _saved_graph_json\nfrom . import main as _m\n"
                                   "from .main import _ok\n",
        "simulator/cli/main.py": "import workloads.ir as ir\n\ndef f():\n    return ir._REGISTRY, ir.__name__\n",
        "workloads/__init__.py": "",
        "workloads/ir.py": "_REGISTRY = {}\n",
        "workloads/resolve.py": "from workloads.ir import _REGISTRY\n",  # the same room
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert private_crossings(tmp_path, ("simulator", "workloads")) == [
        "simulator.cli.common:1: _saved_graph_json from workloads.resolve",
        "simulator.cli.main:4: _REGISTRY of workloads.ir",
        "simulator.hardware:1: _helper from simulator.cli.common",
    ]
