"""Where a provisioned environment lives under its prefix, and how to activate it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpcprov.core.shell import Template, fragment, quote

if TYPE_CHECKING:
    from hpcprov.site.types import Site

ENV_TRUST = Path(__file__).with_name("env_trust.sh")  # the job's check of the prefix, a file


def expand_prefix(template: str, option: str = "--prefix DIR", what: str = "the prefix") -> str:
    """A path (the prefix, a run folder) as a path here: $VARS and ~ expanded; an unset
    variable is an error that names ``option``, the command's way to give another."""
    import os

    from hpcprov.core.errors import UsageError

    expanded = os.path.expandvars(os.path.expanduser(template))
    if "$" in expanded:
        raise UsageError(f"{what} {template} uses a variable that is not set here; set it or "
                         f"pass {option}")
    return os.path.abspath(expanded)


def manifest_file(prefix: Path) -> Path:
    """Where setup records a finished environment; its presence means "ready"."""
    return prefix / ".hpcprov" / "manifest.json"


def is_provisioned(prefix: Path) -> bool:
    """True where setup finished: the manifest is there (a regular file; a stat, never an
    open). provision.manifest reads it back, typed."""
    import stat

    try:
        return stat.S_ISREG(manifest_file(prefix).stat().st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class Layout:
    """Paths under an install prefix (templates: they may hold $VARS)."""

    site: Site
    prefix: str

    @classmethod
    def of(cls, site: Site, prefix: str | None = None) -> Layout:
        return cls(site, prefix or site.prefix())

    def _under(self, *parts: str) -> Template:
        return Template("/".join([self.prefix.rstrip("/"), *parts]))

    @property
    def conda_root(self) -> Template:
        return self._under("miniconda3")

    @property
    def env_dir(self) -> Template:
        py = self.site.python
        if py.backend == "conda" and py.conda.module:  # the site's conda: ours beside it
            return self._under("conda-envs", py.env_name)
        if py.backend == "conda":
            return self._under("miniconda3", "envs", py.env_name)
        return self._under("venvs", py.env_name)

    @property
    def downloads(self) -> Template:
        return self._under("downloads")

    @property
    def images(self) -> Template:
        return self._under("images")

    def pulled_image(self, name: str, suffix: str) -> Template:
        """Where setup pulls the image ``containers.images.NAME`` names by a registry
        reference, the file the jobs read (``suffix``: .sif, or enroot's .sqsh)."""
        return self._under("images", name + suffix)

    @property
    def activate_file(self) -> Template:
        return self._under("activate")

    @property
    def state_dir(self) -> Template:
        return self._under(".hpcprov")

    def activated_file(self) -> Template | None:
        """The file activating the Python environment sources (None: nothing to source)."""
        python = self.site.python
        if python.backend == "conda" and python.conda.module:
            return Template(self.env_dir)
        if python.backend == "conda":
            return Template(self.conda_root + "/etc/profile.d/conda.sh")
        if python.backend == "venv":
            return Template(self.env_dir + "/bin/activate")
        return None

    def environment_check(self) -> list[str]:
        """Lines that stop a job at once, with one message naming the prefix and the fix,
        when its Python environment is not there (never set up, or removed), or when
        someone else could change what the job would run from it (env_trust.sh: an entry
        others may write or own, a folder above it they could swap)."""
        path = self.activated_file()
        if path is None:
            return []
        fix = (f"hpcprov: no Python environment at {self.prefix} (set up with hpcprov setup "
               f"--site {self.site.name} --prefix {self.prefix}, then submit this job again)")
        return [f"[ -e {quote(path)} ] || {{ echo {quote(Template(fix))} >&2; exit 2; }}",
                f"hpcprov_env={quote(Template(self.prefix))}", *fragment(ENV_TRUST)]

    def python_activation(self) -> list[str]:
        """Shell lines that activate the Python environment (no modules)."""
        backend = self.site.python.backend
        if backend == "conda" and self.site.python.conda.module:  # loaded with the modules
            return ['eval "$(conda shell.bash hook)"',
                    f"conda activate {quote(self.env_dir)}"]
        if backend == "conda":
            return [
                f"source {quote(Template(self.conda_root + '/etc/profile.d/conda.sh'))}",
                f"conda activate {quote(self.site.python.env_name)}",
            ]
        if backend == "venv":
            return [f"source {quote(Template(self.env_dir + '/bin/activate'))}"]
        return []
