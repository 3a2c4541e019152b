"""Reading input files safely: one helper every layer uses, with located one-line errors.

A path given on the command line may name anything: a folder, a missing file, ``/dev/zero`` (an
endless character device), a FIFO that never ends, a symlink loop, or a multi-gigabyte file. Read
naively, the first ones give a traceback and the last ones read until memory runs out. The helpers
here refuse all of them up front, before a byte is read, with ``<path>: <problem>; got ...;
expected ...`` (convention 6). They depend on the standard library only, so the leaf layers
(:mod:`workloads`, :mod:`hwmodels`) and :mod:`simulator` may all import them.

The caller names what it expects (``what="a device TOML file"``) and how to make the exception to
raise from the message (its own located error class, e.g. ``SpecError``), so messages read the same
everywhere.

Examples
--------
>>> read_text_file("/dev/zero", what="a TOML file")
Traceback (most recent call last):
...
ValueError: /dev/zero: not a regular file (a character device); got '/dev/zero'; expected a TOML file
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

__all__ = ["MAX_INPUT_BYTES", "MAX_NESTING", "check_regular_file", "read_bytes_file", "read_csv_text", "read_text_file",
           "file_kind", "refuse_json_as_csv", "toml_nesting_depth"]

#: Largest input file read whole (bytes): 256 MiB. Specs, scenarios, experiments, measurement CSVs and
#: saved graphs are kilobytes to a few megabytes; anything larger is refused rather than read into memory.
MAX_INPUT_BYTES = 256 * 1024 * 1024

#: Deepest nesting of arrays and inline tables a TOML input may have. Real specs nest four levels;
#: Python's TOML parser recurses per level and fails with a RecursionError near a few hundred.
MAX_NESTING = 64


def file_kind(mode: int) -> str:
    """A reader's name for the kind of file ``mode`` (from :func:`os.stat`) describes."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_regular_file(path: str | os.PathLike[str], *, what: str, error: Callable[[str], Exception] = ValueError,
                       max_bytes: int | None = MAX_INPUT_BYTES) -> Path:
    """``path`` as a :class:`~pathlib.Path` once it is known to be a readable-size regular file.

    Raises ``error`` (one located line) when the path is empty, missing, a broken link, a folder, a
    device, a pipe, a socket, a symlink loop, inaccessible, or larger than ``max_bytes`` (None: no
    limit). Nothing is opened, so a FIFO or ``/dev/zero`` never blocks or fills memory.
    """
    text = os.fspath(path)
    if text == "":
        raise error(f"'': empty path; got ''; expected {what}")
    p = Path(text)
    try:
        st = p.stat()
    except FileNotFoundError:
        if p.is_symlink():
            raise error(f"{p}: broken symbolic link; got a link to {os.readlink(p)!r}, which does not exist; "
                        f"expected {what}") from None
        raise error(f"{p}: file not found; got {text!r}; expected {what}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise error(f"{p}: symbolic link loop; got a link that leads back to itself; expected {what}") from None
        if e.errno == errno.ENAMETOOLONG:
            raise error(f"{p}: file name too long; got {len(text)} characters; expected {what}") from None
        raise error(f"{p}: cannot read the file; got {e.strerror or e}; expected {what}") from None
    except ValueError as e:  # an embedded NUL byte in the path
        raise error(f"{text!r}: invalid path; got {e}; expected {what}") from None
    if stat.S_ISDIR(st.st_mode):
        raise error(f"{p}: is a folder; got {text!r}; expected {what}")
    if not stat.S_ISREG(st.st_mode):
        raise error(f"{p}: not a regular file ({file_kind(st.st_mode)}); got {text!r}; expected {what}")
    if max_bytes is not None and st.st_size > max_bytes:
        raise error(f"{p}: file too large; got {_size(st.st_size)}; expected {what} of at most {_size(max_bytes)}")
    return p


def read_bytes_file(path: str | os.PathLike[str], *, what: str, error: Callable[[str], Exception] = ValueError,
                    max_bytes: int | None = MAX_INPUT_BYTES) -> bytes:
    """The bytes of the regular file at ``path`` (see :func:`check_regular_file` for what is refused).

    The read itself is bounded by ``max_bytes`` too, so a file that grows while it is read cannot
    exhaust memory.
    """
    p = check_regular_file(path, what=what, error=error, max_bytes=max_bytes)
    try:
        with open(p, "rb") as fh:
            data = fh.read() if max_bytes is None else fh.read(max_bytes + 1)
    except OSError as e:
        raise error(f"{p}: cannot read the file; got {e.strerror or e}; expected {what}") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise error(f"{p}: file too large; got more than {_size(max_bytes)}; expected {what} of at most "
                    f"{_size(max_bytes)}")
    return data


def read_text_file(path: str | os.PathLike[str], *, what: str, error: Callable[[str], Exception] = ValueError,
                   max_bytes: int | None = MAX_INPUT_BYTES, allow_nul: bool = False) -> str:
    """The UTF-8 text of the regular file at ``path`` (a leading byte-order mark is dropped).

    Besides what :func:`read_bytes_file` refuses, refuses bytes that are not UTF-8 and, unless
    ``allow_nul``, a NUL character (a binary file, or a corrupted row), naming its line and column.
    """
    raw = read_bytes_file(path, what=what, error=error, max_bytes=max_bytes)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text; got byte 0x{raw[e.start]:02x} at offset {e.start}; "
                    f"expected {what}, UTF-8 encoded") from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not allow_nul and "\x00" in text:
        at = text.index("\x00")
        line = text.count("\n", 0, at) + 1
        col = at - (text.rfind("\n", 0, at) + 1) + 1
        raise error(f"{path}:{line}:{col}: NUL byte in the text; got '\\x00'; expected {what} (text, no NUL bytes)")
    return text


