"""Errors that the CLI turns into one line and exit status 2 (never a traceback), and the
warnings it prints as ``hpcprov: warning: ...`` (:func:`warn`)."""

from __future__ import annotations

import warnings


class HpcprovError(Exception):
    """A user-facing error: ``str()`` is one line that says what is wrong and how to fix it."""

    exit_code = 2


class ProfileError(HpcprovError):
    """A problem in a site profile, located by file and line."""

    def __init__(self, file: str, line: int, problem: str) -> None:
        self.file, self.line, self.problem = file, line, problem
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {problem}")


class UsageError(HpcprovError):
    """A wrong option or combination of options on the command line."""


class HpcprovWarning(UserWarning):
    """Something hpcprov works around but the user should fix (an ignored search-path entry,
    a host that matches several sites). The CLI prints each as one ``hpcprov: warning:``
    line, once per command; to library callers it is an ordinary Python warning."""


def warn(message: str) -> None:
    """Issue an :class:`HpcprovWarning` (one line: what is wrong and what to do)."""
    warnings.warn(message, HpcprovWarning, stacklevel=2)
