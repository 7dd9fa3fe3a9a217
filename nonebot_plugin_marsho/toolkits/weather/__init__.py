"""Built-in toolkit `weather`: current weather and daily forecasts from Open-Meteo (keyless).

Off until the owner enables it (`MARSHO_ENABLED_TOOLKITS=["weather"]`): the place name the
model passes is sent to Open-Meteo's geocoding API (geocoding-api.open-meteo.com), and the
place's coordinates to its forecast API (api.open-meteo.com). Both base URLs are presets,
so a self-hosted Open-Meteo or a test fake can stand in::

    MARSHO_TOOLKIT_SETTINGS={"weather": {"geocoding_url": "http://127.0.0.1:8080",
                                         "forecast_url": "http://127.0.0.1:8080"}}

`api_key` (Open-Meteo's commercial `customer-*` hosts) and `timeout` (seconds) are presets too.
"""

from __future__ import annotations

import functools
import re
import ssl
from datetime import date
from typing import Any, Literal
from urllib.parse import urlsplit

import httpx

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

GEOCODING_URL = "https://geocoding-api.open-meteo.com"
FORECAST_URL = "https://api.open-meteo.com"
TIMEOUT = 10.0
USER_AGENT = "nonebot-plugin-marsho (weather toolkit)"
MAX_DAYS = 16
"""Open-Meteo forecasts at most 16 days ahead."""

tools = Toolbox()

Units = Literal["metric", "imperial"]

WEATHER_CODES = {
    0: "clear sky", 1: "mainly clear", 2: "partly cloudy", 3: "overcast",
    45: "fog", 48: "depositing rime fog",
    51: "light drizzle", 53: "moderate drizzle", 55: "dense drizzle",
    56: "light freezing drizzle", 57: "dense freezing drizzle",
    61: "slight rain", 63: "moderate rain", 65: "heavy rain",
    66: "light freezing rain", 67: "heavy freezing rain",
    71: "slight snowfall", 73: "moderate snowfall", 75: "heavy snowfall", 77: "snow grains",
    80: "slight rain showers", 81: "moderate rain showers", 82: "violent rain showers",
    85: "slight snow showers", 86: "heavy snow showers",
    95: "thunderstorm", 96: "thunderstorm with slight hail", 99: "thunderstorm with heavy hail",
}
"""WMO weather interpretation codes, as Open-Meteo documents them."""

COMPASS = ["N", "NNE", "NE", "ENE", "E", "ESE", "SE", "SSE",
           "S", "SSW", "SW", "WSW", "W", "WNW", "NW", "NNW"]

COORDINATES = re.compile(r"^\s*(-?\d{1,2}(?:\.\d+)?)\s*[,\s]\s*(-?\d{1,3}(?:\.\d+)?)\s*$")

CURRENT_VARIABLES = (
    "temperature_2m,relative_humidity_2m,apparent_temperature,is_day,precipitation,"
    "weather_code,cloud_cover,wind_speed_10m,wind_direction_10m,wind_gusts_10m"
)
TODAY_VARIABLES = (
    "temperature_2m_max,temperature_2m_min,precipitation_sum,precipitation_probability_max,"
    "sunrise,sunset"
)
FORECAST_VARIABLES = (
    "weather_code,temperature_2m_max,temperature_2m_min,apparent_temperature_max,"
    "apparent_temperature_min,precipitation_sum,precipitation_probability_max,"
    "wind_speed_10m_max,wind_gusts_10m_max,wind_direction_10m_dominant,uv_index_max"
)


class WeatherError(Exception):
    """A failure worded for the model to relay."""


# --- HTTP ----------------------------------------------------------------------------------------


def _endpoint(base: str, path: str) -> str:
    """`base` + `path`, unless the owner configured the full endpoint already."""
    base = base.rstrip("/")
    return base if base.endswith(path) else base + path


