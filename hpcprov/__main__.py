"""``python -m hpcprov``: the command line (:mod:`hpcprov.app.cli`)."""

import sys

from hpcprov.app.cli import main

sys.exit(main())
