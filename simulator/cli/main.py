"""Command-line entry point `nodeperf`: parses arguments and dispatches to one command module each.

Each command lives in ``simulator/cli/<name>.py`` and exposes ``register(subparsers)``, which
adds its parser and sets ``func`` (``args -> int``) as the default. Only the chosen command's module
is imported (the others are listed by their one-line help, :data:`COMMAND_HELP`), so ``nodeperf
--version`` and ``--help`` load no engine. User errors (:class:`~nodeperf.errors.NodeperfError` and
the built-ins they subclass: ``ValueError`` such as SpecError and GraphError, ``FileNotFoundError``,
``NotImplementedError`` for unsupported ops) become one line on stderr and exit code 2, never a
traceback. ``nodeperf --version`` prints ``nodeperf <version>`` and exits 0.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import re
import sys
from collections.abc import Collection, Sequence

from nodeperf.errors import NodeperfError

__all__ = ["main", "build_parser", "version", "COMMAND_MODULES", "COMMAND_HELP"]

# Order here is the order `nodeperf --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "models",
    "graph",
    "hardware",
    "predict",
    "serve",
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

#: The one-line help of each command, as its module's ``register`` gives it (a test keeps them equal):
#: ``nodeperf --help`` lists the commands without importing their modules.
COMMAND_HELP: dict[str, str] = {
    "models": "list the model zoo",
    "graph": "summarise a model's operator graph",
    "hardware": "list the hardware catalog, or show one spec with sources",
    "predict": "predict latency, energy and memory of a model on a device",
    "serve": "simulate serving a model: requests over time, engine scheduler, KV cache, replicas, cost",
    "systolic": "cycles, utilisation, memory traffic and energy of a topology on a systolic array",
    "measure": "time microbenchmarks (and zoo networks) on this machine's CPU or GPU",
    "calibrate": "fit a device's efficiency factors to measurements; write an overlay",
    "validate": "compare predictions with measurements (error table, optional plot)",
    "sweep": "run a design-space sweep from an experiment file, or show its results",
    "tune": "search batch, precision, fusion, plan and device (or a systolic design) under constraints",
    "plot": "draw a figure: roofline, time breakdown, Pareto front or heatmap",
    "realtime": "simulate periodic/sporadic model tasks with deadlines on a node, with worst-case bounds",
    "partition": "place a model's ops on the devices of a heterogeneous node (GPU + accelerator + CPU)",
}


class _Parser(argparse.ArgumentParser):
    def _check_value(self, action: argparse.Action, value: object) -> None:
        """A value outside an option's ``choices`` (a flag's or the command name's): the located form every other
        refusal has (``argument --zero: got 4; expected one of 1, 2, 3``, with the near match), not argparse's
        "invalid choice" (whose wording also changed between Python releases)."""
        choices = action.choices
        if choices is None or value in choices:
            return
        from nodeperf.suggest import did_you_mean

        names = [str(c) for c in choices]
        shown = str(value) if isinstance(value, (int, float)) else repr(value)
        hint = getattr(action, "path_hint", "")  # a flag whose users may give it a file: say where files go
        if hint and isinstance(value, str) and ("/" in value or "." in value):
            raise argparse.ArgumentError(action, f"got {shown}, a path; expected one of {', '.join(names)}; {hint}")
        raise argparse.ArgumentError(action, f"got {shown}; expected one of {', '.join(names)}"
                                     + did_you_mean(str(value), names))

    def error(self, message: str) -> None:  # argparse's own usage errors: exit 2, one line
        if message.startswith("unrecognized arguments: "):
            message += _flag_hint(self, message.removeprefix("unrecognized arguments: ").split())
        else:
            m = _INVALID_TYPE.search(message)
            if m:  # a flag declared type=int/float given a word: the located form too
                message = f"{m.group(1)}got {m.group(3)}; expected {_TYPE_FORMS[m.group(2)]}"
        self.exit(2, f"nodeperf: error: {message}\n")


#: argparse's message for a value its ``type=int``/``type=float`` cannot convert.
_INVALID_TYPE = re.compile(r"^(argument [^:]+: )invalid (int|float) value: (.*)$")
_TYPE_FORMS = {"int": "an integer", "float": "a number"}


def _flag_hint(parser: argparse.ArgumentParser, unknown: Sequence[str]) -> str:
    """The near match of the first unknown ``--flag`` among the flags of ``parser`` and its built commands (spelt
    without the two dashes every flag shares, which made ``--gpus`` near ``--phase``); with none, where the
    command's flags are listed."""
    from nodeperf.suggest import near_match

    first = next((u.split("=", 1)[0] for u in unknown if u.startswith("--")), "")
    if not first:
        return ""
    flags = set(parser._option_string_actions)
    built = []  # the commands whose full parsers were built (main builds only the one its argv names)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                flags.update(sub._option_string_actions)
                if set(sub._option_string_actions) - {"-h", "--help"}:
                    built.append(name)
    near = near_match(first.removeprefix("--"), sorted(f.removeprefix("--") for f in flags if f.startswith("--")))
    hint = f"; did you mean '--{near[0]}'?" if near else ""
    if hint or len(built) != 1:
        return hint
    return f"; expected a flag of `nodeperf {built[0]}` (`nodeperf {built[0]} --help` lists them)"


def version() -> str:
    """The installed distribution's version, or ``"0+unknown"`` from a never-installed source tree."""
    from simulator.version import package_version  # here, not at import: only --version needs it

    return package_version() or "0+unknown"


class _VersionAction(argparse.Action):
    """``--version``: print ``nodeperf <version>`` and exit 0 (the version is looked up only then)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS,
                 default: str = argparse.SUPPRESS, help: str | None = None) -> None:
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        sys.stdout.write(f"nodeperf {version()}\n")
        parser.exit(0)


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``nodeperf`` parser with the full parsers of ``commands`` (default: every command); each other
    command gets a parser that only names it with its one-line help (enough to list it in ``--help``)."""
    parser = _Parser(
        prog="nodeperf",
        description="Predict latency, energy and memory of deep-learning work on accelerator nodes.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log warnings and details")
    parser.add_argument("--version", action=_VersionAction, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMAND_MODULES:
        if commands is not None and name not in commands:
            sub.add_parser(name, help=COMMAND_HELP.get(name))
            continue
        try:
            mod = importlib.import_module(f"simulator.cli.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"simulator.cli.{name}":
                continue  # command not built yet
            raise
        mod.register(sub)
    return parser


def chosen_command(argv: Sequence[str]) -> str | None:
    """The command ``argv`` names: its first argument that is not an option (the options before the
    command take no value), or None (``--help``, ``--version``, nothing)."""
    for i, arg in enumerate(argv):
        if arg == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-") or arg == "-":
            return arg
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(commands=[c for c in (chosen_command(argv),) if c in COMMAND_MODULES])
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
    except (NodeperfError, ValueError, FileNotFoundError, NotImplementedError, KeyError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"nodeperf: error: {msg}", file=sys.stderr)
        return 2
    except ImportError as exc:  # an optional extra (onnx, torch) is not installed
        extra = {"onnx": "onnx", "torch": "torch"}.get(getattr(exc, "name", "") or "", "")
        hint = f"; install it with: pip install 'nodeperf[{extra}]'" if extra else ""
        print(f"nodeperf: error: {exc}{hint}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