def _api_reason(response: httpx.Response) -> str:
    """Open-Meteo's error body is {"error": true, "reason": "..."}; else the start of the text."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("reason"):
        return str(data["reason"])
    return response.text.strip()[:200] or "(empty body)"


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for all calls: building one (reading the CA bundle) takes ~30 ms."""
    return httpx.create_ssl_context()


def _client(timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=True,
                             headers={"User-Agent": USER_AGENT})


async def _get_json(
    client: httpx.AsyncClient, url: str, params: dict[str, Any], *, service: str, timeout: float
) -> Any:
    """GET `url` and return its JSON; every failure becomes a WeatherError saying what happened."""
    host = urlsplit(url).netloc or url
    try:
        response = await client.get(url, params=params)
    except httpx.TimeoutException:
        raise WeatherError(
            f"{service} ({host}) did not answer within {timeout:g} s; try again later"
        ) from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
        raise WeatherError(f"the configured {service} address is invalid ({error}); "
                           "the bot owner must fix MARSHO_TOOLKIT_SETTINGS") from None
    except httpx.HTTPError as error:
        detail = str(error) or type(error).__name__
        raise WeatherError(f"could not reach {service} ({host}): {detail}") from None
    if response.status_code >= 400:
        raise WeatherError(
            f"{service} answered HTTP {response.status_code} "
            f"{response.reason_phrase}: {_api_reason(response)}"
        )
    try:
        data = response.json()
    except ValueError:
        snippet = response.text.strip()[:80]
        raise WeatherError(
            f"{service} ({host}) answered HTTP {response.status_code} with something that is "
            f"not JSON: {snippet!r}"
        ) from None
    if isinstance(data, dict) and data.get("error") is True:  # an error body with status 200
        raise WeatherError(f"{service} refused the request: {data.get('reason') or data}")
    return data


# --- places --------------------------------------------------------------------------------------


def _label(place: dict[str, Any]) -> str:
    """'Berlin (Land Berlin, Germany)'."""
    name = str(place.get("name") or "?")
    extra = [str(place[key]) for key in ("admin1", "country") if place.get(key)]
    extra = [part for i, part in enumerate(extra) if part != name and part not in extra[:i]]
    return f"{name} ({', '.join(extra)})" if extra else name


def _matches(place: dict[str, Any], qualifier: str) -> bool:
    wanted = qualifier.casefold()
    fields = ("country", "country_code", "admin1", "admin2", "admin3", "admin4")
    return any(str(place.get(key) or "").casefold() == wanted for key in fields)


async def _resolve(
    client: httpx.AsyncClient, place: str, language: str, *, geocoding_url: str, api_key: str,
    timeout: float,
) -> dict[str, Any]:
    """The place as {name, country, admin1, latitude, longitude, ...}, or a WeatherError."""
    text = place.strip()
    if not text:
        raise WeatherError("no place given: say which city, town or coordinates to look up")
    found = COORDINATES.match(text)
    if found:
        latitude, longitude = float(found.group(1)), float(found.group(2))
        if not (-90 <= latitude <= 90 and -180 <= longitude <= 180):
            raise WeatherError(f"{text!r} are not valid coordinates: latitude must be within "
                               "-90..90 and longitude within -180..180")
        return {"name": f"{latitude:.4g}, {longitude:.4g}", "latitude": latitude,
                "longitude": longitude}
    # Open-Meteo searches one name: "Paris, Texas" → search "Paris", prefer the Texan one
    name, _, qualifier = (part.strip() for part in text.partition(","))
    params: dict[str, Any] = {
        "name": name, "count": 10 if qualifier else 1, "language": language, "format": "json",
    }
    if api_key:
        params["apikey"] = api_key
    data = await _get_json(client, _endpoint(geocoding_url, "/v1/search"), params,
                           service="Open-Meteo geocoding", timeout=timeout)
    if not isinstance(data, dict):
        raise WeatherError("Open-Meteo geocoding answered in an unexpected shape (not an object)")
    results = [r for r in data.get("results") or [] if isinstance(r, dict)]
    if not results:
        raise WeatherError(
            f"Open-Meteo knows no place named {name!r}. Try another spelling, the English name, "
            "a larger town nearby, or coordinates such as '39.90, 116.40'"
        )
    chosen = next((r for r in results if qualifier and _matches(r, qualifier)), results[0])
    if "latitude" not in chosen or "longitude" not in chosen:
        raise WeatherError("Open-Meteo geocoding answered a place without coordinates")
    if qualifier and not _matches(chosen, qualifier):
        chosen = {**chosen, "_note": f"no {name!r} in {qualifier!r} was found; this is the "
                  "best match for the name alone"}
    return chosen


