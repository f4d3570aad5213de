"""`python -m kttune.cli`: the console script."""

import sys

from kttune.cli import main

sys.exit(main())
