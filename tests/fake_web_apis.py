"""Loopback fakes of the keyless web APIs the network toolkits call, for offline tests.

Each fake is a real HTTP server on 127.0.0.1 that answers the API's real request paths and query
parameters with the API's response shapes, including its error shapes:

- `FakeOpenMeteo`: Open-Meteo's geocoding (`/v1/search`) and forecast (`/v1/forecast`) APIs,
  errors as `{"error": true, "reason": "..."}` with HTTP 400.
- `FakeNagerDate`: Nager.Date v3 (`/api/v3/PublicHolidays/{year}/{code}`,
  `/api/v3/NextPublicHolidays/{code}`, `/api/v3/AvailableCountries`); unknown countries are 404
  with an ASP.NET ProblemDetails body, years without data 204, a bad route value 400.
- `FakeExchangeRateAPI`: ExchangeRate-API's open endpoint (`/v6/latest/{base}`), errors as
  `{"result": "error", "error-type": "unsupported-code"}`.

Every request is recorded in `requests` (path, query, headers). `push(answer, ...)` scripts the
next answers (an HTTP error, a non-JSON body, a delay to provoke a timeout) ahead of the normal
behaviour. `unreachable_url()` is an address where nothing listens.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections import deque
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.loopback import QuietHandler, serve, shut


@dataclass
class Answer:
    """One HTTP answer."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json; charset=utf-8"
    delay: float = 0.0


@dataclass(frozen=True)
class Request:
    """One request the fake received."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]


def json_answer(data: Any, status: int = 200, *, delay: float = 0.0) -> Answer:
    """`data` as a JSON body."""
    return Answer(status, json.dumps(data, ensure_ascii=False).encode(), delay=delay)


def raw(body: bytes | str, *, status: int = 200, content_type: str = "text/html",
        delay: float = 0.0) -> Answer:
    """Any body at all: an HTML error page, broken JSON."""
    data = body.encode() if isinstance(body, str) else body
    return Answer(status, data, content_type, delay)


def slow(seconds: float) -> Answer:
    """An answer that comes too late (for timeout tests); the body is never read."""
    return json_answer({"late": True}, delay=seconds)


def unreachable_url() -> str:
    """A loopback URL with nothing listening: connecting is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@dataclass