# --- formatting ----------------------------------------------------------------------------------


def _describe(code: Any) -> str:
    try:
        return WEATHER_CODES.get(int(code), f"weather code {code}")
    except (TypeError, ValueError):
        return "unknown conditions"


def _compass(degrees: Any) -> str:
    try:
        return COMPASS[round(float(degrees) / 22.5) % 16]
    except (TypeError, ValueError):
        return ""


def _number(value: Any, unit: str = "", digits: int = 1) -> str:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return "?"
    text = f"{value:.{digits}f}"
    if unit in ("", "%"):
        return f"{text}{unit}"
    return f"{text} {unit}"


def _unit(units: Any, key: str, fallback: str) -> str:
    return str(units.get(key) or fallback) if isinstance(units, dict) else fallback


def _at(values: Any, index: int) -> Any:
    return values[index] if isinstance(values, list) and index < len(values) else None


def _weekday(day: Any) -> str:
    try:
        return date.fromisoformat(str(day)).strftime("%a")
    except ValueError:
        return ""


def _clock(moment: Any) -> str:
    """'05:48' from '2024-05-01T05:48'."""
    text = str(moment or "")
    return text.partition("T")[2][:5] or text


def _heading(place: dict[str, Any], data: dict[str, Any]) -> str:
    latitude, longitude = place.get("latitude"), place.get("longitude")
    where = _label(place)
    if isinstance(latitude, (int, float)) and isinstance(longitude, (int, float)):
        where += f" at {abs(latitude):.2f}°{'N' if latitude >= 0 else 'S'}, " \
                 f"{abs(longitude):.2f}°{'E' if longitude >= 0 else 'W'}"
    zone = data.get("timezone")
    if zone:
        where += f", timezone {zone}"
    if place.get("_note"):
        where += f" (note: {place['_note']})"
    return where


def _unit_params(units: Units) -> dict[str, str]:
    if units == "imperial":
        return {"temperature_unit": "fahrenheit", "wind_speed_unit": "mph", "precipitation_unit": "inch"}
    return {}


def _language(language: str) -> str:
    code = language.strip().lower()[:2]
    return code if code.isascii() and code.isalpha() and len(code) == 2 else "en"


# --- tools ---------------------------------------------------------------------------------------


