"""``python -m studies.training_at_scale``: run the study, write its CSV and figure."""

import sys

from studies.training_at_scale.run import main

sys.exit(main())
