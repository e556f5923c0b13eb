"""``python -m server.cli``: the ``harness`` command."""

import sys

from .main import main

sys.exit(main())
