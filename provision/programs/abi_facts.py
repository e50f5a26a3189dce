"""Print the facts that decide whether a built Horovod wheel fits this environment.

Part of the wheelhouse key (the setup script's hpcprov_horovod_key runs this file in the
activated environment): Python's implementation, version and SOABI, the platform and libc,
and the versions of the frameworks Horovod links against. The output must stay the same
for the same facts: it is hashed into the key of every wheel already published.
"""

import platform
import sysconfig
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


def version(*names):
    """'NAME VERSION' of the first of these distributions installed, else 'none'."""
    for name in names:
        try:
            return name + " " + installed(name)
        except PackageNotFoundError:
            pass
    return "none"


print("python=" + platform.python_implementation() + " " + platform.python_version()
      + " " + str(sysconfig.get_config_var("SOABI")))
print("platform=" + platform.machine() + " " + " ".join(platform.libc_ver()))
print("torch=" + version("torch"))
print("tensorflow=" + version("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                              "tensorflow-intel"))
print("mxnet=" + version("mxnet"))
