"""`python -m isrwatch.cli`: the same command as `isrwatch` (the demo and tests start it this way)."""

import sys

from . import main

sys.exit(main())
