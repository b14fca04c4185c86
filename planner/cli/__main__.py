"""`python -m planner.cli ...` is `planner ...`."""

import sys

from planner.cli.main import main

sys.exit(main())
