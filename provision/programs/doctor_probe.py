"""`hpcprov doctor`'s probe inside the environment: framework versions and imports.

Run by doctor's probe script in the activated environment (`python - MODULE...`, this file
verbatim on stdin). Prints one line `python_json={...}`: the installed versions of the
frameworks and Horovod, and for each module named on the command line "ok" or the error
its import raised.
"""

import contextlib
import json
import sys

try:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed
except ImportError:  # Python < 3.8 has no importlib.metadata
    from pkg_resources import DistributionNotFound as PackageNotFoundError
    from pkg_resources import get_distribution

    def installed(name):
        """The version of an installed distribution (raises PackageNotFoundError)."""
        return get_distribution(name).version


out = {"versions": {}, "imports": {}}
for name in ("torch", "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "horovod"):
    with contextlib.suppress(PackageNotFoundError):
        out["versions"][name] = installed(name)
for mod in sys.argv[1:]:
    try:
        __import__(mod)
        out["imports"][mod] = "ok"
    except BaseException as exc:
        out["imports"][mod] = type(exc).__name__ + ": " + str(exc).splitlines()[0][:300]
print("python_json=" + json.dumps(out))
