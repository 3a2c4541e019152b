"""``python -m studies.parallelism``: run the study, write its CSVs and figures."""

import sys

from studies.parallelism.run import main

sys.exit(main())
