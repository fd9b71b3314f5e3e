"""Values a conversation means but does not write, shown beside the words that mean them.

The ``nano`` base copies a value it read as one reference token (``training.value_refs``);
a value the turns only imply it would have to compute, which a model of a few million
parameters trained on a CPU does not learn. So, for the ``nano`` base's reading only:

- A date the user names as people do (``Wednesday, March 25``, or ``March 25``) is
  followed by the date it means, in parentheses (``(2026-03-25)``), the year taken from
  the system turn's "Today's date is ..." (the first such day on or after it). Without a
  stated today, or when a weekday is named and does not fit, nothing is added.
- A time of day written without the hour's leading zero is followed by the time as the
  tools write it (``9:00 (09:00)``), and every time of day by the time each of the
  user's stated offsets reaches from it: ``at 19:30, add a two-hour event`` reads
  ``at 19:30 (+2h 21:30)``, and after ``picks me up 30 minutes before it starts`` an
  event's ``"start": "19:00"`` in a tool's result reads ``"19:00 (-30m 18:30)"``. An
  offset is a number of hours (``two-hour``, ``for 3 hours``), or a number of minutes or
  hours followed by ``before`` or ``after``; minutes alone are a length (a 25-minute
  timer), not an offset. An offset applies to the times of the turn that states it and
  of every later user turn and tool result; a time it would carry past midnight or
  before it gets nothing.

Both depend only on the turns before (and the turn itself), so marking stays
prefix-consistent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date

_MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SPOKEN_DATE = re.compile(
    rf"\b(?:(?P<weekday>{'|'.join(_WEEKDAYS)}), )?(?P<month>{'|'.join(_MONTHS)}) "
    r"(?P<day>\d{1,2})\b"
)
"""A date as the goals say it: ``Wednesday, March 25``, or ``March 25``."""
TODAY = re.compile(r"Today's date is (\d{4})-(\d{2})-(\d{2})")
"""How a policy's system turn states the day (``agents.policies.chat_format``)."""
_COUNTS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")
OFFSET = re.compile(
    rf"\b(?P<count>\d{{1,3}}|{'|'.join(_COUNTS)})[- ](?P<unit>hour|minute)s?\b"
    r"(?: (?P<side>before|after)\b)?",
    re.IGNORECASE,
)
"""A number of hours or minutes, and whether it is before or after a time (module
docstring: which of them are offsets)."""
TIME_OF_DAY = re.compile(r"(?<![\w.:+-])(?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)(?![\w:]|\.\d)")
"""A time of day standing alone (``9:00``, ``19:30``), not inside a timestamp."""
_DAY = 24 * 60


def stated_today(text: str) -> date | None:
    """The day a system turn states as today's, if it states one."""
    found = TODAY.search(text)
    if found is None:
        return None
    try:
        return date(*(int(part) for part in found.groups()))
    except ValueError:
        return None


def with_dates_meant(text: str, today: date | None) -> str:
    """``text`` with each spoken date followed by the ISO date it means (module
    docstring); unchanged without ``today``."""
    if today is None:
        return text

    def meant(match: re.Match[str]) -> str:
        day = _first_on_or_after(today, _MONTHS.index(match["month"]) + 1, int(match["day"]))
        named = match["weekday"]
        if day is None or (named is not None and _WEEKDAYS[day.weekday()] != named):
            return match.group(0)
        return f"{match.group(0)} ({day.isoformat()})"

    return SPOKEN_DATE.sub(meant, text)


def _first_on_or_after(today: date, month: int, day: int) -> date | None:
    for year in (today.year, today.year + 1):
        try:
            candidate = date(year, month, day)
        except ValueError:
            continue
        if candidate >= today:
            return candidate
    return None


def stated_offsets(text: str) -> list[int]:
    """The offsets in minutes that ``text`` states, in order, each once (module
    docstring): ``two-hour`` is 120, ``30 minutes before`` is -30."""
    offsets: list[int] = []
    for found in OFFSET.finditer(text):
        count = found["count"].lower()
        amount = int(count) if count.isdigit() else _COUNTS.index(count) + 1
        unit, side = found["unit"].lower(), (found["side"] or "").lower()
        if unit == "minute" and not side:
            continue
        offset = amount * (60 if unit == "hour" else 1) * (-1 if side == "before" else 1)
        if offset and offset not in offsets:
            offsets.append(offset)
    return offsets


def with_times_meant(text: str, offsets: Iterable[int]) -> str:
    """``text`` with each time of day followed by the time as the tools write it when it is
    written without the hour's leading zero (``9:00 (09:00)``), and by the time each offset
    reaches from it (``19:30 (+2h 21:30)``), those that stay within the day."""
    offsets = tuple(offsets)

    def meant(match: re.Match[str]) -> str:
        start = int(match["hour"]) * 60 + int(match["minute"])
        shown = [match.group(0)]
        if len(match["hour"]) == 1:
            shown.append(f"({_clock(start)})")
        shown += [
            f"({_spoken(offset)} {_clock(start + offset)})"
            for offset in offsets
            if 0 <= start + offset < _DAY
        ]
        return " ".join(shown)

    return TIME_OF_DAY.sub(meant, text)


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _spoken(offset: int) -> str:
    sign = "+" if offset > 0 else "-"
    return f"{sign}{abs(offset) // 60}h" if offset % 60 == 0 else f"{sign}{abs(offset)}m"