@tools.tool(geocoding_url=GEOCODING_URL, forecast_url=FORECAST_URL, api_key="", timeout=TIMEOUT)
async def now(
    place: str,
    language: str = "en",
    units: Units = "metric",
    geocoding_url: str = GEOCODING_URL,
    forecast_url: str = FORECAST_URL,
    api_key: str = "",
    timeout: float = TIMEOUT,
) -> str | ToolResponse:
    """Get the current weather of a place, with today's high and low (from Open-Meteo).

    The place name is sent to Open-Meteo to be found; only use it when the user asks about the
    weather.

    Args:
        place: City, town or district, optionally with its country or region after a comma
            ("Paris, France", "Springfield, Illinois"), or coordinates "latitude, longitude".
        language: Two-letter language code for place names in the answer, e.g. en or zh.
        units: metric (°C, km/h, mm) or imperial (°F, mph, inch).
        geocoding_url: Base URL of Open-Meteo's geocoding API (set by the bot owner).
        forecast_url: Base URL of Open-Meteo's forecast API (set by the bot owner).
        api_key: Open-Meteo commercial API key, if any (set by the bot owner).
        timeout: Seconds to wait for each answer (set by the bot owner).
    """
    try:
        async with _client(timeout) as client:
            found = await _resolve(client, place, _language(language), geocoding_url=geocoding_url,
                                   api_key=api_key, timeout=timeout)
            params: dict[str, Any] = {
                "latitude": found["latitude"], "longitude": found["longitude"],
                "current": CURRENT_VARIABLES, "daily": TODAY_VARIABLES,
                "timezone": "auto", "forecast_days": 1, **_unit_params(units),
            }
            if api_key:
                params["apikey"] = api_key
            data = await _get_json(client, _endpoint(forecast_url, "/v1/forecast"), params,
                                   service="Open-Meteo forecast", timeout=timeout)
        current = data.get("current") if isinstance(data, dict) else None
        if not isinstance(current, dict):
            raise WeatherError("Open-Meteo forecast answered without current weather")
    except WeatherError as error:
        return ToolResponse.error(str(error))
    cu = data.get("current_units") or {}
    temp_unit = _unit(cu, "temperature_2m", "°C")
    wind_unit = _unit(cu, "wind_speed_10m", "km/h")
    lines = [_heading(found, data)]
    now_parts = [
        _describe(current.get("weather_code")),
        f"{_number(current.get('temperature_2m'), temp_unit)} "
        f"(feels like {_number(current.get('apparent_temperature'), temp_unit)})",
    ]
    if current.get("relative_humidity_2m") is not None:
        now_parts.append(f"humidity {_number(current['relative_humidity_2m'], '%', 0)}")
    if current.get("wind_speed_10m") is not None:
        wind = f"wind {_number(current['wind_speed_10m'], wind_unit)}"
        direction = _compass(current.get("wind_direction_10m"))
        wind += f" from {direction}" if direction else ""
        if current.get("wind_gusts_10m") is not None:
            wind += f" (gusts {_number(current['wind_gusts_10m'], _unit(cu, 'wind_gusts_10m', wind_unit))})"
        now_parts.append(wind)
    if current.get("precipitation") is not None:
        rain_unit = _unit(cu, "precipitation", "mm")
        now_parts.append(f"precipitation {_number(current['precipitation'], rain_unit)}")
    if current.get("cloud_cover") is not None:
        now_parts.append(f"cloud cover {_number(current['cloud_cover'], '%', 0)}")
    if current.get("is_day") == 0:
        now_parts.append("night")
    lines.append(f"Now ({str(current.get('time', '')).replace('T', ' ')} local): " + ", ".join(now_parts))
    daily = data.get("daily")
    if isinstance(daily, dict):
        du = data.get("daily_units") or {}
        low, high = _at(daily.get("temperature_2m_min"), 0), _at(daily.get("temperature_2m_max"), 0)
        today = [f"{_number(low)} to {_number(high, _unit(du, 'temperature_2m_max', temp_unit))}"]
        rain = _at(daily.get("precipitation_sum"), 0)
        if rain is not None:
            text = f"precipitation {_number(rain, _unit(du, 'precipitation_sum', 'mm'))}"
            chance = _at(daily.get("precipitation_probability_max"), 0)
            today.append(text + (f" (chance {_number(chance, '%', 0)})" if chance is not None else ""))
        sunrise, sunset = _at(daily.get("sunrise"), 0), _at(daily.get("sunset"), 0)
        if sunrise and sunset:
            today.append(f"sunrise {_clock(sunrise)}, sunset {_clock(sunset)}")
        lines.append("Today: " + ", ".join(today))
    lines.append("Source: Open-Meteo.com")
    return "\n".join(lines)


