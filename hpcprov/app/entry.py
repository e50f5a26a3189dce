"""The command line's entry point: the ``hpcprov`` script and ``python -m hpcprov``.

Starting a command imports about 150 modules (click, the site's classes, the
schedulers, the job builders). Their objects make Python's cyclic garbage collector run
some 40 times before the command begins, over objects that all live until the process
ends: about 3 ms of every start (docs/performance.md). So the entry point imports the
command line with the collector paused, then freezes what the imports made
(:func:`gc.freeze`: later collections skip it, none has to walk it) and starts the
collector again. The command itself runs with the collector as usual. A program that
imports :mod:`hpcprov.app.cli` as a library is not affected.
"""

import gc
import sys


def main(argv: list[str] | None = None) -> int:
    """Run one command (:func:`hpcprov.app.cli.main`)."""
    if "hpcprov.app.cli" not in sys.modules:  # a fresh process: pause for the imports
        gc.disable()
        try:
            from hpcprov.app.cli import main as run
        finally:
            gc.freeze()
            gc.enable()
    else:
        from hpcprov.app.cli import main as run
    return run(argv)
