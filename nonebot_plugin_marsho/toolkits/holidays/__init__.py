"""Built-in toolkit `holidays`: public holidays of a country, from Nager.Date (keyless).

Off until the owner enables it (`MARSHO_ENABLED_TOOLKITS=["holidays"]`): the country code
(and the year) the model asks about are sent to Nager.Date's API at date.nager.at. The base URL
is a preset, so a self-hosted Nager.Date (`docker run nagerat/nager-date`) or a test fake can
stand in::

    MARSHO_TOOLKIT_SETTINGS={"holidays": {"base_url": "http://127.0.0.1:8080"}}
"""

from __future__ import annotations

import functools
import re
import ssl
from datetime import date
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

BASE_URL = "https://date.nager.at"
TIMEOUT = 10.0
USER_AGENT = "nonebot-plugin-marsho (holidays toolkit)"
MAX_REGIONS = 6
"""Regions listed for a regional holiday before '+N more'."""

COUNTRY_CODE = re.compile(r"^[A-Za-z]{2}$")
ALIASES = {"UK": "GB"}
"""Codes people use that ISO 3166-1 spells otherwise."""

tools = Toolbox()


class HolidayError(Exception):
    """A failure worded for the model to relay."""


class _NoData(Exception):
    """Nager.Date answered 404 or 204: unknown country, or no data."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


def _problem(response: httpx.Response) -> str:
    """Nager.Date (ASP.NET) errors are ProblemDetails: {"title", "status", "errors": {...}}."""
    try:
        data = response.json()
    except ValueError:
        return response.text.strip()[:200] or "(empty body)"
    if isinstance(data, dict):
        parts = [str(data.get("title") or data.get("message") or "")]
        errors = data.get("errors")
        if isinstance(errors, dict):
            parts += [f"{field}: {' '.join(map(str, messages)) if isinstance(messages, list) else messages}"
                      for field, messages in errors.items()]
        text = "; ".join(part for part in parts if part)
        if text:
            return text
    return str(data)[:200]


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for all calls: building one (reading the CA bundle) takes ~30 ms."""
    return httpx.create_ssl_context()


def _client(timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=True,
                             headers={"User-Agent": USER_AGENT})


async def _get_json(base_url: str, path: str, *, timeout: float) -> Any:
    """GET a Nager.Date path: its JSON, _NoData for 404/204, else a HolidayError saying why."""
    url = base_url.rstrip("/") + path
    host = urlsplit(url).netloc or url
    try:
        async with _client(timeout) as client:
            response = await client.get(url)
    except httpx.TimeoutException:
        raise HolidayError(
            f"Nager.Date ({host}) did not answer within {timeout:g} s; try again later"
        ) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
        raise HolidayError(f"the configured Nager.Date address is invalid ({error}); "
                           "the bot owner must fix MARSHO_TOOLKIT_SETTINGS") from None
    except httpx.HTTPError as error:
        detail = str(error) or type(error).__name__
        raise HolidayError(f"could not reach Nager.Date ({host}): {detail}") from None
    if response.status_code in (204, 404):
        raise _NoData(response.status_code)
    if response.status_code >= 400:
        raise HolidayError(
            f"Nager.Date answered HTTP {response.status_code} {response.reason_phrase}: "
            f"{_problem(response)}"
        )
    try:
        return response.json()
    except ValueError:
        snippet = response.text.strip()[:80]
        raise HolidayError(
            f"Nager.Date ({host}) answered HTTP {response.status_code} with something that is "
            f"not JSON: {snippet!r}"
        ) from None


async def _holidays(
    base_url: str, path: str, code: str, timeout: float, *, empty: str
) -> list[dict[str, Any]]:
    """The holidays at a Nager.Date path; 204 → `empty`, 404 → an unknown country code."""
    try:
        data = await _get_json(base_url, path, timeout=timeout)
    except _NoData as missing:
        if missing.status == 204:
            raise HolidayError(empty) from None
        raise HolidayError(
            f"Nager.Date does not know the country code {code!r} (or has no data for it); "
            "check that it is an ISO 3166-1 alpha-2 code (GB, not UK) of a supported country"
        ) from None
    return _holiday_list(data)


async def _country_code(country: str, base_url: str, timeout: float) -> str:
    """An ISO 3166-1 alpha-2 code from a code or an English country name."""
    text = country.strip()
    if COUNTRY_CODE.match(text):
        code = text.upper()
        return ALIASES.get(code, code)
    if not text:
        raise HolidayError("no country given: pass an ISO 3166-1 alpha-2 code such as CN, US or DE")
    try:
        countries = await _get_json(base_url, "/api/v3/AvailableCountries", timeout=timeout)
    except _NoData:
        countries = []
    if isinstance(countries, list):
        wanted = text.casefold()
        for item in countries:
            if isinstance(item, dict) and str(item.get("name", "")).casefold() == wanted:
                return str(item.get("countryCode", "")).upper()
    raise HolidayError(
        f"{text!r} is not a two-letter ISO 3166-1 country code, nor a country Nager.Date "
        "lists by that name; pass a code such as CN, US, DE or JP"
    )