class FakeWebAPI:
    """The server; subclasses answer in `route`. Use as a context manager or start()/stop()."""

    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._queue: deque[Answer] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: ThreadingHTTPServer | None = None

    # --- to override -------------------------------------------------------------------------

    def route(self, path: str, query: dict[str, str]) -> Answer:
        """The API's own answer to a GET of `path` with `query` (first value of each key)."""
        raise NotImplementedError

    # --- control -----------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What the toolkit's base URL setting should be."""
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def push(self, *answers: Answer) -> None:
        """Answer the next requests with these, in order, instead of the API's own answers."""
        with self._lock:
            self._queue.extend(answers)

    def reset(self) -> None:
        """Forget scripted answers and recorded requests."""
        with self._lock:
            self._queue.clear()
            self.requests.clear()

    def paths(self) -> list[str]:
        """The paths requested so far, in order."""
        return [request.path for request in self.requests]

    def _answer(self, request: Request) -> Answer:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        return self.route(request.path, request.query)

    def start(self) -> FakeWebAPI:
        fake = self

        class Handler(QuietHandler):

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {key: values[0] for key, values in parse_qs(parts.query).items()}
                request = Request(unquote(parts.path), query,
                                  {k.lower(): v for k, v in self.headers.items()})
                answer = fake._answer(request)
                if answer.delay and fake._stopping.wait(answer.delay):
                    return  # stopping: the client gave up long ago
                try:
                    self.send_response(answer.status)
                    if answer.status != 204:
                        self.send_header("Content-Type", answer.content_type)
                        self.send_header("Content-Length", str(len(answer.body)))
                    self.end_headers()
                    if answer.status != 204:
                        self.wfile.write(answer.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

        self._stopping.clear()
        self._server = serve(Handler)
        return self

    def stop(self) -> None:
        self._stopping.set()
        shut(self._server)
        self._server = None

    def __enter__(self) -> FakeWebAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- Open-Meteo ---------------------------------------------------------------------------------


def open_meteo_error(reason: str, status: int = 400) -> Answer:
    """Open-Meteo's error shape."""
    return json_answer({"error": True, "reason": reason}, status)


PLACES: list[dict[str, Any]] = [
    {"id": 2950159, "name": "Berlin", "latitude": 52.52437, "longitude": 13.41053, "elevation": 74.0,
     "feature_code": "PPLC", "country_code": "DE", "admin1_id": 2950157, "timezone": "Europe/Berlin",
     "population": 3426354, "country_id": 2921044, "country": "Germany", "admin1": "Land Berlin",
     "names": {"zh": "柏林", "de": "Berlin"}},
    {"id": 1808926, "name": "Hangzhou", "latitude": 30.29365, "longitude": 120.16142,
     "elevation": 13.0, "feature_code": "PPLA", "country_code": "CN", "admin1_id": 1784764,
     "timezone": "Asia/Shanghai", "population": 6241971, "country_id": 1814991, "country": "China",
     "admin1": "Zhejiang", "names": {"zh": "杭州市"}, "country_names": {"zh": "中国"},
     "admin1_names": {"zh": "浙江省"}},
    {"id": 2988507, "name": "Paris", "latitude": 48.85341, "longitude": 2.3488, "elevation": 42.0,
     "feature_code": "PPLC", "country_code": "FR", "admin1_id": 3012874, "timezone": "Europe/Paris",
     "population": 2138551, "country_id": 3017382, "country": "France", "admin1": "Île-de-France"},
    {"id": 4717560, "name": "Paris", "latitude": 33.66094, "longitude": -95.55551, "elevation": 183.0,
     "feature_code": "PPLA2", "country_code": "US", "admin1_id": 4736286,
     "timezone": "America/Chicago", "population": 24782, "country_id": 6252001,
     "country": "United States", "admin1": "Texas"},
]
"""Geocoding results, most populous first (as Open-Meteo ranks them)."""

TIMEZONES = {"Europe/Berlin": ("CEST", 7200), "Asia/Shanghai": ("CST", 28800),
             "Europe/Paris": ("CEST", 7200), "America/Chicago": ("CDT", -18000)}

CURRENT_KNOWN = {
    "temperature_2m": "°C", "relative_humidity_2m": "%", "apparent_temperature": "°C",
    "is_day": "", "precipitation": "mm", "rain": "mm", "showers": "mm", "snowfall": "cm",
    "weather_code": "wmo code", "cloud_cover": "%", "pressure_msl": "hPa",
    "surface_pressure": "hPa", "wind_speed_10m": "km/h", "wind_direction_10m": "°",
    "wind_gusts_10m": "km/h",
}
DAILY_KNOWN = {
    "weather_code": "wmo code", "temperature_2m_max": "°C", "temperature_2m_min": "°C",
    "apparent_temperature_max": "°C", "apparent_temperature_min": "°C", "sunrise": "iso8601",
    "sunset": "iso8601", "uv_index_max": "", "precipitation_sum": "mm", "rain_sum": "mm",
    "precipitation_probability_max": "%", "wind_speed_10m_max": "km/h",
    "wind_gusts_10m_max": "km/h", "wind_direction_10m_dominant": "°",
}
DAILY_CODES = [61, 3, 0, 95, 71, 45, 80, 2, 1, 63, 0, 3, 81, 2, 0, 65]


class FakeOpenMeteo(FakeWebAPI):
    """Open-Meteo's geocoding and forecast APIs on one server (the real ones are two hosts).

    Temperatures are derived from the latitude so answers are predictable: the current
    temperature is `30 - latitude / 3` °C, rounded to one decimal.
    """

    def route(self, path: str, query: dict[str, str]) -> Answer:
        if path == "/v1/search":
            return self._search(query)
        if path == "/v1/forecast":
            return self._forecast(query)
        return open_meteo_error(f"Not found: {path}", 404)

    def _search(self, query: dict[str, str]) -> Answer:
        name = query.get("name")
        if name is None:
            return open_meteo_error("Parameter 'name' is required")
        try:
            count = int(query.get("count", "10"))
        except ValueError:
            return open_meteo_error(f"Cannot initialize Int from invalid String value {query['count']} for key count")
        if not 1 <= count <= 100:
            return open_meteo_error("Parameter count must be between 1 and 100.")
        language = query.get("language", "en")
        if len(name) < 2:
            return json_answer({"generationtime_ms": 0.1})
        wanted = name.casefold()
        results = []
        for place in PLACES:
            names = [place["name"], *place.get("names", {}).values()]
            if not any(candidate.casefold().startswith(wanted) for candidate in names):
                continue
            if query.get("countryCode") and query["countryCode"].upper() != place["country_code"]:
                continue
            result = {k: v for k, v in place.items() if not k.endswith("names")}
            result["name"] = place.get("names", {}).get(language, place["name"])
            result["country"] = place.get("country_names", {}).get(language, place["country"])
            result["admin1"] = place.get("admin1_names", {}).get(language, place["admin1"])
            results.append(result)
        if not results:  # Open-Meteo leaves "results" out when nothing matches
            return json_answer({"generationtime_ms": 0.3})
        return json_answer({"results": results[:count], "generationtime_ms": 0.6})

    def _forecast(self, query: dict[str, str]) -> Answer:
        try:
            latitude = float(query["latitude"])
            longitude = float(query["longitude"])
        except KeyError as missing:
            return open_meteo_error(f"Parameter '{missing.args[0]}' is required")
        except ValueError:
            return open_meteo_error("Latitude and longitude must be numbers")
        if not -90 <= latitude <= 90:
            return open_meteo_error(f"Latitude must be in range of -90 to 90°. Given: {latitude}.")
        if not -180 <= longitude <= 180:
            return open_meteo_error(f"Longitude must be in range of -180 to 180°. Given: {longitude}.")
        days = int(query.get("forecast_days", "7"))
        if not 0 <= days <= 16:
            return open_meteo_error("Forecast days is invalid. Allowed range 0 to 16.")
        current = [v for v in query.get("current", "").split(",") if v]
        daily = [v for v in query.get("daily", "").split(",") if v]
        for key, variables, known in (("current", current, CURRENT_KNOWN), ("daily", daily, DAILY_KNOWN)):
            for variable in variables:
                if variable not in known:
                    return open_meteo_error(
                        f"Cannot initialize ForecastVariable from invalid String value {variable} for key {key}"
                    )
        fahrenheit = query.get("temperature_unit") == "fahrenheit"
        wind_unit = {"mph": "mp/h", "ms": "m/s", "kn": "kn"}.get(query.get("wind_speed_unit", ""), "km/h")
        inch = query.get("precipitation_unit") == "inch"
        place = next((p for p in PLACES if abs(p["latitude"] - latitude) < 0.01
                      and abs(p["longitude"] - longitude) < 0.01), None)
        zone = place["timezone"] if place and query.get("timezone") == "auto" else "GMT"
        abbreviation, offset = TIMEZONES.get(zone, ("GMT", 0))
        local_now = datetime.now(timezone.utc) + timedelta(seconds=offset)
        local_now = local_now.replace(minute=local_now.minute // 15 * 15, second=0, microsecond=0)

        def temperature(celsius: float) -> float:
            return round(celsius * 9 / 5 + 32 if fahrenheit else celsius, 1)

        def unit(base: str) -> str:
            if base == "°C" and fahrenheit:
                return "°F"
            if base == "km/h":
                return wind_unit
            if base == "mm" and inch:
                return "inch"
            return base

        base_temperature = 30 - latitude / 3
        body: dict[str, Any] = {
            "latitude": round(latitude, 2), "longitude": round(longitude, 2),
            "generationtime_ms": 0.05, "utc_offset_seconds": offset, "timezone": zone,
            "timezone_abbreviation": abbreviation, "elevation": place["elevation"] if place else 0.0,
        }
        if current:
            values = {
                "temperature_2m": temperature(base_temperature),
                "relative_humidity_2m": 64, "apparent_temperature": temperature(base_temperature - 2),
                "is_day": 1, "precipitation": 0.0, "rain": 0.0, "showers": 0.0, "snowfall": 0.0,
                "weather_code": 2, "cloud_cover": 40, "pressure_msl": 1013.2,
                "surface_pressure": 1004.1, "wind_speed_10m": 11.2, "wind_direction_10m": 225,
                "wind_gusts_10m": 24.5,
            }
            body["current_units"] = {"time": "iso8601", "interval": "seconds",
                                     **{v: unit(CURRENT_KNOWN[v]) for v in current}}
            body["current"] = {"time": local_now.strftime("%Y-%m-%dT%H:%M"), "interval": 900,
                               **{v: values[v] for v in current}}
        if daily:
            today = local_now.date()
            series: dict[str, list[Any]] = {"time": []}
            for i in range(days):
                day = today + timedelta(days=i)
                series["time"].append(day.isoformat())
                row = {
                    "weather_code": DAILY_CODES[i], "temperature_2m_max": temperature(base_temperature + 4 + i % 3),
                    "temperature_2m_min": temperature(base_temperature - 5 - i % 2),
                    "apparent_temperature_max": temperature(base_temperature + 3),
                    "apparent_temperature_min": temperature(base_temperature - 7),
                    "sunrise": f"{day.isoformat()}T05:48", "sunset": f"{day.isoformat()}T20:31",
                    "uv_index_max": 5.2, "precipitation_sum": round(2.4 if DAILY_CODES[i] >= 51 else 0.0, 1),
                    "rain_sum": 0.0,
                    # like the real API, far days have no probability
                    "precipitation_probability_max": 70 - i * 5 if i < 7 else None,
                    "wind_speed_10m_max": 18.4, "wind_gusts_10m_max": 35.3,
                    "wind_direction_10m_dominant": 250,
                }
                for variable in daily:
                    series.setdefault(variable, []).append(row[variable])
            body["daily_units"] = {"time": "iso8601", **{v: unit(DAILY_KNOWN[v]) for v in daily}}
            body["daily"] = series
        return json_answer(body)


# --- Nager.Date ---------------------------------------------------------------------------------


def problem_details(status: int, title: str, errors: dict[str, list[str]] | None = None) -> Answer:
    """ASP.NET Core's ProblemDetails, which Nager.Date answers errors with."""
    body: dict[str, Any] = {
        "type": f"https://tools.ietf.org/html/rfc9110#section-15.5.{status - 399}",
        "title": title, "status": status,
    }
    if errors:
        body["errors"] = errors
    body["traceId"] = "00-5f1a4c0e2b9d7e6f1a2b3c4d5e6f7a8b-1a2b3c4d5e6f7a8b-00"
    return json_answer(body, status)


# (month, day, local name, English name, global, counties, types)
HOLIDAYS: dict[str, list[tuple[Any, ...]]] = {
    "DE": [
        (1, 1, "Neujahr", "New Year's Day", True, None, ["Public"]),
        (1, 6, "Heilige Drei Könige", "Epiphany", False, ["DE-BW", "DE-BY", "DE-ST"], ["Public"]),
        (5, 1, "Tag der Arbeit", "Labour Day", True, None, ["Public"]),
        (10, 3, "Tag der Deutschen Einheit", "German Unity Day", True, None, ["Public"]),
        (10, 31, "Reformationstag", "Reformation Day", False,
         ["DE-BB", "DE-HB", "DE-HH", "DE-MV", "DE-NI", "DE-SN", "DE-ST", "DE-SH", "DE-TH"], ["Public"]),
        (12, 25, "Erster Weihnachtstag", "Christmas Day", True, None, ["Public"]),
    ],
    "CN": [
        (1, 1, "元旦", "New Year's Day", True, None, ["Public"]),
        (5, 1, "劳动节", "Labour Day", True, None, ["Public"]),
        (10, 1, "国庆节", "National Day", True, None, ["Public"]),
    ],
    "GB": [
        (1, 1, "New Year's Day", "New Year's Day", True, None, ["Public"]),
        (8, 26, "Summer Bank Holiday", "Summer Bank Holiday", False, ["GB-ENG", "GB-WLS"], ["Bank"]),
        (12, 25, "Christmas Day", "Christmas Day", True, None, ["Public"]),
    ],
}
COUNTRY_NAMES = {"DE": "Germany", "CN": "China", "GB": "United Kingdom", "AQ": "Antarctica"}
"""AQ is known but has no holidays: its answers are 204."""
FIRST_YEAR, LAST_YEAR = 1975, 2075


class FakeNagerDate(FakeWebAPI):
    """Nager.Date v3: public holidays by year, the next ones, and the list of countries."""

    def _holidays(self, code: str, year: int) -> list[dict[str, Any]]:
        return [
            {"date": date(year, month, day).isoformat(), "localName": local, "name": name,
             "countryCode": code, "fixed": True, "global": is_global, "counties": counties,
             "launchYear": None, "types": types}
            for month, day, local, name, is_global, counties, types in HOLIDAYS.get(code, [])
        ]

    def route(self, path: str, query: dict[str, str]) -> Answer:
        if path == "/api/v3/AvailableCountries":
            return json_answer([{"countryCode": c, "name": n} for c, n in COUNTRY_NAMES.items()])
        found = re.fullmatch(r"/api/v3/PublicHolidays/([^/]+)/([^/]+)", path)
        if found:
            year_text, code = found.group(1), found.group(2).upper()
            if not year_text.isdigit():
                return problem_details(400, "One or more validation errors occurred.",
                                       {"year": [f"The value '{year_text}' is not valid."]})
            if code not in COUNTRY_NAMES:
                return problem_details(404, "Not Found")
            year = int(year_text)
            if code not in HOLIDAYS or not FIRST_YEAR <= year <= LAST_YEAR:
                return Answer(204)
            return json_answer(self._holidays(code, year))
        found = re.fullmatch(r"/api/v3/NextPublicHolidays/([^/]+)", path)
        if found:
            code = found.group(1).upper()
            if code not in COUNTRY_NAMES:
                return problem_details(404, "Not Found")
            if code not in HOLIDAYS:
                return Answer(204)
            today = date.today()
            upcoming = [
                holiday for year in (today.year, today.year + 1)
                for holiday in self._holidays(code, year)
                if today <= date.fromisoformat(holiday["date"]) < today + timedelta(days=365)
                and "Public" in holiday["types"]
            ]
            return json_answer(upcoming)
        return problem_details(404, "Not Found")


# --- ExchangeRate-API open endpoint -------------------------------------------------------------


USD_RATES = {"USD": 1, "EUR": 0.92, "CNY": 7.2, "JPY": 150.0, "GBP": 0.8, "HKD": 7.8,
             "TWD": 32.0, "KRW": 1350.0, "BTN": 83.1}
"""Units of each currency per US dollar (BTN shows that any listed code converts)."""


def er_api_error(error_type: str, status: int = 404) -> Answer:
    """ExchangeRate-API's error shape."""
    return json_answer({
        "result": "error", "documentation": "https://www.exchangerate-api.com/docs/free",
        "terms-of-use": "https://www.exchangerate-api.com/terms", "error-type": error_type,
    }, status)


class FakeExchangeRateAPI(FakeWebAPI):
    """open.er-api.com's `/v6/latest/{base}`: every known rate relative to the base."""

    def route(self, path: str, query: dict[str, str]) -> Answer:
        found = re.fullmatch(r"/v6/latest/([^/]*)", path)
        if not found:
            return raw("<html><body>404 Not Found</body></html>", status=404)
        base = found.group(1).upper()
        if base not in USD_RATES:
            return er_api_error("unsupported-code")
        per_usd = USD_RATES[base]
        rates = {code: round(value / per_usd, 6) for code, value in USD_RATES.items()}
        rates[base] = 1
        return json_answer({
            "result": "success", "provider": "https://www.exchangerate-api.com",
            "documentation": "https://www.exchangerate-api.com/docs/free",
            "terms_of_use": "https://www.exchangerate-api.com/terms",
            "time_last_update_unix": 1735689601,
            "time_last_update_utc": "Wed, 01 Jan 2025 00:00:01 +0000",
            "time_next_update_unix": 1735777331,
            "time_next_update_utc": "Thu, 02 Jan 2025 00:22:11 +0000",
            "time_eol_unix": 0, "base_code": base, "rates": rates,
        })
