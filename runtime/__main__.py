"""`python -m unmask` is the same as the `unmask` command."""

import sys

from .cli import main

sys.exit(main())
