"""``python -m studies.slo_frontier``: run the study, write its CSVs and figure."""

import sys

from studies.slo_frontier.run import main

sys.exit(main())
