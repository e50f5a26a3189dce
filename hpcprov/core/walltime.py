"""Wall-clock limits as schedulers write them ([D-]HH:MM:SS and shorter forms)."""

from __future__ import annotations

import re

# ASCII digits only (\d would take Arabic-Indic and other digits, which int() reads but no
# scheduler does), each field of bounded length (a 5000-digit field is no time, and int()
# refuses more than 4300 digits)
_TIME = r"^(?:([0-9]{1,6})-)?([0-9]{1,9})(?::([0-9]{1,9}))?(?::([0-9]{1,9}))?$"


def walltime_seconds(text: str) -> int | None:
    """Seconds in a Slurm/PBS time string (MM, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])."""
    m = re.match(_TIME, text.strip())
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


def hours_minutes_seconds(text: str) -> str:
    """A limit as ``HH:MM:SS`` with the hours running past 24 (``7-00:00:00`` is
    ``168:00:00``): what PBS reads (it takes no days, and a bare number as seconds). A value
    already in that form, or no time at all, is left as it is."""
    if re.fullmatch(r"[0-9]+:[0-9]{2}:[0-9]{2}", text.strip()):
        return text
    seconds = walltime_seconds(text)
    if seconds is None:
        return text
    return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
