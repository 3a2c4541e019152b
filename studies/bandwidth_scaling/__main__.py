"""``python -m studies.bandwidth_scaling``: run the study, write its CSV and figure."""

import sys

from studies.bandwidth_scaling.run import main

sys.exit(main())
