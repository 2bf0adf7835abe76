"""`python -m hf_heuristic_core.cli ...` runs the `hf-heuristic-core` command."""

import sys

from . import main

sys.exit(main())
