"""The results store of a sweep: one row per point in SQLite (default) or a Parquet folder, resumable.

Table ``results`` has one row per point, keyed by ``point_key`` (the SHA-256 of the point's resolved
inputs, see :mod:`simulator.sweep.execute`): the axis columns (named ``section.key``, e.g.
``workload.batch``, ``hardware.memory.hbm.read_bandwidth_bytes_per_s``), the metric columns, the
report's ``provenance_sha256``, ``error`` (the located message of a point that could not be
evaluated, its metrics NULL) and ``experiment`` (the name of the experiment that computed it).
A table ``meta`` records the store schema (:data:`STORE_SCHEMA`), the kind of points (``model`` or
``systolic``) and each column's role and type. An index covers the axis columns.

Every write is one transaction: a sweep killed at any moment leaves the rows of every finished
chunk and nothing else, and a store that is not one of ours, or was written for another kind of
experiment, is refused before anything is written to it.

Parquet (``--out results.parquet``, needs ``pyarrow``) is a folder of part files, one per written
chunk, each written to a temporary name and renamed into place (atomic), with the same columns and a
``_nodeperf_store.json`` in place of the ``meta`` table; a later part's row for a key supersedes an
earlier one.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from nodeperf.errors import NodeperfError

__all__ = ["STORE_SCHEMA", "StoreError", "Store", "PlanCache", "open_store", "load_results", "identifier_name",
           "store_kind_of"]

STORE_SCHEMA = "nodeperf.sweep/1"
#: Columns every store has, besides the axes and metrics.
BOOKKEEPING = ("point_key", "provenance_sha256", "error", "experiment")
_PARQUET_META = "_nodeperf_store.json"
#: File of a Parquet store that caches planning (a SQLite store keeps it in its table ``plan_cache``).
_PLAN_CACHE_FILE = "_nodeperf_plans.sqlite"
_SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


class StoreError(NodeperfError, ValueError):
    """A results store cannot be used: not a sweep store, another schema or kind, an unknown format."""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _type_of(values: Iterable[Any]) -> str:
    kinds = {type(v) for v in values}
    if kinds <= {bool}:
        return "bool"
    if kinds <= {int}:
        return "int"
    if kinds <= {int, float}:
        return "float"
    return "str"


def _format_of(path: Path) -> str:
    if not str(path).strip() or str(path) == ".":
        got = "''" if str(path) == "." else repr(str(path))  # Path("") reads as "."
        raise StoreError(f"--out: an empty file name; got {got}; expected a results store such as "
                         "results.sqlite or results.parquet")
    suffix = path.suffix.lower()
    if suffix in _SQLITE_SUFFIXES:
        return "sqlite"
    if suffix == ".parquet":
        return "parquet"
    raise StoreError(f"{path}: unknown store format; got suffix {suffix or '(none)'!r}; expected .sqlite "
                     "(SQLite, the default) or .parquet (needs the parquet extra)")


class Store:
    """An open results store (use :func:`open_store`)."""

    def __init__(self, path: Path, fmt: str) -> None:
        self.path = path
        self.format = fmt
        self.meta: dict[str, Any] = {}
        self._conn: sqlite3.Connection | None = None
        self._added: list[str] = []

    # -- opening -----------------------------------------------------------------------------------
    def _read_meta(self) -> dict[str, Any] | None:
        """The stored meta, None for a store that does not exist yet; StoreError for a foreign file."""
        if self.format == "sqlite":
            if not self.path.exists():
                return None
            if self.path.is_dir():
                raise StoreError(f"{self.path}: a folder; expected a SQLite results file")
            if self.path.stat().st_size == 0:
                return None
            try:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                try:
                    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                    if tables <= {"plan_cache"}:  # new, or only planned so far
                        return None
                    if "meta" not in tables or "results" not in tables:
                        raise StoreError(f"{self.path}: not a nodeperf sweep store; got tables "
                                         f"{', '.join(sorted(tables))}; expected tables meta and results")
                    meta = {k: v for k, v in conn.execute("SELECT key, value FROM meta")}
                finally:
                    conn.close()
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: not a SQLite file ({exc}); expected a results store written by "
                                 "`nodeperf sweep` or a new file name") from None
            return {"schema": meta.get("schema"), "kind": meta.get("kind"),
                    "columns": _meta_json(self.path, meta, "columns", dict),
                    "experiments": _meta_json(self.path, meta, "experiments", list)}
        if not self.path.exists():
            return None
        if not self.path.is_dir():
            raise StoreError(f"{self.path}: not a nodeperf Parquet store (a file); expected a folder written by "
                             "`nodeperf sweep --out X.parquet` or a new name")
        mf = self.path / _PARQUET_META
        if not mf.exists():
            if any(p.name != _PLAN_CACHE_FILE for p in self.path.iterdir()):
                raise StoreError(f"{self.path}: not a nodeperf sweep store; got a folder without {_PARQUET_META}")
            return None
        try:
            text = mf.read_text(encoding="utf-8")
        except (OSError, ValueError) as exc:
            raise StoreError(f"{mf}: unreadable store metadata ({exc}); expected the JSON file written by "
                             "`nodeperf sweep`") from None
        try:
            meta = json.loads(text)
        except json.JSONDecodeError as exc:
            raise StoreError(f"{mf}:{exc.lineno}:{exc.colno}: store metadata is not JSON ({exc.msg}); expected the "
                             "JSON object written by `nodeperf sweep` (write to a new store)") from None
        if not isinstance(meta, dict) or not isinstance(meta.get("columns", {}), dict):
            raise StoreError(f"{mf}: store metadata; got {type(meta).__name__}; expected a JSON object with "
                             "schema, kind, columns and experiments")
        return meta

    def check(self, kind: str) -> None:
        """Refuse a store of another schema or kind (nothing is written)."""
        meta = self._read_meta()
        self._check_writable()
        if meta is None:
            self.meta = {"schema": STORE_SCHEMA, "kind": kind, "columns": {}, "experiments": []}
            return
        if meta.get("schema") != STORE_SCHEMA:
            raise StoreError(f"{self.path}: meta.schema: written by another store schema; got "
                             f"{meta.get('schema')!r}; expected {STORE_SCHEMA!r} (write to a new file)")
        if meta.get("kind") != kind:
            raise StoreError(f"{self.path}: meta.kind: holds {meta.get('kind')} points; got a {kind} experiment; "
                             f"expected a {meta.get('kind')} experiment or a new file")
        self.meta = meta

    def prepare(self, experiment: str, axes: Mapping[str, Sequence[Any]], metrics: Sequence[str]) -> None:
        """Create the store or add the columns of new axes and metrics (one transaction)."""
        cols: dict[str, dict[str, str]] = dict(self.meta.get("columns", {}))
        added: list[str] = []
        for name, values in axes.items():
            t = _type_of(values)
            old = cols.get(name)
            if old is None:
                cols[name] = {"role": "axis", "type": t}
                added.append(name)
            elif old["role"] != "axis":
                raise StoreError(f"{self.path}: {name}: a {old['role']} column in this store; got it as an axis")
            elif old["type"] != t and {old["type"], t} <= {"int", "float"}:
                cols[name] = {"role": "axis", "type": "float"}
            elif old["type"] != t:
                raise StoreError(f"{self.path}: {name}: holds {old['type']} values; got {t} values; expected "
                                 f"{old['type']} values or a new store")
        for m in metrics:
            if m not in cols:
                cols[m] = {"role": "metric", "type": "float"}
                added.append(m)
        experiments = list(self.meta.get("experiments", []))
        if experiment not in experiments:
            experiments.append(experiment)
        new_meta = {**self.meta, "columns": cols, "experiments": experiments}
        self._added = [a for a in added if cols[a]["role"] == "axis"]
        if self.format == "sqlite":
            self._prepare_sqlite(new_meta, added)
        else:
            self._prepare_parquet(new_meta)
        self.meta = new_meta

    def _prepare_sqlite(self, meta: dict[str, Any], added: list[str]) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
            conn.execute("PRAGMA synchronous=NORMAL")
            self._conn = conn
            conn.execute("BEGIN IMMEDIATE")
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise self._write_error(exc, "create") from None
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS results (point_key TEXT PRIMARY KEY NOT NULL, "
                         "provenance_sha256 TEXT, error TEXT, experiment TEXT)")
            have = {r[1] for r in conn.execute("PRAGMA table_info(results)")}
            for name in added:
                if name not in have:
                    kind = "REAL" if meta["columns"][name]["type"] in ("float",) else ""
                    conn.execute(f"ALTER TABLE results ADD COLUMN {_q(name)} {kind}".rstrip())
            axes = [c for c, v in meta["columns"].items() if v["role"] == "axis"]
            if added or not self.meta.get("columns"):
                conn.execute("DROP INDEX IF EXISTS results_axes")
                if axes:
                    conn.execute(f"CREATE INDEX results_axes ON results ({', '.join(_q(a) for a in axes)})")
            for k, v in (("schema", meta["schema"]), ("kind", meta["kind"]),
                         ("columns", json.dumps(meta["columns"])),
                         ("experiments", json.dumps(meta["experiments"]))):
                conn.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                             "value = excluded.value", (k, v))
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.Error | OSError):
                raise self._write_error(exc, "create") from None
            raise

    def _prepare_parquet(self, meta: dict[str, Any]) -> None:
        _pyarrow()
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            tmp = self.path / (_PARQUET_META + ".tmp")
            tmp.write_text(json.dumps(meta, indent=1), encoding="utf-8")
            os.replace(tmp, self.path / _PARQUET_META)
        except OSError as exc:
            raise self._write_error(exc, "create") from None

    def _check_writable(self) -> None:
        """Refuse, before any work, a store that cannot be written (read-only folder or file, /proc, ...)."""
        import tempfile

        target = self.path if self.path.exists() else self.path.parent
        while not target.exists() and target != target.parent:
            target = target.parent
        folder = target if target.is_dir() else target.parent
        try:
            if self.path.exists() and self.path.is_file() and not os.access(self.path, os.W_OK):
                raise PermissionError(13, "Permission denied")
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".nodeperf-write-test-"):
                pass
        except OSError as exc:
            raise self._write_error(exc, "create") from None

    def _write_error(self, exc: BaseException, doing: str) -> StoreError:
        """A located StoreError for a store that cannot be created or written (disk full, read-only, ...)."""
        cause = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if doing == "create":
            return StoreError(f"{self.path}: cannot create the results store ({cause}); expected a writable "
                              "file name in a writable folder (--out)")
        return StoreError(f"{self.path}: cannot write finished points ({cause}); the points stored before are "
                          "kept: free space (or make the store writable) and run the same command to resume")

    # -- reading ------------------------------------------------------------------------------------
    def done_keys(self, metrics: Sequence[str]) -> set[str]:
        """Keys of points already stored with every metric in ``metrics`` (or with an error)."""
        if self.format == "sqlite":
            assert self._conn is not None
            cond = " AND ".join(f"{_q(m)} IS NOT NULL" for m in metrics) or "1"
            rows = self._conn.execute(f"SELECT point_key FROM results WHERE error IS NOT NULL OR ({cond})")
            return {r[0] for r in rows}
        df = _read_parquet_folder(self.path)
        if df is None or df.empty:
            return set()
        ok = df["error"].notna()
        full = None
        for m in metrics:
            col = df[m].notna() if m in df.columns else False
            full = col if full is None else (full & col)
        if full is not None:
            ok = ok | full
        return set(df.loc[ok, "point_key"])

    # -- writing ------------------------------------------------------------------------------------
    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Insert or update ``rows`` (dicts of column -> value) in one transaction."""
        if not rows:
            return
        cols = list(BOOKKEEPING) + [c for c in self.meta["columns"] if any(c in r for r in rows)]
        if self.format == "sqlite":
            assert self._conn is not None
            names = ", ".join(_q(c) for c in cols)
            marks = ", ".join("?" for _ in cols)
            updates = ", ".join(f"{_q(c)} = excluded.{_q(c)}" for c in cols if c != "point_key")
            sql = (f"INSERT INTO results ({names}) VALUES ({marks}) ON CONFLICT(point_key) DO UPDATE SET {updates}")
            data = [tuple(_sql_value(r.get(c)) for c in cols) for r in rows]
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                self._conn.executemany(sql, data)
                self._conn.execute("COMMIT")
            except BaseException as exc:
                _rollback(self._conn)
                if isinstance(exc, sqlite3.Error | OSError):
                    raise self._write_error(exc, "write") from None
                raise
            return
        pa, pq = _pyarrow()
        pd = _pandas("--out *.parquet")
        df = pd.DataFrame([{c: r.get(c) for c in cols} for r in rows], columns=cols)
        n = len([p for p in self.path.glob("part-*.parquet")])
        while (self.path / f"part-{n:06d}.parquet").exists():
            n += 1
        final = self.path / f"part-{n:06d}.parquet"
        tmp = self.path / f".part-{n:06d}.parquet.tmp"
        try:
            pq.write_table(pa.Table.from_pandas(_coerce(df, self.meta["columns"]), preserve_index=False), tmp)
            os.replace(tmp, final)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise self._write_error(exc, "write") from None

    @property
    def added_axes(self) -> list[str]:
        """Axis columns this run added to an existing store (rows reused from before lack them)."""
        return list(self._added)

    def fill_axes(self, values: Mapping[str, Mapping[str, Any]]) -> None:
        """Set the new axis columns of reused rows (``{point_key: {column: value}}``), where still empty."""
        cols = [c for c in self._added]
        if not cols or not values:
            return
        if self.format == "sqlite":
            assert self._conn is not None
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                for c in cols:
                    self._conn.executemany(
                        f"UPDATE results SET {_q(c)} = ? WHERE point_key = ? AND {_q(c)} IS NULL",
                        [(_sql_value(v[c]), k) for k, v in values.items() if c in v])
                self._conn.execute("COMMIT")
            except BaseException as exc:
                _rollback(self._conn)
                if isinstance(exc, sqlite3.Error | OSError):
                    raise self._write_error(exc, "write") from None
                raise
            return
        df = _read_parquet_folder(self.path)
        if df is None:
            return
        keep = df[df["point_key"].isin(set(values))]
        rows = []
        for rec in keep.to_dict("records"):
            vals = values[rec["point_key"]]
            for c in cols:
                if c in vals and (rec.get(c) is None or rec.get(c) != rec.get(c)):
                    rec[c] = vals[c]
            rows.append(rec)
        self.write(rows)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def plan_cache(self) -> PlanCache:
        """The store's cache of planning results (graph digests of workloads), for :func:`run_sweep`."""
        return PlanCache(self, self.path if self.format == "sqlite" else self.path / _PLAN_CACHE_FILE)


