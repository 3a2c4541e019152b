"""``python -m studies.hetero_placement``: run the study, write its CSV and figure."""

import sys

from studies.hetero_placement.run import main

sys.exit(main())
