"""``python -m search.cli``: the ``trellis`` command."""

import sys

from .app import main

sys.exit(main())
