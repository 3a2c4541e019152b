"""``python -m studies.av_perception``: run the study, write its CSVs and figures."""

import sys

from studies.av_perception.run import main

sys.exit(main())
