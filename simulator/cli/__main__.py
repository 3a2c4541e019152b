"""``python -m simulator.cli``: the ``nodeperf`` command without the installed entry point."""

import sys

from simulator.cli.main import main

sys.exit(main())
