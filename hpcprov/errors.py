"""Errors that the CLI turns into one line and exit status 2 (never a traceback)."""

from __future__ import annotations


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