def _line(holiday: dict[str, Any], today: date | None = None) -> str:
    """'2025-10-03 Fri  German Unity Day (Tag der Deutschen Einheit)'."""
    day = str(holiday.get("date", "?"))
    try:
        moment: date | None = date.fromisoformat(day)
    except ValueError:
        moment = None
    name = str(holiday.get("name") or holiday.get("localName") or "?")
    local = holiday.get("localName")
    text = f"{day} {moment.strftime('%a') if moment else ''}  {name}"
    if local and local != name:
        text += f" ({local})"
    types = [t for t in holiday.get("types") or [] if t != "Public"]
    if types:
        text += f" [{', '.join(map(str, types))}]"
    regions = holiday.get("counties")
    if holiday.get("global") is False and isinstance(regions, list) and regions:
        shown = ", ".join(map(str, regions[:MAX_REGIONS]))
        more = f" +{len(regions) - MAX_REGIONS} more" if len(regions) > MAX_REGIONS else ""
        text += f" — only in {shown}{more}"
    if today is not None and moment is not None:
        delta = (moment - today).days
        text += " — today" if delta == 0 else f" — in {delta} day{'s' if delta != 1 else ''}"
    return text


def _holiday_list(data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise HolidayError("Nager.Date answered in an unexpected shape (not a list of holidays)")
    return [item for item in data if isinstance(item, dict)]


SOURCE = "Source: Nager.Date (date.nager.at)"


@tools.tool(base_url=BASE_URL, timeout=TIMEOUT)
async def public_holidays(
    country: str, year: int | None = None, base_url: str = BASE_URL, timeout: float = TIMEOUT
) -> str | ToolResponse:
    """List a country's public holidays in a year (from Nager.Date, about 120 countries).

    Regional holidays say where they apply. The country and year are sent to Nager.Date.

    Args:
        country: ISO 3166-1 alpha-2 country code such as CN, US, DE or JP (an English country
            name also works).
        year: The year, e.g. 2025; the current year if omitted.
        base_url: Base URL of the Nager.Date API (set by the bot owner).
        timeout: Seconds to wait for the answer (set by the bot owner).
    """
    year = date.today().year if year is None else year
    if not 1 <= year <= 9999:
        return ToolResponse.error(f"year {year} is out of range; give a year such as {date.today().year}")
    try:
        code = await _country_code(country, base_url, timeout)
        holidays = await _holidays(
            base_url, f"/api/v3/PublicHolidays/{year}/{quote(code)}", code, timeout,
            empty=f"Nager.Date has no holiday data for {code} in {year}",
        )
    except HolidayError as error:
        return ToolResponse.error(str(error))
    if not holidays:
        return f"Nager.Date lists no public holidays for {code} in {year}.\n{SOURCE}"
    lines = [f"Public holidays in {code}, {year} ({len(holidays)}):"]
    lines += [_line(holiday) for holiday in holidays]
    lines.append(SOURCE)
    return "\n".join(lines)


@tools.tool(base_url=BASE_URL, timeout=TIMEOUT)
async def next_holidays(
    country: str, limit: int = 10, base_url: str = BASE_URL, timeout: float = TIMEOUT
) -> str | ToolResponse:
    """List a country's upcoming public holidays within the next 365 days (from Nager.Date).

    Each says how many days away it is. The country is sent to Nager.Date.

    Args:
        country: ISO 3166-1 alpha-2 country code such as CN, US, DE or JP (an English country
            name also works).
        limit: At most how many holidays to list, soonest first.
        base_url: Base URL of the Nager.Date API (set by the bot owner).
        timeout: Seconds to wait for the answer (set by the bot owner).
    """
    if limit < 1:
        return ToolResponse.error(f"limit must be at least 1 (got {limit})")
    try:
        code = await _country_code(country, base_url, timeout)
        holidays = await _holidays(
            base_url, f"/api/v3/NextPublicHolidays/{quote(code)}", code, timeout,
            empty=f"Nager.Date lists no upcoming public holidays for {code}",
        )
    except HolidayError as error:
        return ToolResponse.error(str(error))
    today = date.today()
    if not holidays:
        return f"Nager.Date lists no public holidays for {code} in the next 365 days.\n{SOURCE}"
    shown = holidays[:limit]
    more = f", the first {len(shown)} of {len(holidays)}" if len(holidays) > len(shown) else ""
    lines = [f"Upcoming public holidays in {code} (today is {today.isoformat()}{more}):"]
    lines += [_line(holiday, today) for holiday in shown]
    lines.append(SOURCE)
    return "\n".join(lines)
