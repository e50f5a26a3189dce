"""Which conda channels fall under Anaconda's Terms of Service.

Since July 2025 conda refuses Anaconda's own channels (``defaults``: repo.anaconda.com's
pkgs/main and pkgs/r) in a non-interactive ``conda create``/``install`` until their terms are
accepted (``CondaToSNonInteractiveError``). A profile either names channels that need no
acceptance (conda-forge, pytorch, ...) or says it accepts the terms
(``python.conda.accept_tos``). Standard library only: planning imports it.
"""

from __future__ import annotations

from typing import Any

TOS_CHANNELS = ("defaults", "main", "r", "msys2", "pkgs/main", "pkgs/r", "pkgs/msys2")


def needs_tos(channel: str) -> bool:
    """Whether conda's use of ``channel`` falls under Anaconda's Terms of Service."""
    return channel in TOS_CHANNELS or "repo.anaconda.com" in channel


def tos_channels(python: Any) -> list[str]:
    """The channels a conda profile (``python``: its PythonStack, or a view of it) uses
    that need Anaconda's Terms of Service: of the frameworks' and the profile's channels,
    and where the profile names none, the installer's own (Miniforge: conda-forge, none;
    else conda's defaults)."""
    conda = python.conda
    extra = [f.channel for f in python.frameworks.values() if f.installer == "conda"
             and f.channel]
    if conda.channels:
        return list(dict.fromkeys(c for c in [*extra, *conda.channels] if needs_tos(c)))
    # none named: Miniconda's (setup's default, for the partitions' architecture)
    installer = (conda.installer_file or conda.installer_url or "Miniconda3.sh"
                 ).rsplit("/", 1)[-1].lower()
    return [c for c in extra if needs_tos(c)] + (
        [] if installer.startswith("miniforge") else ["defaults"])
