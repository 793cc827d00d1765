"""Durations (`45s`, `90m`, `5h`, `14d`) and end times (`06:30`, or a date and time) as the user writes them."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str | float) -> float:
    """Seconds; a bare number is seconds. Raises ValueError with the accepted forms."""
    if isinstance(text, int | float):
        if text <= 0:
            raise ValueError("a duration must be positive")
        return float(text)
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a duration such as 45s, 90m, 5h or 14d")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def parse_until(text: str, now: datetime | None = None) -> datetime:
    """The local end time: `HH:MM` is its next occurrence (a night started at 23:00 with 06:30 ends the next
    morning); a date and time (`2026-12-02T06:30`) must lie in the future."""
    now = now or datetime.now().astimezone()
    hour_minute = re.fullmatch(r"\s*(\d{1,2}):(\d{2})\s*", text)
    if hour_minute is not None:
        hour, minute = int(hour_minute.group(1)), int(hour_minute.group(2))
        if hour > 23 or minute > 59:
            raise ValueError(f"{text!r} is not a time of day (HH:MM)")
        end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        return end if end > now else end + timedelta(days=1)
    try:
        end = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is neither HH:MM nor a date and time such as 2026-12-02T06:30") from None
    end = end if end.tzinfo is not None else end.astimezone()
    if end <= now:
        raise ValueError(f"{text} is in the past")
    return end


def format_duration(seconds: float) -> str:
    """The way a person says it: 45s, 20m, 5h30m."""
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds}s"
    hours, minutes = divmod(seconds // 60, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m"
