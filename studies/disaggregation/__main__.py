"""``python -m studies.disaggregation``: run the study, write its CSVs and figure."""

import sys

from studies.disaggregation.run import main

sys.exit(main())
