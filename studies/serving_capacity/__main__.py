"""``python -m studies.serving_capacity``: run the study, write its CSVs and figures."""

import sys

from studies.serving_capacity.run import main

sys.exit(main())
