"""Import each framework an image should hold and say which version it has: the check of an
image with the frameworks only (horovod.source: none).

Usage: python - MODULE... with this file on standard input (e.g. torch), so that the image
need not see the host's files; runs in the image's Python, which may be old: no newer syntax
than 3.6.
"""

import importlib
import sys


def main(argv):
    for name in argv:
        module = importlib.import_module(name)
        print("hpcprov:", name, getattr(module, "__version__", "(no version)"))
    print("hpcprov: the frameworks import")


if __name__ == "__main__":
    main(sys.argv[1:])
