"""One module per `nodeperf` subcommand (see simulator.cli)."""
