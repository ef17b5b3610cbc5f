"""`python -m solrl ...`: the `solrl` command line."""

import sys

from solrl.cli.main import main

sys.exit(main())
