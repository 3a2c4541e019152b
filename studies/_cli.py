"""What every `config -> CSV -> figure` study shares: its configuration loader and its one command.

Each study is one command that runs the configuration, writes its CSVs and draws its figures, from any
working directory: ``python -m studies.NAME`` from the repository root, or ``python studies/NAME/run.py``
from anywhere (the script puts the repository root on ``sys.path`` itself). The options are the same for
every study: ``--config FILE`` (default: the study's ``config.toml``), ``--reduced`` (the configuration
the tests run), ``--out FOLDER`` (the CSVs; default ``out/NAME/`` under the repository root, which git
ignores), ``--figures FOLDER`` (default: the ``--out`` folder), ``--plot-only`` (redraw from the CSVs in ``--out``) and
``--progress``/``--no-progress`` (a bar over the study's cases; default: on a terminal or in a notebook,
see :func:`study_progress`). The configuration is checked against
the study's declared :data:`Schema` before any work. An error in a configuration, a missing CSV
or an output that cannot be written prints one line and exits with code 2.
"""

from __future__ import annotations

import argparse
import csv
import logging
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: The repository root: default outputs go to ``out/<study>/`` under it, whatever the working directory.
REPO_ROOT = Path(__file__).resolve().parents[1]

#: The rows a study computes: a list of CSV rows, or several named lists (one CSV each).
Rows = list[dict[str, Any]]


def out_dir(here: Path) -> Path:
    """Where the study in folder ``here`` writes unless ``--out`` says otherwise: ``out/<study>/`` (git-ignored)."""
    return REPO_ROOT / "out" / here.name


def load_config(path: Path, reduced: bool = False) -> dict[str, Any]:
    """A study's TOML configuration; with ``reduced``, its ``[reduced]`` table applied on top.

    Each key of ``[reduced]`` names a key of the configuration and applies to it by the configuration
    value's shape: a table is updated with the keys the reduced table gives (``[reduced.training]``
    changes some keys of ``[training]``); an array of tables with a ``name`` each is narrowed to the names
    a reduced array of strings lists (``families = ["NVIDIA GPU"]``); anything else is replaced. A reduced
    key the configuration lacks, or an unknown name, is a ValueError naming the file and the key, with a
    near match. Without ``reduced`` the ``[reduced]`` table is dropped.
    """
    from nodeperf.suggest import did_you_mean

    try:
        with open(path, "rb") as f:
            cfg = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: {exc}; expected a study configuration in TOML") from None
    small = cfg.pop("reduced", {})
    if not reduced:
        return cfg
    if not isinstance(small, dict):
        raise ValueError(f"{path}: reduced: got {type(small).__name__}; expected a table of keys to replace")
    for key, value in small.items():
        if key not in cfg:
            raise ValueError(f"{path}: reduced.{key}: no such key to reduce; expected one of "
                             f"{', '.join(sorted(cfg))}{did_you_mean(key, cfg)}")
        full = cfg[key]
        if isinstance(full, dict) and isinstance(value, dict):
            cfg[key] = {**full, **value}
        elif (isinstance(full, list) and full and all(isinstance(x, dict) and "name" in x for x in full)
              and isinstance(value, list) and all(isinstance(x, str) for x in value)):
            known = [x["name"] for x in full]
            for n in value:
                if n not in known:
                    raise ValueError(f"{path}: reduced.{key}: unknown name; got {n!r}; expected one of "
                                     f"{', '.join(known)}{did_you_mean(n, known)}")
            cfg[key] = [x for x in full if x["name"] in value]
        else:
            cfg[key] = value
    return cfg


#: A study's declared schema: dotted key path -> kind. A kind is ``str``, ``bool``, ``int>0``, ``int>=0``,
#: ``num>0``, ``num>=0``, ``table``, a catalog name (``device``, ``node``, ``model``, ``system``: a system or
#: device), a name from a fixed set (``dtype``, ``dataflow``, ``objective``, ``idle``, ``recompute``,
#: ``{a|b|c}``), or a name that depends on a sibling key (``phase``: one the table's ``model``, else the
#: top-level ``model``, supports; ``power_mode``: one of the ``node`` device's modes; ``member``: a device
#: of the ``node``). Unknown names are refused with a near match. ``KIND[]`` is a non-empty array of them.
#: ``key[]`` in a path walks every table of an array of tables (``workloads[].model``); ``?`` before a
#: path makes the key optional.
Schema = dict[str, str]

