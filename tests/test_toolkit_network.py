"""The network toolkits (weather, holidays, exchange) against loopback fakes of their APIs: off until
enabled, base URLs hidden from the model and set by the owner, normal answers, and every failure
(the API's own error shapes, HTTP errors, bad JSON, timeouts, nothing listening) an answer the
model can relay."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest

from nonebot_plugin_marsho.tools import ToolCall, ToolResult, ToolRunner, Toolset, ToolsetSource, load_toolset
from nonebot_plugin_marsho.tools.loader import BUILTIN_TOOLSET
from tests.fake_web_apis import (
    FakeExchangeRateAPI,
    FakeNagerDate,
    FakeOpenMeteo,
    er_api_error,
    json_answer,
    open_meteo_error,
    problem_details,
    raw,
    slow,
    unreachable_url,
)

NETWORK_TOOLKITS = ["weather", "holidays", "exchange"]
PRESETS = {"geocoding_url", "forecast_url", "api_key", "base_url", "timeout"}
"""Parameters only the owner sets: never in a schema the model sees."""


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, Any]]:
    with FakeOpenMeteo() as meteo, FakeNagerDate() as nager, FakeExchangeRateAPI() as rates:
        yield {"weather": meteo, "holidays": nager, "exchange": rates}


@pytest.fixture(autouse=True)
def fresh(fakes: dict[str, Any]) -> None:
    for fake in fakes.values():
        fake.reset()


@pytest.fixture
def meteo(fakes: dict[str, Any]) -> FakeOpenMeteo:
    return fakes["weather"]


@pytest.fixture
def nager(fakes: dict[str, Any]) -> FakeNagerDate:
    return fakes["holidays"]


@pytest.fixture
def er_api(fakes: dict[str, Any]) -> FakeExchangeRateAPI:
    return fakes["exchange"]


def settings_for(fakes: dict[str, Any], **overrides: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """MARSHO_TOOLKIT_SETTINGS pointing every network toolkit at its fake (plus overrides)."""
    settings: dict[str, dict[str, Any]] = {
        "weather": {"geocoding_url": fakes["weather"].base_url,
                    "forecast_url": fakes["weather"].base_url},
        "holidays": {"base_url": fakes["holidays"].base_url},
        "exchange": {"base_url": fakes["exchange"].base_url},
    }
    for toolkit, values in overrides.items():
        settings[toolkit] = {**settings[toolkit], **values}
    return settings


_loaded: dict[str, Toolset] = {}
"""Toolsets by their settings: loading (importing the toolkits) is the slow part of a test."""


def load_network(fakes: dict[str, Any], **overrides: dict[str, Any]) -> Toolset:
    settings = settings_for(fakes, **overrides)
    key = json.dumps(settings, sort_keys=True)
    if key not in _loaded:
        toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")],
                               enabled=NETWORK_TOOLKITS, settings=settings)
        assert toolset.problems == [], [str(p) for p in toolset.problems]
        _loaded[key] = toolset
    return _loaded[key]


async def call(toolset: Toolset, name: str, arguments: dict[str, Any]) -> ToolResult:
    runner = ToolRunner(toolset, timeout=5)
    try:
        return await runner.run_one(ToolCall("call_1", name, json.dumps(arguments)))
    finally:
        runner.close()


async def run(fakes: dict[str, Any], name: str, arguments: dict[str, Any],
              **overrides: dict[str, Any]) -> ToolResult:
    return await call(load_network(fakes, **overrides), name, arguments)


def failed(result: ToolResult) -> str:
    """The error text, asserting the call failed as an answer (not a crash of the runner)."""
    assert result.status == "error", result.content
    assert result.content.startswith("Error: ")
    assert "Traceback" not in result.content
    return result.content


# --- off by default, presets hidden ---------------------------------------------------------------


def test_network_toolkits_are_off_until_enabled_and_say_what_they_send() -> None:
    toolset = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")])

    assert not [name for name in toolset.tools if name.split("__")[0] in NETWORK_TOOLKITS]
    assert set(NETWORK_TOOLKITS) <= set(toolset.available)
    assert "geocoding-api.open-meteo.com" in toolset.available["weather"]
    assert "api.open-meteo.com" in toolset.available["weather"]
    assert "date.nager.at" in toolset.available["holidays"]
    assert "open.er-api.com" in toolset.available["exchange"]


def test_enabled_network_toolkits_load_without_problems(fakes: dict[str, Any]) -> None:
    toolset = load_network(fakes)

    assert {"weather__now", "weather__forecast", "holidays__public_holidays",
            "holidays__next_holidays", "exchange__convert", "exchange__rates"} <= set(toolset.tools)
    assert {k.name: bool(k.sends) for k in toolset.toolkits if k.name in NETWORK_TOOLKITS} == {
        "weather": True, "holidays": True, "exchange": True
    }
    only_weather = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=["weather"])
    assert "weather__now" in only_weather.tools and "exchange__convert" not in only_weather.tools


def test_the_model_never_sees_the_base_urls_and_the_owner_settings_win(fakes: dict[str, Any]) -> None:
    default = load_toolset([ToolsetSource(BUILTIN_TOOLSET, "built-in")], enabled=NETWORK_TOOLKITS)
    configured = load_network(fakes)

    for toolset in (default, configured):
        for tool in toolset.tools.values():
            if tool.toolkit not in NETWORK_TOOLKITS:
                continue
            offered = set(tool.parameters["properties"]) | set(tool.parameters.get("required", []))
            assert not offered & PRESETS, (tool.name, offered)
            assert not PRESETS & set(json.dumps(tool.schema()).split('"'))
    assert default.tools["weather__now"].presets["forecast_url"] == "https://api.open-meteo.com"
    assert default.tools["holidays__public_holidays"].presets["base_url"] == "https://date.nager.at"
    assert default.tools["exchange__convert"].presets["base_url"] == "https://open.er-api.com"
    assert configured.tools["weather__forecast"].presets["geocoding_url"] == fakes["weather"].base_url
    assert configured.tools["exchange__rates"].presets["base_url"] == fakes["exchange"].base_url


async def test_the_model_cannot_point_a_tool_elsewhere(fakes: dict[str, Any], er_api: Any) -> None:
    result = await run(fakes, "exchange__convert", {
        "amount": 1, "from_currency": "USD", "to_currency": "EUR",
        "base_url": unreachable_url(), "timeout": 0.001,
    })

    assert result.status == "ok", result.content
    assert er_api.paths() == ["/v6/latest/USD"]


# --- weather ------------------------------------------------------------------------------------


async def test_weather_now_resolves_the_place_then_reads_the_current_weather(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    result = await run(fakes, "weather__now", {"place": "Berlin"})

    assert result.status == "ok", result.content
    text = result.content
    assert text.startswith("Berlin (Land Berlin, Germany) at 52.52°N, 13.41°E, timezone Europe/Berlin")
    assert "partly cloudy, 12.5 °C (feels like 10.5 °C), humidity 64%" in text
    assert "wind 11.2 km/h from SW (gusts 24.5 km/h), precipitation 0.0 mm, cloud cover 40%" in text
    assert "Today: 7.5 to 16.5 °C, precipitation 2.4 mm (chance 70%), sunrise 05:48, sunset 20:31" in text
    assert "Open-Meteo" in text
    search, forecast = meteo.requests
    assert search.path == "/v1/search"
    assert (search.query["name"], search.query["count"], search.query["language"]) == ("Berlin", "1", "en")
    assert "nonebot-plugin-marsho" in search.headers["user-agent"]
    assert forecast.path == "/v1/forecast"
    assert (forecast.query["latitude"], forecast.query["longitude"]) == ("52.52437", "13.41053")
    assert forecast.query["timezone"] == "auto"
    assert "weather_code" in forecast.query["current"].split(",")
    assert "apikey" not in forecast.query


async def test_weather_sends_the_owner_api_key_and_never_shows_it(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    key = "om-commercial-key-4711"
    meteo.push(json_answer({"results": [{"name": "Berlin", "latitude": 52.5, "longitude": 13.4}]}),
               open_meteo_error(f"API key {key} is not valid", 401))

    result = await run(fakes, "weather__now", {"place": "Berlin", "language": "中文"},
                       weather={"api_key": key})

    assert [r.query.get("apikey") for r in meteo.requests] == [key, key]
    assert meteo.requests[0].query["language"] == "en"  # not a language code: the default
    assert key not in failed(result) and "[redacted]" in result.content


async def test_weather_forecast_lists_each_day_in_the_asked_language(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    result = await run(fakes, "weather__forecast", {"place": "杭州", "days": 3, "language": "zh"})

    assert result.status == "ok", result.content
    lines = result.content.splitlines()
    assert lines[0].startswith("杭州市 (浙江省, 中国) at 30.29°N, 120.16°E, timezone Asia/Shanghai: 3-day forecast")
    days = lines[1:4]
    today = date.fromisoformat(days[0][:10])
    assert [line[:10] for line in days] == [
        date.fromordinal(today.toordinal() + i).isoformat() for i in range(3)
    ]
    assert "slight rain, 14.9 to 23.9 °C, feels 12.9 to 22.9 °C, precipitation 2.4 mm (70%)" in days[0]
    assert "wind up to 18.4 km/h from WSW (gusts 35.3 km/h), UV 5.2" in days[0]
    assert "overcast" in days[1] and "clear sky" in days[2]
    assert lines[4] == "Source: Open-Meteo.com"
    assert meteo.requests[0].query["language"] == "zh"
    assert meteo.requests[1].query["forecast_days"] == "3"


async def test_weather_forecast_past_sixteen_days_is_cut_with_a_note(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    result = await run(fakes, "weather__forecast", {"place": "Berlin", "days": 30})

    assert result.status == "ok", result.content
    assert "16-day forecast (Open-Meteo forecasts at most 16 days; 30 were asked for)" in result.content
    assert meteo.requests[1].query["forecast_days"] == "16"
    # far days have no precipitation probability, as with the real API
    assert result.content.splitlines()[16].count("(") == 1  # only the gusts
    assert "days must be at least 1" in failed(
        await run(fakes, "weather__forecast", {"place": "Berlin", "days": 0})
    )


async def test_weather_in_imperial_units_reads_the_units_from_the_answer(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    result = await run(fakes, "weather__now", {"place": "Berlin", "units": "imperial"})

    assert result.status == "ok", result.content
    assert "54.5 °F (feels like 50.9 °F)" in result.content
    assert "wind 11.2 mp/h" in result.content
    query = meteo.requests[1].query
    assert (query["temperature_unit"], query["wind_speed_unit"], query["precipitation_unit"]) == (
        "fahrenheit", "mph", "inch"
    )


async def test_weather_place_with_a_region_picks_the_matching_place(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    texas = await run(fakes, "weather__now", {"place": "Paris, Texas"})
    assert texas.content.startswith("Paris (Texas, United States)"), texas.content
    assert (meteo.requests[0].query["name"], meteo.requests[0].query["count"]) == ("Paris", "10")

    meteo.reset()
    france = await run(fakes, "weather__now", {"place": "Paris"})
    assert france.content.startswith("Paris (Île-de-France, France)"), france.content

    nowhere = await run(fakes, "weather__now", {"place": "Paris, Narnia"})
    assert nowhere.content.startswith("Paris (Île-de-France, France)")
    assert "no 'Paris' in 'Narnia' was found" in nowhere.content


async def test_weather_for_coordinates_skips_the_geocoding(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    result = await run(fakes, "weather__now", {"place": "48.85, 2.35"})

    assert result.status == "ok", result.content
    assert meteo.paths() == ["/v1/forecast"]
    assert (meteo.requests[0].query["latitude"], meteo.requests[0].query["longitude"]) == ("48.85", "2.35")
    assert "not valid coordinates" in failed(await run(fakes, "weather__now", {"place": "95, 10"}))


async def test_weather_unknown_place_says_so(fakes: dict[str, Any], meteo: FakeOpenMeteo) -> None:
    text = failed(await run(fakes, "weather__forecast", {"place": "Atlantis"}))

    assert "Open-Meteo knows no place named 'Atlantis'" in text
    assert meteo.paths() == ["/v1/search"]  # no forecast asked for
    assert "no place given" in failed(await run(fakes, "weather__now", {"place": "  "}))


async def test_weather_relays_open_meteo_error_bodies(fakes: dict[str, Any], meteo: FakeOpenMeteo) -> None:
    meteo.push(open_meteo_error("Parameter count must be between 1 and 100."))
    text = failed(await run(fakes, "weather__now", {"place": "Berlin"}))
    assert text == ("Error: Open-Meteo geocoding answered HTTP 400 Bad Request: "
                    "Parameter count must be between 1 and 100.")

    meteo.push(open_meteo_error("Latitude must be in range of -90 to 90°. Given: 91.0."))
    text = failed(await run(fakes, "weather__forecast", {"place": "10, 20"}))
    assert "Open-Meteo forecast answered HTTP 400 Bad Request: Latitude must be in range" in text

    meteo.push(json_answer({"error": True, "reason": "Too many concurrent requests"}))  # with 200
    text = failed(await run(fakes, "weather__now", {"place": "10, 20"}))
    assert "Open-Meteo forecast refused the request: Too many concurrent requests" in text


async def test_weather_answer_without_the_expected_data_is_an_error(
    fakes: dict[str, Any], meteo: FakeOpenMeteo
) -> None:
    meteo.push(json_answer({"latitude": 10.0, "longitude": 20.0}))
    assert "without current weather" in failed(await run(fakes, "weather__now", {"place": "10, 20"}))
    meteo.push(json_answer([1, 2, 3]))
    assert "unexpected shape" in failed(await run(fakes, "weather__now", {"place": "Berlin"}))


# --- holidays -----------------------------------------------------------------------------------


async def test_public_holidays_of_a_country_and_year(fakes: dict[str, Any], nager: FakeNagerDate) -> None:
    result = await run(fakes, "holidays__public_holidays", {"country": "de", "year": 2025})

    assert result.status == "ok", result.content
    lines = result.content.splitlines()
    assert lines[0] == "Public holidays in DE, 2025 (6):"
    assert lines[1] == "2025-01-01 Wed  New Year's Day (Neujahr)"
    assert lines[2] == "2025-01-06 Mon  Epiphany (Heilige Drei Könige) — only in DE-BW, DE-BY, DE-ST"
    assert "2025-10-03 Fri  German Unity Day (Tag der Deutschen Einheit)" in lines
    assert any(line.endswith("DE-SN +3 more") for line in lines)
    assert lines[-1] == "Source: Nager.Date (date.nager.at)"
    assert nager.paths() == ["/api/v3/PublicHolidays/2025/DE"]


async def test_public_holidays_default_to_this_year_and_take_names_and_aliases(
    fakes: dict[str, Any], nager: FakeNagerDate
) -> None:
    this_year = date.today().year
    result = await run(fakes, "holidays__public_holidays", {"country": "Germany"})
    assert result.status == "ok", result.content
    assert nager.paths() == ["/api/v3/AvailableCountries", f"/api/v3/PublicHolidays/{this_year}/DE"]

    nager.reset()
    result = await run(fakes, "holidays__public_holidays", {"country": "UK", "year": 2024})
    assert "2024-08-26 Mon  Summer Bank Holiday [Bank] — only in GB-ENG, GB-WLS" in result.content
    assert nager.paths() == ["/api/v3/PublicHolidays/2024/GB"]


async def test_public_holidays_of_an_unknown_country_or_missing_data(
    fakes: dict[str, Any], nager: FakeNagerDate
) -> None:
    text = failed(await run(fakes, "holidays__public_holidays", {"country": "XX", "year": 2025}))
    assert "Nager.Date does not know the country code 'XX'" in text  # its 404

    text = failed(await run(fakes, "holidays__public_holidays", {"country": "AQ", "year": 2025}))
    assert text == "Error: Nager.Date has no holiday data for AQ in 2025"  # its 204
    text = failed(await run(fakes, "holidays__public_holidays", {"country": "DE", "year": 1900}))
    assert text == "Error: Nager.Date has no holiday data for DE in 1900"

    nager.reset()
    text = failed(await run(fakes, "holidays__next_holidays", {"country": "Atlantis"}))
    assert "'Atlantis' is not a two-letter ISO 3166-1 country code" in text
    assert nager.paths() == ["/api/v3/AvailableCountries"]
    assert "out of range" in failed(await run(fakes, "holidays__public_holidays", {"country": "DE", "year": 0}))
    assert "does not know the country code 'ZZ'" in failed(
        await run(fakes, "holidays__next_holidays", {"country": "ZZ"})
    )
    assert "no upcoming public holidays for AQ" in failed(
        await run(fakes, "holidays__next_holidays", {"country": "AQ"})
    )


async def test_next_holidays_say_how_far_away_they_are(fakes: dict[str, Any], nager: FakeNagerDate) -> None:
    result = await run(fakes, "holidays__next_holidays", {"country": "CN"})

    assert result.status == "ok", result.content
    today = date.today()
    lines = result.content.splitlines()
    assert lines[0] == f"Upcoming public holidays in CN (today is {today.isoformat()}):"
    holidays = lines[1:-1]
    assert len(holidays) == 3
    dates = [date.fromisoformat(line[:10]) for line in holidays]
    assert dates == sorted(dates) and all(today <= d for d in dates)
    for line, day in zip(holidays, dates, strict=True):
        delta = (day - today).days
        assert line.endswith(" — today" if delta == 0 else f" — in {delta} day{'s' if delta != 1 else ''}")
    assert nager.paths() == ["/api/v3/NextPublicHolidays/CN"]

    first = await run(fakes, "holidays__next_holidays", {"country": "CN", "limit": 1})
    assert first.content.splitlines()[0].endswith(", the first 1 of 3):")


async def test_holidays_relay_the_problem_details_of_a_bad_request(
    fakes: dict[str, Any], nager: FakeNagerDate
) -> None:
    nager.push(problem_details(400, "One or more validation errors occurred.",
                               {"year": ["The value 'abc' is not valid."]}))
    text = failed(await run(fakes, "holidays__public_holidays", {"country": "DE"}))
    assert text == ("Error: Nager.Date answered HTTP 400 Bad Request: One or more validation errors "
                    "occurred.; year: The value 'abc' is not valid.")

    nager.push(json_answer({"holidays": []}))
    assert "unexpected shape" in failed(await run(fakes, "holidays__next_holidays", {"country": "DE"}))


# --- exchange -----------------------------------------------------------------------------------


async def test_convert_an_amount(fakes: dict[str, Any], er_api: FakeExchangeRateAPI) -> None:
    result = await run(fakes, "exchange__convert",
                       {"amount": 100, "from_currency": "usd", "to_currency": "CNY"})

    assert result.status == "ok", result.content
    assert result.content == (
        "100.00 USD = 720.00 CNY (1 USD = 7.2 CNY; 1 CNY = 0.138889 USD; "
        "updated Wed, 01 Jan 2025 00:00:01 +0000).\n"
        "Rates by Exchange Rate API (https://www.exchangerate-api.com)"
    )
    assert er_api.paths() == ["/v6/latest/USD"]

    small = await run(fakes, "exchange__convert", {"amount": 1, "from_currency": "RMB", "to_currency": "EUR"})
    assert small.content.startswith("1.00 CNY = 0.1278 EUR"), small.content
    assert er_api.paths()[-1] == "/v6/latest/CNY"
    big = await run(fakes, "exchange__convert", {"amount": 1e6, "from_currency": "USD", "to_currency": "KRW"})
    assert big.content.startswith("1,000,000.00 USD = 1,350,000,000.00 KRW")


async def test_rates_of_a_base_currency(fakes: dict[str, Any], er_api: FakeExchangeRateAPI) -> None:
    result = await run(fakes, "exchange__rates", {"base": "EUR"})

    assert result.status == "ok", result.content
    lines = result.content.splitlines()
    assert lines[0] == "1 EUR in other currencies (updated Wed, 01 Jan 2025 00:00:01 +0000):"
    assert "USD 1.08696" in lines and "CNY 7.82609" in lines and "EUR 1" not in lines
    assert "BTN 90.3261" not in lines  # not a major currency: named on request only
    assert "8 currencies are available; name others to see them." in lines

    picked = await run(fakes, "exchange__rates", {"base": "USD", "currencies": ["btn", "XYZ"]})
    assert picked.content.splitlines()[1:3] == ["BTN 83.1", "No rate for: XYZ (unknown or unsupported codes)."]
    assert "no exchange rates from USD to XYZ" in failed(
        await run(fakes, "exchange__rates", {"base": "USD", "currencies": ["XYZ"]})
    )


async def test_exchange_unknown_currencies(fakes: dict[str, Any], er_api: FakeExchangeRateAPI) -> None:
    text = failed(await run(fakes, "exchange__convert",
                            {"amount": 5, "from_currency": "XYZ", "to_currency": "USD"}))
    assert "HTTP 404: does not support the currency code XYZ (error-type 'unsupported-code')" in text

    text = failed(await run(fakes, "exchange__convert",
                            {"amount": 5, "from_currency": "USD", "to_currency": "XYZ"}))
    assert "there is no exchange rate from USD to XYZ" in text

    er_api.reset()
    text = failed(await run(fakes, "exchange__convert",
                            {"amount": 5, "from_currency": "dollars", "to_currency": "USD"}))
    assert "'dollars' is not a currency code" in text
    assert er_api.requests == []  # refused before asking anyone


async def test_exchange_relays_the_api_error_types(fakes: dict[str, Any], er_api: FakeExchangeRateAPI) -> None:
    er_api.push(er_api_error("quota-reached", 429))
    text = failed(await run(fakes, "exchange__rates", {}))
    assert "HTTP 429: says the request quota is used up; try again later (error-type 'quota-reached')" in text

    er_api.push(er_api_error("no-data-available", 200))  # an error body with status 200
    assert "has no data for this request" in failed(await run(fakes, "exchange__rates", {}))

    er_api.push(er_api_error("something-new", 400))
    assert "reported an error (error-type 'something-new')" in failed(await run(fakes, "exchange__rates", {}))

    er_api.push(json_answer({"result": "success", "rates": {}}))
    assert "answered without exchange rates" in failed(await run(fakes, "exchange__rates", {}))


# --- transport failures, the same for every tool -------------------------------------------------

CALLS = [
    ("weather", "weather__now", {"place": "Berlin"}, "Open-Meteo geocoding"),
    ("weather", "weather__forecast", {"place": "Berlin", "days": 2}, "Open-Meteo geocoding"),
    ("holidays", "holidays__public_holidays", {"country": "DE", "year": 2025}, "Nager.Date"),
    ("holidays", "holidays__next_holidays", {"country": "DE"}, "Nager.Date"),
    ("exchange", "exchange__convert", {"amount": 1, "from_currency": "USD", "to_currency": "EUR"},
     "ExchangeRate-API"),
    ("exchange", "exchange__rates", {"base": "USD"}, "ExchangeRate-API"),
]
IDS = [name for _, name, _, _ in CALLS]


def url_settings(toolkit: str, url: str) -> dict[str, Any]:
    if toolkit == "weather":
        return {"geocoding_url": url, "forecast_url": url}
    return {"base_url": url}


@pytest.mark.parametrize(("toolkit", "name", "arguments", "service"), CALLS, ids=IDS)
async def test_an_http_error_page_is_relayed(
    fakes: dict[str, Any], toolkit: str, name: str, arguments: dict[str, Any], service: str
) -> None:
    fakes[toolkit].push(raw("<html><body><h1>502 Bad Gateway</h1></body></html>", status=502))

    text = failed(await run(fakes, name, arguments))

    assert service in text and "HTTP 502 Bad Gateway" in text
    assert "<h1>502 Bad Gateway</h1>" in text


@pytest.mark.parametrize(("toolkit", "name", "arguments", "service"), CALLS, ids=IDS)
async def test_an_answer_that_is_not_json_is_reported(
    fakes: dict[str, Any], toolkit: str, name: str, arguments: dict[str, Any], service: str
) -> None:
    fakes[toolkit].push(raw('{"results": [{"name": "Berl', content_type="application/json"))

    text = failed(await run(fakes, name, arguments))

    assert service in text and "answered HTTP 200 with something that is not JSON" in text


@pytest.mark.parametrize(("toolkit", "name", "arguments", "service"), CALLS, ids=IDS)
async def test_a_slow_service_times_out_with_the_owner_timeout(
    fakes: dict[str, Any], toolkit: str, name: str, arguments: dict[str, Any], service: str
) -> None:
    fakes[toolkit].push(slow(5))

    result = await run(fakes, name, arguments, **{toolkit: {"timeout": 0.2}})

    text = failed(result)
    assert service in text and "did not answer within 0.2 s" in text
    assert result.seconds < 2


@pytest.mark.parametrize(("toolkit", "name", "arguments", "service"), CALLS, ids=IDS)
async def test_an_unreachable_service_is_reported(
    fakes: dict[str, Any], toolkit: str, name: str, arguments: dict[str, Any], service: str
) -> None:
    url = unreachable_url()

    text = failed(await run(fakes, name, arguments, **{toolkit: url_settings(toolkit, url)}))

    assert f"could not reach {service}" in text
    assert url.removeprefix("http://") in text  # host and port, so the owner can check them


@pytest.mark.parametrize(("toolkit", "name", "arguments", "service"), CALLS, ids=IDS)
async def test_a_misconfigured_address_tells_the_owner(
    fakes: dict[str, Any], toolkit: str, name: str, arguments: dict[str, Any], service: str
) -> None:
    text = failed(await run(fakes, name, arguments, **{toolkit: url_settings(toolkit, "ftp//nowhere")}))

    assert "address is invalid" in text and "MARSHO_TOOLKIT_SETTINGS" in text
