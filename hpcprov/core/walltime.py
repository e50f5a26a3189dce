"""Wall-clock limits as schedulers write them ([D-]HH:MM:SS and shorter forms)."""

from __future__ import annotations

import re

# ASCII digits only (\d would take Arabic-Indic and other digits, which int() reads but no
# scheduler does), each field of bounded length (a 5000-digit field is no time, and int()
# refuses more than 4300 digits)
_TIME = re.compile(r"^(?:([0-9]{1,6})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?$")


def walltime_seconds(text: str) -> int | None:
    """Seconds in a Slurm/PBS time string (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])."""
    m = _TIME.match(text.strip())
    if not m:
        return None
    days, a, b, c = m.groups()
    nums = [int(x) for x in (a, b, c) if x is not None]
    if days is not None:
        hours, minutes, seconds = (nums + [0, 0])[:3]
    elif len(nums) == 3:
        hours, minutes, seconds = nums
    elif len(nums) == 2:
        hours, minutes, seconds = 0, nums[0], nums[1]
    else:
        hours, minutes, seconds = 0, nums[0], 0
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds
