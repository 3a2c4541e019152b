"""``python -m studies.precision_scaling``: run the study, write its CSV and figure."""

import sys

from studies.precision_scaling.run import main

sys.exit(main())
