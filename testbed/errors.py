"""The one exception the testbed raises."""

from __future__ import annotations


class TestbedError(RuntimeError):
    """A testbed operation failed; the message is one line meant for people."""

    __test__ = False  # not a pytest test class
