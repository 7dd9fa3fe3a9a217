"""Built-in toolkit `exchange`: currency conversion and exchange rates from ExchangeRate-API's
keyless open endpoint, open.er-api.com (`GET /v6/latest/{base}`, updated once a day).

Off until the owner enables it (`MARSHO_ENABLED_TOOLKITS=["exchange"]`): the base currency
code is sent to open.er-api.com (amounts and target currencies stay in the bot: the conversion
is computed locally). The base URL is a preset, so a mirror or a test fake can stand in::

    MARSHO_TOOLKIT_SETTINGS={"exchange": {"base_url": "http://127.0.0.1:8080"}}

The open endpoint's terms ask for attribution, which every answer carries.
"""

from __future__ import annotations

import functools
import math
import re
import ssl
from typing import Any, TypeGuard
from urllib.parse import quote, urlsplit

import httpx

from nonebot_plugin_marsho.tools import Toolbox, ToolResponse

BASE_URL = "https://open.er-api.com"
TIMEOUT = 10.0
USER_AGENT = "nonebot-plugin-marsho (exchange toolkit)"
ATTRIBUTION = "Rates by Exchange Rate API (https://www.exchangerate-api.com)"

CURRENCY_CODE = re.compile(r"^[A-Za-z]{3}$")
ALIASES = {"RMB": "CNY", "NTD": "TWD"}
"""Codes people use that ISO 4217 spells otherwise."""

COMMON = ["USD", "EUR", "CNY", "JPY", "GBP", "HKD", "TWD", "KRW", "SGD", "AUD", "CAD", "CHF",
          "RUB", "INR"]
"""Shown by `rates` when no currencies are named."""

ERROR_TYPES = {
    "unsupported-code": "does not support the currency code {base}",
    "malformed-request": "could not understand the request",
    "invalid-key": "rejected the API key",
    "inactive-account": "says the account is inactive",
    "quota-reached": "says the request quota is used up; try again later",
    "rate-limited": "is rate limiting requests; try again later",
    "no-data-available": "has no data for this request",
}
"""ExchangeRate-API's `error-type` values, worded."""

tools = Toolbox()


class ExchangeError(Exception):
    """A failure worded for the model to relay."""


def _currency(code: str, role: str) -> str:
    text = code.strip().upper()
    text = ALIASES.get(text, text)
    if not CURRENCY_CODE.match(text):
        raise ExchangeError(
            f"{code!r} is not a currency code: give the {role} currency as a three-letter "
            "ISO 4217 code such as USD, EUR, CNY or JPY"
        )
    return text


def _error_text(data: Any, base: str) -> str | None:
    """ExchangeRate-API errors: {"result": "error", "error-type": "unsupported-code"}."""
    if isinstance(data, dict) and data.get("result") == "error":
        kind = str(data.get("error-type") or "unknown")
        wording = ERROR_TYPES.get(kind, "reported an error")
        return f"{wording.format(base=base)} (error-type {kind!r})"
    return None


@functools.cache
def _tls() -> ssl.SSLContext:
    """One TLS context for all calls: building one (reading the CA bundle) takes ~30 ms."""
    return httpx.create_ssl_context()


def _client(timeout: float) -> httpx.AsyncClient:
    return httpx.AsyncClient(timeout=timeout, verify=_tls(), follow_redirects=True,
                             headers={"User-Agent": USER_AGENT})


async def _latest(base: str, base_url: str, timeout: float) -> dict[str, Any]:
    """The `/v6/latest/{base}` answer, checked; an ExchangeError says what went wrong."""
    root = base_url.rstrip("/")
    url = f"{root}/{quote(base)}" if root.endswith("/v6/latest") else f"{root}/v6/latest/{quote(base)}"
    host = urlsplit(url).netloc or url
    service = f"ExchangeRate-API ({host})"
    try:
        async with _client(timeout) as client:
            response = await client.get(url)
    except httpx.TimeoutException:
        raise ExchangeError(f"{service} did not answer within {timeout:g} s; try again later") from None
    except (httpx.InvalidURL, httpx.UnsupportedProtocol) as error:
        raise ExchangeError(f"the configured exchange-rate address is invalid ({error}); "
                            "the bot owner must fix MARSHO_TOOLKIT_SETTINGS") from None
    except httpx.HTTPError as error:
        detail = str(error) or type(error).__name__
        raise ExchangeError(f"could not reach {service}: {detail}") from None
    try:
        data = response.json()
    except ValueError:
        data = None
        if response.status_code < 400:
            snippet = response.text.strip()[:80]
            raise ExchangeError(f"{service} answered HTTP {response.status_code} with something "
                                f"that is not JSON: {snippet!r}") from None
    problem = _error_text(data, base)
    if problem is not None:
        status = f"HTTP {response.status_code}: " if response.status_code >= 400 else ""
        raise ExchangeError(f"{service} {status}{problem}")
    if response.status_code >= 400:
        body = response.text.strip()[:200] or "(empty body)"
        raise ExchangeError(f"{service} answered HTTP {response.status_code} "
                            f"{response.reason_phrase}: {body}")
    rates = data.get("rates") if isinstance(data, dict) else None
    if not isinstance(rates, dict) or not rates:
        raise ExchangeError(f"{service} answered without exchange rates")
    return data


