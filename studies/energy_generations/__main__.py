"""``python -m studies.energy_generations``: run the study, write its CSV and figure."""

import sys

from studies.energy_generations.run import main

sys.exit(main())
