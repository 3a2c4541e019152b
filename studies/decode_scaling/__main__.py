"""``python -m studies.decode_scaling``: run the study, write its CSV and figure."""

import sys

from studies.decode_scaling.run import main

sys.exit(main())