def _is_rate(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _rate(rates: dict[str, Any], code: str, base: str) -> float:
    value = rates.get(code)
    if not _is_rate(value):
        raise ExchangeError(f"there is no exchange rate from {base} to {code}: {code} is unknown "
                            "or unsupported (use three-letter ISO 4217 codes)")
    return float(value)


def _money(value: float) -> str:
    """Two decimals with thousands separators; small amounts to four significant digits."""
    if value != 0 and abs(value) < 1:
        return f"{value:.4g}"
    return f"{value:,.2f}"


def _factor(value: float) -> str:
    return f"{value:.6g}"


def _updated(data: dict[str, Any]) -> str:
    moment = data.get("time_last_update_utc")
    return f"updated {moment}" if moment else "date unknown"


@tools.tool(base_url=BASE_URL, timeout=TIMEOUT)
async def convert(
    amount: float,
    from_currency: str,
    to_currency: str,
    base_url: str = BASE_URL,
    timeout: float = TIMEOUT,
) -> str | ToolResponse:
    """Convert an amount of money from one currency to another at today's reference rate.

    Rates come from ExchangeRate-API's open endpoint (open.er-api.com), updated daily: good for
    everyday conversions, not for trading. Only the source currency code is sent out.

    Args:
        amount: How much money, in the source currency, e.g. 100.
        from_currency: Source currency as an ISO 4217 code, e.g. USD.
        to_currency: Target currency as an ISO 4217 code, e.g. CNY.
        base_url: Base URL of the exchange-rate API (set by the bot owner).
        timeout: Seconds to wait for the answer (set by the bot owner).
    """
    try:
        if not math.isfinite(amount):
            raise ExchangeError("the amount must be a finite number")
        source = _currency(from_currency, "source")
        target = _currency(to_currency, "target")
        data = await _latest(source, base_url, timeout)
        rate = _rate(data["rates"], target, source)
    except ExchangeError as error:
        return ToolResponse.error(str(error))
    converted = amount * rate
    return (
        f"{_money(amount)} {source} = {_money(converted)} {target} "
        f"(1 {source} = {_factor(rate)} {target}; 1 {target} = {_factor(1 / rate)} {source}; "
        f"{_updated(data)}).\n{ATTRIBUTION}"
    )


@tools.tool(base_url=BASE_URL, timeout=TIMEOUT)
async def rates(
    base: str = "USD",
    currencies: list[str] | None = None,
    base_url: str = BASE_URL,
    timeout: float = TIMEOUT,
) -> str | ToolResponse:
    """Get today's exchange rates of a base currency against other currencies.

    From ExchangeRate-API's open endpoint (open.er-api.com), updated daily; about 160
    currencies. Only the base currency code is sent out.

    Args:
        base: Base currency as an ISO 4217 code, e.g. USD or CNY.
        currencies: ISO 4217 codes to list, e.g. ["EUR", "JPY"]; a set of major currencies if
            omitted.
        base_url: Base URL of the exchange-rate API (set by the bot owner).
        timeout: Seconds to wait for the answer (set by the bot owner).
    """
    try:
        source = _currency(base, "base")
        wanted = [_currency(code, "listed") for code in currencies or []]
        data = await _latest(source, base_url, timeout)
        table: dict[str, Any] = data["rates"]
        if wanted:
            unknown = [code for code in wanted if not _is_rate(table.get(code))]
            if unknown and len(unknown) == len(wanted):
                raise ExchangeError(f"no exchange rates from {source} to {', '.join(unknown)}: "
                                    "unknown or unsupported currency codes")
        else:
            wanted = [code for code in COMMON if code != source and _is_rate(table.get(code))]
            unknown = []
    except ExchangeError as error:
        return ToolResponse.error(str(error))
    lines = [f"1 {source} in other currencies ({_updated(data)}):"]
    lines += [f"{code} {_factor(float(table[code]))}" for code in wanted if code not in unknown]
    if unknown:
        lines.append(f"No rate for: {', '.join(unknown)} (unknown or unsupported codes).")
    if not currencies:
        lines.append(f"{len(table) - 1} currencies are available; name others to see them.")
    lines.append(ATTRIBUTION)
    return "\n".join(lines)