#: Kinds whose values are names (checked by :func:`_names`).
_NAME_KINDS = ("dtype", "dataflow", "objective", "idle", "recompute", "phase", "power_mode", "member", "system")


def _names(kind: str, table: dict[str, Any], cfg: dict[str, Any]) -> tuple[list[str] | None, str]:
    """(the names a value of ``kind`` may take here, what they are); None: any (no sibling to check against)."""
    if kind.startswith("{"):
        return kind.strip("{}").split("|"), "one of"
    if kind == "dtype":
        from workloads.dtypes import DType

        return [d.value for d in DType], "a dtype:"
    if kind == "dataflow":
        from hwmodels.systolic import DATAFLOWS

        return list(DATAFLOWS), "a dataflow:"
    if kind == "objective":
        from simulator.realtime.partition import OBJECTIVES

        return list(OBJECTIVES), "an objective:"
    if kind == "idle":
        from simulator.realtime.partition import IDLE_POLICIES

        return list(IDLE_POLICIES), "an idle policy:"
    if kind == "recompute":
        from workloads.training import RECOMPUTE

        return list(RECOMPUTE), "a recompute policy:"
    if kind == "system":
        from hwmodels.catalog import list_devices, list_systems

        return list_systems() + list_devices(), "a catalog system or device name (see `nodeperf devices`):"
    return _sibling_names(kind, table, cfg)


def _sibling_names(kind: str, table: dict[str, Any], cfg: dict[str, Any]) -> tuple[list[str] | None, str]:
    """Names that depend on a sibling key: a model's phases, a device's power modes, a node's devices."""
    if kind == "phase":
        model = table.get("model", cfg.get("model"))
        if not isinstance(model, str) or ":" in model:
            return None, ""
        from workloads.zoo import get_entry

        try:
            return list(get_entry(model).phases), f"a phase of model {model!r}:"
        except KeyError:
            return None, ""  # the model key reports itself
    if kind == "power_mode":
        node = table.get("node", cfg.get("node"))
        from hwmodels.loader import list_power_modes

        modes = list_power_modes(node) if isinstance(node, str) else []
        return (modes, f"a power mode of {node!r}:") if modes else (None, "")
    node = table.get("node", cfg.get("node"))
    from hwmodels.node import list_nodes, load_node

    if not isinstance(node, str) or node not in list_nodes():
        return None, ""
    return list(load_node(node).device_names), f"a device of node {node!r}:"


def _catalog(kind: str) -> list[str]:
    if kind == "device":
        from hwmodels.catalog import list_devices
        return list_devices()
    from hwmodels.node import list_nodes
    return list_nodes()


def _describe(kind: str) -> str:
    """``int>0`` -> ``an integer > 0``, ``device[]`` -> ``a non-empty array of device names``..."""
    if kind.endswith("[]") and kind.startswith("{"):
        return f"a non-empty array of names among {', '.join(kind[1:-3].split('|'))}"
    if kind.endswith("[]"):
        one = _describe(kind[:-2]).removeprefix("a ").removeprefix("an ")
        for word in ("integer", "number", "string", "name"):
            one = one.replace(word, word + "s", 1)
        return f"a non-empty array of {one}"
    number, _, bound = kind.partition(">")
    if bound:
        return f"{'an integer' if number == 'int' else 'a number'} {'>= 0' if bound == '=0' else '> 0'}"
    if kind.startswith("{"):
        return f"one of {', '.join(kind.strip('{}').split('|'))}"
    return {"str": "a string", "bool": "true or false", "table": "a table"}.get(kind, f"a {kind} name")


def _is_dtype(name: str) -> bool:
    """Whether :func:`workloads.dtypes.parse_dtype` takes ``name`` (``"bfloat16"``, ``" BF16 "``...)."""
    from workloads.dtypes import parse_dtype

    try:
        parse_dtype(name)
    except ValueError:
        return False
    return True


