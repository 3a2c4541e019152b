"""Command-line entry point `nodeperf`: parses arguments and dispatches to one command module each.

Each command lives in ``simulator/cli/<name>.py`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (``args -> int``) as the default. User errors (``ValueError``
subclasses such as SpecError and GraphError, ``FileNotFoundError``, ``NotImplementedError`` for
unsupported ops) become one line on stderr and exit code 2, never a traceback. ``nodeperf --version``
prints ``nodeperf <version>`` and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

__all__ = ["main", "build_parser", "version", "COMMAND_MODULES"]

# Order here is the order `nodeperf --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "models",
    "graph",
    "hardware",
    "predict",
    "systolic",
    "measure",
    "calibrate",
    "validate",
    "sweep",
    "tune",
    "plot",
    "realtime",
    "partition",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own usage errors: exit 2, one line
        self.exit(2, f"nodeperf: error: {message}\n")


def version() -> str:
    """The installed distribution's version, or ``"0+unknown"`` from a never-installed source tree."""
    from importlib import metadata  # here, not at import: only --version needs it

    try:
        return metadata.version("nodeperf")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _VersionAction(argparse.Action):
    """``--version``: print ``nodeperf <version>`` and exit 0 (the version is looked up only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        sys.stdout.write(f"nodeperf {version()}\n")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="nodeperf",
        description="Predict latency, energy and memory of deep-learning work on accelerator nodes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log warnings and details")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        try:
            mod = importlib.import_module(f"simulator.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"simulator.cli.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="nodeperf: %(levelname)s: %(message)s",
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError, NotImplementedError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"nodeperf: error: {msg}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional extra (onnx, torch, transformers) is not installed
        extra = {"onnx": "onnx", "torch": "torch", "transformers": "hf"}.get(getattr(exc, "name", "") or "", "")
        hint = f"; install it with: pip install 'nodeperf[{extra}]'" if extra else ""
        print(f"nodeperf: error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
