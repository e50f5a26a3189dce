"""``python -m hpcprov``: the command line (:mod:`hpcprov.app.entry`)."""

import sys

from hpcprov.app.entry import main

sys.exit(main())