def _check(value: Any, kind: str, at: str, where: Path, table: dict[str, Any] | None = None,
           cfg: dict[str, Any] | None = None) -> None:
    """One value against one kind of :data:`Schema` (``table``: the table holding it, ``cfg``: the whole
    configuration, for kinds that depend on a sibling); a ValueError naming ``where`` and ``at`` if it is not."""
    from nodeperf.suggest import did_you_mean, short_repr

    def bad(expected: str, hint: str = "") -> ValueError:
        return ValueError(f"{where}: {at}: got {short_repr(value)} ({type(value).__name__}); "
                          f"expected {expected}{hint}")

    if kind.endswith("[]"):
        if not isinstance(value, list) or not value:
            raise bad(_describe(kind))
        for i, v in enumerate(value):
            _check(v, kind[:-2], f"{at}[{i}]", where, table, cfg)
        return
    if kind in _NAME_KINDS or kind.startswith("{"):
        if not isinstance(value, str) or not value.strip():
            raise bad(_describe(kind))
        names, what = _names(kind, table or {}, cfg or {})
        if names is not None and value not in names and not (kind == "dtype" and _is_dtype(value)):
            raise bad(f"{what} {', '.join(names)}", did_you_mean(value, names))
        return
    if kind in ("str", "device", "node", "model"):
        if not isinstance(value, str) or not value.strip():
            raise bad("a non-empty string" if kind == "str" else f"a {kind} name")
        if kind in ("device", "node"):
            names = _catalog(kind)
            if value not in names:
                raise bad(f"a catalog {kind} name (see `nodeperf {kind}s`)", did_you_mean(value, names, prefix=True))
        elif kind == "model" and ":" not in value:  # "gemm:m=..." is a micro-workload
            from workloads.zoo import get_entry, list_models
            try:
                get_entry(value)
            except KeyError:
                names = [m.name for m in list_models()]
                raise bad("a zoo model name (see `nodeperf models`)", did_you_mean(value, names)) from None
        return
    if kind == "table":
        if not isinstance(value, dict):
            raise bad("a table")
        return
    if kind == "bool":
        if not isinstance(value, bool):
            raise bad("true or false")
        return
    number, _, bound = kind.partition(">")
    ok_type = (int,) if number == "int" else (int, float)
    if not isinstance(value, ok_type) or isinstance(value, bool):
        raise bad(f"{'an integer' if number == 'int' else 'a number'} {'>= 0' if bound == '=0' else '> 0'}")
    if value != value or (value < 0 if bound == "=0" else value <= 0):
        raise bad(f"{'an integer' if number == 'int' else 'a number'} {'>= 0' if bound == '=0' else '> 0'}")


def check_config(cfg: dict[str, Any], schema: Schema, where: Path) -> None:
    """Check configuration ``cfg`` (read from ``where``) against ``schema``, before any work: a missing key,
    a wrong type, an empty array, a size that is not positive or an unknown catalog name is a ValueError
    of one line naming the file and the dotted key path (with a near match for names)."""
    for path, kind in schema.items():
        optional = path.startswith("?")
        parts = path.lstrip("?").split(".")
        nodes: list[tuple[str, Any]] = [("", cfg)]
        parents: dict[str, dict[str, Any]] = {}  # located key -> the table holding it
        for n, part in enumerate(parts):
            last = n == len(parts) - 1
            many = part.endswith("[]")
            key = part[:-2] if many else part
            nxt: list[tuple[str, Any]] = []
            for at, node in nodes:
                here = f"{at}.{key}" if at else key
                if not isinstance(node, dict):
                    raise ValueError(f"{where}: {at}: got {type(node).__name__}; expected a table")
                if key not in node:
                    if optional:
                        continue
                    raise ValueError(f"{where}: {here}: missing key; expected "
                                     f"{'an array of tables' if many else _describe(kind) if last else 'a table'}")
                value = node[key]
                if many:
                    if not isinstance(value, list) or not value or not all(isinstance(x, dict) for x in value):
                        raise ValueError(f"{where}: {here}: got {type(value).__name__}; "
                                         "expected a non-empty array of tables")
                    nxt += [(f"{here}[{i}]", x) for i, x in enumerate(value)]
                else:
                    nxt.append((here, value))
                    if last:
                        parents[here] = node
            nodes = nxt
        for at, value in nodes:
            _check(value, kind, at, where, parents.get(at), cfg)


#: Progress of the running study: ``--progress``/``--no-progress`` (None: on a terminal or in a notebook).
_PROGRESS: dict[str, Any] = {"enabled": None, "name": "study"}


