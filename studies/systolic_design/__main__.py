"""``python -m studies.systolic_design``: run the study, write its CSV and figures."""

import sys

from studies.systolic_design.run import main

sys.exit(main())