class PlanCache:
    """Planning results kept with a store (``{cache key: value}``), so re-running a store plans at once.

    A key names everything its value depends on (the caller hashes the inputs and the code that
    computes it); a row is written in one transaction and never changes. The table is created on
    the first :meth:`put` only, so a store that was never planned stays absent.
    """

    def __init__(self, store: Store, path: Path) -> None:
        self.store = store
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _connect(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is not None:
            return self._conn
        if not create and not self.path.exists():
            return None
        try:
            if create:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), isolation_level=None, timeout=30.0)
            conn.execute("PRAGMA synchronous=NORMAL")
            have = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='plan_cache'").fetchone()
            if have is None:
                if not create:
                    conn.close()
                    return None
                conn.execute("CREATE TABLE IF NOT EXISTS plan_cache (key TEXT PRIMARY KEY NOT NULL, "
                             "value TEXT NOT NULL)")
        except (OSError, sqlite3.Error) as exc:
            raise self.store._write_error(exc, "create") from None
        self._conn = conn
        return conn

    def get(self, keys: Sequence[str]) -> dict[str, str]:
        """The cached values of those ``keys`` that are cached."""
        conn = self._connect(create=False)
        if conn is None or not keys:
            return {}
        out: dict[str, str] = {}
        try:
            for i in range(0, len(keys), 500):
                chunk = list(keys[i:i + 500])
                marks = ", ".join("?" for _ in chunk)
                out.update(conn.execute(f"SELECT key, value FROM plan_cache WHERE key IN ({marks})", chunk))
        except sqlite3.Error as exc:
            raise StoreError(f"{self.path}: plan_cache: unreadable ({exc}); expected the table written by "
                             "`nodeperf sweep` (or a new store)") from None
        return out

    def put(self, items: Mapping[str, str]) -> None:
        """Add ``items`` in one transaction."""
        if not items:
            return
        conn = self._connect(create=True)
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT OR IGNORE INTO plan_cache (key, value) VALUES (?, ?)", list(items.items()))
            conn.execute("COMMIT")
        except BaseException as exc:
            _rollback(conn)
            if isinstance(exc, sqlite3.Error | OSError):
                raise self.store._write_error(exc, "write") from None
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _rollback(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if SQLite has not already (it does on a full disk)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


def _meta_json(path: Path, meta: Mapping[str, str], key: str, kind: type) -> Any:
    """One JSON value of the ``meta`` table, or a located StoreError."""
    text = meta.get(key, "{}" if kind is dict else "[]")
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise StoreError(f"{path}: meta.{key}: not JSON ({getattr(exc, 'msg', exc)}); got {str(text)[:40]!r}; "
                         "expected the JSON written by `nodeperf sweep` (write to a new store)") from None
    if not isinstance(value, kind):
        raise StoreError(f"{path}: meta.{key}: got a JSON {type(value).__name__}; expected a JSON "
                         f"{'object' if kind is dict else 'array'} (write to a new store)")
    return value


def _sql_value(v: Any) -> Any:
    if isinstance(v, bool):
        return int(v)
    if v is not None and hasattr(v, "item"):  # numpy scalar
        return v.item()
    return v


def open_store(path: str | Path, kind: str) -> Store:
    """Open (or plan to create) the store at ``path`` for points of ``kind``; refuses a foreign store.

    Raises
    ------
    StoreError
        Unknown suffix, a file that is not a sweep store, another store schema or point kind.
    """
    p = Path(path)
    store = Store(p, _format_of(p))
    store.check(kind)
    return store


def store_kind_of(path: str | Path) -> dict[str, Any]:
    """The meta of an existing store (schema, kind, columns, experiments)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such results store; got {str(path)!r}; expected a file written by "
                                "`nodeperf sweep EXPERIMENT.toml --out FILE`")
    store = Store(p, _format_of(p))
    meta = store._read_meta()
    if meta is None:
        raise StoreError(f"{p}: an empty store; expected a file written by `nodeperf sweep`")
    if meta.get("schema") != STORE_SCHEMA:
        raise StoreError(f"{p}: meta.schema: written by another store schema; got {meta.get('schema')!r}; "
                         f"expected {STORE_SCHEMA!r}")
    return meta


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StoreError("--out *.parquet: needs pyarrow; got no pyarrow; install it with: "
                         "pip install 'nodeperf[parquet]' (or write .sqlite)") from None
    return pa, pq


def _pandas(what: str) -> Any:
    """pandas, an optional extra (an ImportError saying how to install it)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError(f"{what} needs pandas; install it with: pip install 'nodeperf[pandas]'",
                          name="pandas") from exc
    return pd


def _coerce(df: Any, columns: Mapping[str, Mapping[str, str]]) -> Any:
    """Columns with one pandas dtype each (a part file has a stable schema)."""
    for c in df.columns:
        t = columns.get(c, {}).get("type", "str")
        if c in BOOKKEEPING or t == "str":
            df[c] = df[c].astype("object")
        elif t == "float":
            df[c] = df[c].astype("float64")
        elif t == "int":
            df[c] = df[c].astype("Int64")
        elif t == "bool":
            df[c] = df[c].astype("boolean")
    return df


def _read_parquet_folder(path: Path) -> Any:
    _, pq = _pyarrow()
    pd = _pandas("a Parquet store")
    parts = sorted(path.glob("part-*.parquet"))
    if not parts:
        return None
    frames = [pq.read_table(p).to_pandas() for p in parts]
    df = pd.concat(frames, ignore_index=True, sort=False)
    return df.drop_duplicates("point_key", keep="last").reset_index(drop=True)


def identifier_name(column: str) -> str:
    """A column name as a Python identifier, as ``load_results(..., identifiers=True)`` spells it: every
    ``.`` becomes ``__`` (``workload.batch`` -> ``workload__batch``,
    ``hardware.memory.hbm.read_bandwidth_bytes_per_s`` -> ``hardware__memory__hbm__read_bandwidth_bytes_per_s``)."""
    return column.replace(".", "__")


def load_results(path: str | Path, *, identifiers: bool = False) -> Any:
    """The rows of a results store as a pandas DataFrame.

    Columns: the axes (``section.key``), the metrics, then ``provenance_sha256``, ``error``,
    ``experiment`` and ``point_key``. Boolean axes come back as booleans; a metric of a point that
    could not be evaluated is NaN and its ``error`` says why; an axis added to the store after a row
    was computed and not swept since is NaN/None in that row.

    ``identifiers=True`` names the axes as Python identifiers (each ``.`` becomes ``__``, see
    :func:`identifier_name`), so that ``df.query`` and attribute access take them:
    ``load_results(p, identifiers=True).query("workload__batch >= 8")``. The default keeps the
    dotted names of the store (``workload.batch``); ``df.query`` reads those only back-quoted
    (``df.query("`workload.batch` >= 8")``).

    Examples
    --------
    >>> # df = load_results("results.sqlite"); df.nsmallest(5, "latency_s")
    """
    pd = _pandas("load_results")
    p = Path(path)
    meta = store_kind_of(p)
    cols = meta.get("columns", {})
    if _format_of(p) == "sqlite":
        conn = sqlite3.connect(f"file:{p}?mode=ro", uri=True)
        try:
            df = pd.read_sql_query("SELECT * FROM results ORDER BY rowid", conn)
        finally:
            conn.close()
    else:
        df = _read_parquet_folder(p)
        if df is None:
            df = pd.DataFrame(columns=list(BOOKKEEPING) + list(cols))
    for c, info in cols.items():
        if c not in df.columns:
            df[c] = None
        if info["type"] == "bool":
            df[c] = df[c].map(lambda v: None if v is None or v != v else bool(v)).astype("object")
        elif info["role"] == "metric" or info["type"] == "float":
            df[c] = pd.to_numeric(df[c], errors="coerce").astype("float64")
    axes = [c for c, v in cols.items() if v["role"] == "axis"]
    metrics = [c for c, v in cols.items() if v["role"] == "metric"]
    order = axes + metrics + ["provenance_sha256", "error", "experiment", "point_key"]
    df = df[order]
    if identifiers:
        df = df.rename(columns={c: identifier_name(c) for c in order})
    return df