def study_progress(total: int, unit: str = "case") -> Any:
    """A progress bar over a study's ``total`` cases, labelled with the study's name
    (:func:`simulator.report.progress.progress_bar`: ``tqdm.auto`` on standard error, a widget in a notebook;
    shown on a terminal unless ``--no-progress``). Call ``update(1)`` per case and ``close()`` at the end."""
    from simulator.report.progress import progress_bar

    return progress_bar(total, desc=_PROGRESS["name"], unit=unit, enabled=_PROGRESS["enabled"])


def rows_step(run: Callable[[dict[str, Any]], Rows], write_csv: Callable[[Rows, Path], Any],
              csv_name: str = "results.csv") -> Callable[[dict[str, Any], Path], str]:
    """The usual compute step: run the configuration and write its rows to ``OUT/csv_name``."""
    def step(cfg: dict[str, Any], out: Path) -> str:
        rows = run(cfg)
        path = out / csv_name
        write_csv(rows, path)
        return f"{len(rows)} rows -> {path}"

    return step


def study_main(argv: Sequence[str] | None, *, here: Path, description: str,
               compute: Callable[[dict[str, Any], Path], str],
               draw: Callable[[dict[str, Any], Path, Path], Sequence[Path]],
               results: str = "results.csv",
               options: Callable[[argparse.ArgumentParser], Any] | None = None,
               configure: Callable[[dict[str, Any], argparse.Namespace], Any] | None = None,
               schema: Schema | None = None) -> int:
    """The study in folder ``here`` as one command (see the module docstring).

    ``compute(cfg, out)`` runs the (reduced) configuration, writes the CSVs into folder ``out`` and returns
    the line to print; ``draw(cfg, out, figures)`` draws from the CSVs in ``out`` into folder ``figures``
    and returns the figure paths. ``schema`` declares the configuration's keys (:data:`Schema`), checked
    by :func:`check_config` before any work. ``options`` adds study-specific arguments to the parser and
    ``configure(cfg, args)`` applies them to the configuration.
    """
    p = argparse.ArgumentParser(prog=f"python -m studies.{here.name}", description=description)
    p.add_argument("--config", type=Path, default=here / "config.toml",
                   help="the configuration file (default: the study's config.toml)")
    p.add_argument("--reduced", action="store_true", help="the small configuration the tests run")
    p.add_argument("--out", type=Path, default=out_dir(here),
                   help=f"folder of {results} (default out/{here.name}/ under the repository root)")
    p.add_argument("--figures", type=Path, help="folder of the figures (default: the --out folder)")
    p.add_argument("--plot-only", action="store_true", help="redraw the figures from the CSVs in --out")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="a progress bar on standard error (default: only on a terminal or in a notebook)")
    if options is not None:
        options(p)
    args = p.parse_args(argv)
    _PROGRESS.update(enabled=args.progress, name=here.name)
    logging.basicConfig(level=logging.ERROR)  # "does not fit" is a column of the CSV, not a warning per row
    try:
        cfg = load_config(args.config, args.reduced)
        if schema is not None:
            check_config(cfg, schema, args.config)
        if configure is not None:
            configure(cfg, args)
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {args.out}: is a file; expected the folder to write {results} into")
        if not args.plot_only:
            print(compute(cfg, args.out), flush=True)
        figures = draw(cfg, args.out, args.figures or args.out)
    except (OSError, ValueError) as exc:
        print(f"{here.name}: error: {exc}", file=sys.stderr)
        return 2
    for f in figures:
        print(f"figure -> {f}")
    return 0


def write_rows(rows: Sequence[dict[str, Any]], out: Path, columns: Sequence[str]) -> None:
    """Write ``rows`` to the CSV ``out`` under ``columns`` (floats to 6 significant digits, NaN empty,
    infinity ``inf``), creating its folder. A folder for ``out`` is refused with a ValueError."""
    if out.is_dir():
        raise ValueError(f"{out}: is a folder; expected the CSV file to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(v) for k, v in r.items()})


def _cell(v: Any) -> Any:
    if isinstance(v, float):
        if v != v:  # NaN
            return ""
        return "inf" if v == float("inf") else f"{v:.6g}"
    return v
