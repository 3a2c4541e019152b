"""Files the CLI commands write: every output path is checked before any work, and every write error
becomes one located line.

A command calls :func:`check_outputs` with its output options (``--csv``, ``--trace``, ``--save``,
``--out``, ``--plot``) first, before it loads a model, runs a fit or times a benchmark, and later
:func:`write_output` with the finished content. Paths follow one rule everywhere:

- ``-`` is standard output (where the option allows it: text outputs only); the content is then the
  only thing the command prints there, so at most one option may name ``-``, and not with ``--json``;
- an empty path, a folder, a path whose folder does not exist or is not a folder, and a place the
  command may not create or write a file are refused up front;
- a write that fails later (a full disk, ``/dev/full``) is reported as ``<flag> <path>: cannot write
  the file; got <reason>; ...``, and a file the command created is removed again, so a failed command
  leaves no partial output behind.

Errors are :class:`OutputError` (a ``ValueError``): the CLI prints them as one line and exits 2.

Examples
--------
>>> check_outputs(("--csv", None), ("--trace", None))
>>> try:
...     check_output_path("--csv", "")
... except OutputError as exc:
...     print(exc)
--csv: empty path; got ''; expected a file path or - for standard output
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from nodeperf.errors import NodeperfError

__all__ = ["STDOUT", "OutputError", "check_output_path", "check_outputs", "csv_text", "to_stdout", "write_output"]

#: The path that means standard output.
STDOUT = "-"


class OutputError(NodeperfError, ValueError):
    """An output path cannot be written; the message names the option, the path and the reason."""


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc)


def check_output_path(flag: str, path: str | None, *, stdout_ok: bool = True) -> None:
    """Refuse an output ``path`` of option ``flag`` that could not be written, before any work.

    Parameters
    ----------
    flag
        The option as typed (``"--csv"``), for the message.
    path
        The path given; None (option not given) is accepted.
    stdout_ok
        Whether ``-`` (standard output) is allowed for this option.

    Raises
    ------
    OutputError
        Empty path, ``-`` where not allowed, a folder, a missing or non-folder parent, or a place
        where no file can be created or written.
    """
    if path is None:
        return
    form = "a file path or - for standard output" if stdout_ok else "a file path"
    if path == "":
        raise OutputError(f"{flag}: empty path; got ''; expected {form}")
    if path == STDOUT:
        if not stdout_ok:
            raise OutputError(f"{flag} -: standard output is not possible for this option; got '-'; expected {form}")
        return
    p = Path(path)
    if p.is_dir():
        raise OutputError(f"{flag} {path}: is a folder; got {path!r}; expected {form}")
    parent = p.parent
    if not parent.exists():
        raise OutputError(f"{flag} {path}: no such folder; got {str(parent)!r}; expected an existing folder")
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: not a folder; got {str(parent)!r}, a file; expected an existing folder")
    try:
        st = p.stat()
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise OutputError(f"{flag} {path}: cannot write the file; got {_reason(exc)}; expected {form}") from None
    try:
        if st is None:  # a new file: can one be created in that folder?
            fd, probe = tempfile.mkstemp(dir=parent, prefix=".nodeperf-probe-")
            os.close(fd)
            os.unlink(probe)
        elif stat.S_ISREG(st.st_mode):  # an existing file: opened for appending, its content is left as it is
            with open(p, "ab"):
                pass
        # devices (/dev/null, /dev/full) and pipes are not probed: opening a pipe would wait for a reader
    except OSError as exc:
        where = f"cannot create a file in {str(parent)!r}" if st is None else "cannot write the file"
        raise OutputError(f"{flag} {path}: {where}; got {_reason(exc)}; expected a writable place") from None


def check_outputs(*outputs: tuple[str, str | None], json_flag: bool = False, no_stdout: tuple[str, ...] = ()) -> None:
    """:func:`check_output_path` for each ``(flag, path)``, and at most one of them on standard output.

    ``json_flag``: the command prints its ``--json`` object, so no option may name ``-``.
    ``no_stdout``: flags whose content cannot go to standard output (binary images).
    """
    for flag, path in outputs:
        check_output_path(flag, path, stdout_ok=flag not in no_stdout)
    _one_output_per_file(outputs)
    on_stdout = [flag for flag, path in outputs if path == STDOUT]
    if len(on_stdout) > 1:
        raise OutputError(f"{on_stdout[1]} -: standard output is already taken; got {' - and '.join(on_stdout)} -; "
                          "expected at most one output on standard output")
    if on_stdout and json_flag:
        raise OutputError(f"{on_stdout[0]} -: standard output is taken by --json; got {on_stdout[0]} - with --json; "
                          "expected a file path, or no --json")


def _one_output_per_file(outputs: tuple[tuple[str, str | None], ...]) -> None:
    """Two options naming one file would write it twice, the second replacing the first without a word
    (``serve --csv out --trace out`` left only the trace): refused."""
    from pathlib import Path

    seen: dict[Path, str] = {}
    for flag, path in outputs:
        if not path or path == STDOUT:
            continue
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise OutputError(f"{flag} {path}: the file {seen[key]} writes too; got {seen[key]} and {flag} naming "
                              f"{path}; expected a file of its own for each output")
        seen[key] = flag


def csv_text(header: list[str], rows: list[list[object]]) -> str:
    """CSV text (``\\n`` line ends) of ``rows`` under ``header``; None becomes an empty cell.

    >>> print(csv_text(["name", "latency_s"], [["a", 0.5], ["b", None]]), end="")
    name,latency_s
    a,0.5
    b,
    """
    import csv
    import io

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def to_stdout(*paths: str | None) -> bool:
    """Whether any of the output ``paths`` is standard output (then it is the only thing printed there)."""
    return any(p == STDOUT for p in paths)


def write_output(flag: str, path: str, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path``, or to standard output for ``-``.

    Raises
    ------
    OutputError
        Any ``OSError`` on open, write, flush or close, located; a file this call created is removed.
    """
    if path == STDOUT:
        if isinstance(data, bytes):
            raise OutputError(f"{flag} -: standard output takes text; got {len(data)} bytes; expected a file path")
        try:
            sys.stdout.write(data)
            sys.stdout.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"{flag} -: cannot write to standard output; got {_reason(exc)}; "
                              "expected a writable standard output") from None
        return
    p = Path(path)
    existed = p.exists() or p.is_symlink()
    try:
        if isinstance(data, bytes):
            with open(p, "wb") as fh:
                fh.write(data)
        else:
            with open(p, "w", encoding="utf-8", newline="") as fh:
                fh.write(data)
    except OSError as exc:
        if not existed:
            try:
                if p.is_file():
                    p.unlink()
            except OSError:
                pass
        raise OutputError(f"{flag} {path}: cannot write the file; got {_reason(exc)}; expected a writable file path") \
            from None
