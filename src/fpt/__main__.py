"""`python -m fpt ...` runs the `fpt` command."""

import sys

from fpt.cli import main

sys.exit(main())
