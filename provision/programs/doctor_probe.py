"""`hpcprov doctor`'s probe inside the environment: versions, imports, the Horovod wheel.

Run by doctor's probe script in the activated environment (`python - [--wheel WHEEL]
MODULE...`, this file verbatim on stdin). Prints one line `python_json={...}`: the
installed versions of the frameworks and Horovod; for each module named on the command line
"ok" or the error its import raised; and with --wheel, the SHA-256 of WHEEL (the copy setup
installed, kept in PREFIX/.hpcprov/horovod-wheel) and the installed Horovod files that
differ from the ones that wheel holds (its RECORD's hashes).
"""

import base64
import contextlib
import csv
import hashlib
import io
import json
import os
import sys
import zipfile
from collections.abc import Callable

# the same names whichever Python runs this file (a type checker reads both branches)
PackageNotFoundError: "type[Exception]"
installed: "Callable[[str], str]"
try:
    from importlib import metadata

    PackageNotFoundError = metadata.PackageNotFoundError
    installed = metadata.version
except ImportError:  # Python < 3.8 has no importlib.metadata
    import pkg_resources

    PackageNotFoundError = pkg_resources.DistributionNotFound

    def installed(name):
        """The version of an installed distribution (raises PackageNotFoundError)."""
        return pkg_resources.get_distribution(name).version

    def site_of(name):
        """The folder a distribution is installed in (raises PackageNotFoundError)."""
        return pkg_resources.get_distribution(name).location
else:
    def site_of(name):
        """The folder a distribution is installed in (raises PackageNotFoundError)."""
        return str(metadata.distribution(name).locate_file(""))


def sha256(path):
    """The hash object of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h


def record_of(wheel):
    """(path, urlsafe base64 SHA-256) of each file the wheel installs as it is."""
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        rows = list(csv.reader(io.StringIO(zf.read(name).decode("utf-8"))))
    return [(row[0], row[1][len("sha256="):]) for row in rows
            if len(row) > 1 and row[1].startswith("sha256=")
            and not row[0].split("/")[0].endswith(".data")]  # scripts are rewritten


def wheel_facts(wheel):
    """The wheel's SHA-256, and the installed files that differ from its RECORD."""
    try:
        facts = {"sha256": sha256(wheel).hexdigest()}
        site = site_of("horovod")
        records = record_of(wheel)
    except (OSError, ValueError, StopIteration, zipfile.BadZipFile,
            PackageNotFoundError) as exc:
        return {"error": type(exc).__name__ + ": " + str(exc)[:300]}
    changed = []
    for path, want in records:
        full = os.path.join(site, path)
        try:
            got = base64.urlsafe_b64encode(sha256(full).digest()).rstrip(b"=").decode()
        except OSError:
            got = None
        if got != want:
            changed.append(path)
    facts.update(checked=len(records), changed=changed)
    return facts


args = sys.argv[1:]
out: "dict[str, dict[str, object]]" = {"versions": {}, "imports": {}}
if args[:1] == ["--wheel"]:
    out["wheel"] = wheel_facts(args[1])
    args = args[2:]
for name in ("torch", "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "horovod"):
    with contextlib.suppress(PackageNotFoundError):
        out["versions"][name] = installed(name)
for mod in args:
    try:
        __import__(mod)
        out["imports"][mod] = "ok"
    except BaseException as exc:
        out["imports"][mod] = type(exc).__name__ + ": " + str(exc).splitlines()[0][:300]
print("python_json=" + json.dumps(out))