def refuse_json_as_csv(text: str, where: str, *, what: str, error: Callable[[str], Exception] = ValueError) -> None:
    """Refuse ``text`` that is JSON where a CSV file is read (a ``--json`` output, a Chrome trace from ``serve
    --trace``): one line, ``<where>: not a CSV file; got JSON (...); expected <what>``, instead of one "missing
    column" problem per header cell the CSV reader would make of the JSON's commas.

    Text whose first character is ``{`` or ``[`` is taken for JSON: no CSV these readers accept has a header that
    starts with one (their columns are plain names).

    >>> refuse_json_as_csv('{"traceEvents": []}', "t.json", what="a measurement CSV")
    Traceback (most recent call last):
    ...
    ValueError: t.json: not a CSV file; got JSON (an object with keys traceEvents); expected a measurement CSV
    """
    head = text.lstrip("\ufeff \t\r\n")[:1]
    if head not in ("{", "["):
        return
    import json

    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):  # cut short, or nested deeper than the parser recurses
        got = f"text that starts like JSON ({head!r})"
    else:
        if isinstance(doc, dict):
            keys = ", ".join(str(k) for k in list(doc)[:6]) + (", ..." if len(doc) > 6 else "")
            got = f"JSON (an object with keys {keys})" if doc else "JSON (an empty object)"
        elif isinstance(doc, list):
            got = f"JSON (an array of {len(doc)} item{'' if len(doc) == 1 else 's'})"
        else:
            got = "JSON"
    raise error(f"{where}: not a CSV file; got {got}; expected {what}")


def read_csv_text(path: str | os.PathLike[str], *, what: str, error: Callable[[str], Exception] = ValueError,
                  max_bytes: int | None = MAX_INPUT_BYTES) -> str:
    """The text of the CSV file at ``path``: :func:`read_text_file`, and JSON refused (:func:`refuse_json_as_csv`)."""
    text = read_text_file(path, what=what, error=error, max_bytes=max_bytes)
    refuse_json_as_csv(text, os.fspath(path), what=what, error=error)
    return text


# strings and comments as whole tokens (so brackets inside them are not counted), else one bracket
_TOML_TOKEN = re.compile(
    r'"""(?:[^\\]|\\.)*?"""|\'\'\'.*?\'\'\'|"(?:[^"\\\n]|\\.)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}]',
    re.S,
)


def toml_nesting_depth(text: str) -> int:
    """The deepest nesting of brackets (arrays, inline tables, table headers) in TOML ``text``.

    Brackets inside strings and comments are not counted. Scanned with one regular expression, in
    linear time, so it is safe on any input :func:`read_text_file` accepts.

    >>> toml_nesting_depth('a = [[1], {b = "[[["}]  # ]]]')
    2
    """
    depth = deepest = 0
    for m in _TOML_TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth = max(depth - 1, 0)
    return deepest