@tools.tool(geocoding_url=GEOCODING_URL, forecast_url=FORECAST_URL, api_key="", timeout=TIMEOUT)
async def forecast(
    place: str,
    days: int = 3,
    language: str = "en",
    units: Units = "metric",
    geocoding_url: str = GEOCODING_URL,
    forecast_url: str = FORECAST_URL,
    api_key: str = "",
    timeout: float = TIMEOUT,
) -> str | ToolResponse:
    """Get the daily weather forecast of a place for the coming days (from Open-Meteo).

    One line per day: conditions, low and high temperature, precipitation and its chance, wind,
    UV index. The place name is sent to Open-Meteo to be found.

    Args:
        place: City, town or district, optionally with its country or region after a comma
            ("Paris, France"), or coordinates "latitude, longitude".
        days: How many days, starting today: 1 to 16.
        language: Two-letter language code for place names in the answer, e.g. en or zh.
        units: metric (°C, km/h, mm) or imperial (°F, mph, inch).
        geocoding_url: Base URL of Open-Meteo's geocoding API (set by the bot owner).
        forecast_url: Base URL of Open-Meteo's forecast API (set by the bot owner).
        api_key: Open-Meteo commercial API key, if any (set by the bot owner).
        timeout: Seconds to wait for each answer (set by the bot owner).
    """
    if days < 1:
        return ToolResponse.error(f"days must be at least 1 (got {days}); 1 means today only")
    note = ""
    if days > MAX_DAYS:
        note = f" (Open-Meteo forecasts at most {MAX_DAYS} days; {days} were asked for)"
        days = MAX_DAYS
    try:
        async with _client(timeout) as client:
            found = await _resolve(client, place, _language(language), geocoding_url=geocoding_url,
                                   api_key=api_key, timeout=timeout)
            params: dict[str, Any] = {
                "latitude": found["latitude"], "longitude": found["longitude"],
                "daily": FORECAST_VARIABLES, "timezone": "auto", "forecast_days": days,
                **_unit_params(units),
            }
            if api_key:
                params["apikey"] = api_key
            data = await _get_json(client, _endpoint(forecast_url, "/v1/forecast"), params,
                                   service="Open-Meteo forecast", timeout=timeout)
            daily = data.get("daily") if isinstance(data, dict) else None
        if not isinstance(daily, dict) or not isinstance(daily.get("time"), list):
            raise WeatherError("Open-Meteo forecast answered without a daily forecast")
    except WeatherError as error:
        return ToolResponse.error(str(error))
    du = data.get("daily_units") or {}
    temp_unit = _unit(du, "temperature_2m_max", "°C")
    wind_unit = _unit(du, "wind_speed_10m_max", "km/h")
    rain_unit = _unit(du, "precipitation_sum", "mm")
    lines = [f"{_heading(found, data)}: {len(daily['time'])}-day forecast{note}"]
    for i, day in enumerate(daily["time"]):
        parts = [
            _describe(_at(daily.get("weather_code"), i)),
            f"{_number(_at(daily.get('temperature_2m_min'), i))} to "
            f"{_number(_at(daily.get('temperature_2m_max'), i), temp_unit)}",
        ]
        feels_low = _at(daily.get("apparent_temperature_min"), i)
        feels_high = _at(daily.get("apparent_temperature_max"), i)
        if feels_low is not None and feels_high is not None:
            parts.append(f"feels {_number(feels_low)} to {_number(feels_high, temp_unit)}")
        rain = _at(daily.get("precipitation_sum"), i)
        if rain is not None:
            chance = _at(daily.get("precipitation_probability_max"), i)
            parts.append(f"precipitation {_number(rain, rain_unit)}"
                         + (f" ({_number(chance, '%', 0)})" if chance is not None else ""))
        wind = _at(daily.get("wind_speed_10m_max"), i)
        if wind is not None:
            text = f"wind up to {_number(wind, wind_unit)}"
            direction = _compass(_at(daily.get("wind_direction_10m_dominant"), i))
            text += f" from {direction}" if direction else ""
            gusts = _at(daily.get("wind_gusts_10m_max"), i)
            parts.append(text + (f" (gusts {_number(gusts, wind_unit)})" if gusts is not None else ""))
        uv = _at(daily.get("uv_index_max"), i)
        if uv is not None:
            parts.append(f"UV {_number(uv)}")
        lines.append(f"{day} {_weekday(day)}: " + ", ".join(parts))
    lines.append("Source: Open-Meteo.com")
    return "\n".join(lines)
