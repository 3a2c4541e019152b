"""The ``nodeperf`` command line: :mod:`~simulator.cli.main` parses and dispatches; one module per
command (``models``, ``graph``, ``hardware``, ``predict``, ``systolic``, ``measure``, ``calibrate``,
``validate``) holds its argument parsing and messages; :mod:`~simulator.cli.common` what they share."""

from simulator.cli.main import COMMAND_MODULES, build_parser, main

__all__ = ["main", "build_parser", "COMMAND_MODULES"]
