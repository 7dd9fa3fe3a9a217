"""Built-in toolkit `clock`: the current date and time, computed locally (nothing is sent out)."""

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def now(timezone: str = "") -> str:
    """The current date, weekday and time in an IANA timezone (the bot's own zone if empty)."""
    if timezone:
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown timezone {timezone!r}; use an IANA name such as Asia/Shanghai or Europe/Paris"
            ) from None
        moment = datetime.now(zone)
        label = timezone
    else:
        moment = datetime.now().astimezone()
        label = "the bot's local time"
    return moment.strftime(f"%Y-%m-%d %H:%M:%S %A ({label}, UTC%z)")
