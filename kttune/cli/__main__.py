"""`python -m kttune.cli`: the console script."""

import sys

from kttune.cli import main

if __name__ == "__main__":  # imported (every module is, by scripts/check_install.py): nothing runs
    sys.exit(main())
