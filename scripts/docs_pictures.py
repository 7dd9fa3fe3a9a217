"""The documentation's pictures, made by the plugin itself rather than by hand.

    .venv/bin/python scripts/docs_pictures.py --out docs

writes, for each language of the site (`zh`: the bot speaks zh-CN; `en`: MARSHO_LANG=en),
`<out>/<lang>/assets/pictures/`:

- `chat.svg`: a question and Marsho's answer (through a tool) in nonebot-adapter-console's
  screen, saved as the Textual app saves its screenshots;
- `chart.png`: the chart a web service's answer becomes, as the plugin draws it for the chat
  (webservices.md's own example: its question and its service's chart);
- `usage.png`: `marsho.usage all`'s chart over a few made-up days of use;
- `status.svg`: `marsho.status` in the console.

    .venv/bin/python scripts/docs_pictures.py --readme docs/readme-chat.svg

writes only the README's picture: the Chinese chat.svg with its clock and ids fixed, so that the
committed file changes only when the screen does.

Each language is a `bot.py --console` of its own (the console adapter, its Textual screen run
headless by a pilot that types as a person would) on a temporary data folder, with explicit
settings: the developer's `.env`, environment and data are never read. The model is a fake
OpenAI-compatible endpoint on 127.0.0.1 (tests/fake_openai.py) whose answers are fixed here, so
are the web service's chart and the usage rows: the pictures come out the same every time, save
the clock and the latencies on the screen. No network is needed. The charts are PNGs because the
plugin's renderer (tools/charts.py) draws PNGs for the chat; a picture is caught where the
renderer hands it back.
"""

from __future__ import annotations

import argparse
import html
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # tests/fake_openai.py, and the plugin of this checkout

PICTURES = ("chat.svg", "chart.png", "usage.png", "status.svg")
"""Every picture made, per language, in the order the bot makes them."""

LANGUAGES = {"zh": "zh-CN", "en": "en"}
"""The site's language folders and the MARSHO_LANG the bot speaks in each."""

SCREEN = (110, 30)
"""The console's columns and rows in the screenshots."""

WORKER_SECONDS = 90.0
"""How long one language's bot may take for all its pictures (about 10 s on a quiet machine)."""

ANSWER_SECONDS = 30.0
"""How long the bot may take to answer one line typed into the console."""


@dataclass(frozen=True)
class Scene:
    """What is typed for a picture, the tool call the fake model makes for it (or none), and the
    model's answer once the tool answered."""

    question: str
    answer: str
    tool: str = ""
    arguments: dict[str, Any] | None = None


def page_example(lang: str) -> tuple[str, dict[str, Any]]:
    """What docs/<lang>/webservices.md shows: the question asked in the chat (its text block's
    `marsho ...` line) and the chart its service answers (its json block of `"type": "chart"`),
    so that the page's picture is of the page's own example."""
    from tests.docs_blocks import blocks

    found = blocks(f"{lang}/webservices.md")
    chart = next(json.loads(b.text) for b in found if b.language == "json" and '"type": "chart"' in b.text)
    question = next(line for b in found if b.language == "text"
                    for line in b.text.splitlines() if line.startswith("marsho "))
    return question, chart


SCENES: dict[str, dict[str, Scene]] = {
    "zh": {
        "chat": Scene("marsho 5 英里是多少公里？", "5 英里约等于 8.05 公里。",
                      "units__convert", {"value": 5, "from_unit": "英里", "to_unit": "公里"}),
        "chart": Scene(page_example("zh")[0], "北店二月卖得最好（200 件），三月回落到 170 件。",
                       "services__sales", {"shop": "北店"}),
    },
    "en": {
        "chat": Scene("marsho how many kilometres is 5 miles?", "5 miles is about 8.05 km.",
                      "units__convert", {"value": 5, "from_unit": "mile", "to_unit": "km"}),
        "chart": Scene(page_example("en")[0], "North sold best in February (200), then 170 in March.",
                       "services__sales", {"shop": "north"}),
    },
}

USAGE_USERS = (("10001", "deepseek-chat"), ("10002", "deepseek-chat"), ("10003", "qwen-plus"))
USAGE_DAYS = 28
"""Made-up use of a group: each of USAGE_USERS on most of the last USAGE_DAYS days (`usage_rows`)."""


FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}")
"""Textual's web font in its SVG screenshots (Fira Code from cdnjs)."""

TERMINAL_FONT = "font-family: Fira Code, monospace;"
"""The font rule of the screen's text in Textual's screenshots (rich's SVG export)."""

FONTS = ('font-family: "Fira Code", "Noto Sans Mono CJK SC", "WenQuanYi Micro Hei Mono", '
         '"Sarasa Mono SC", "Microsoft YaHei Mono", "Noto Color Emoji", "Apple Color Emoji", '
         '"Segoe UI Emoji", monospace;')
"""The screen's fonts in our pictures: a monospace font, then ones that hold Chinese at two cells
(the screen speaks zh-CN) and emoji (the console's channel and user lists), so that a viewer
without Fira Code sees neither boxes nor a proportional fallback."""

README_LANG = "zh"
"""The README's picture is the chat in the bot's default language (`--readme`)."""

CLOCK = re.compile(r"(<text\b[^>]*>)(\d{2}:\d{2}(?::\d{2})?)(</text>)")
"""A text of the screen that is only a time: the header's clock, a message's time."""

TEXT_CONTENT = re.compile(r"(<text\b[^>]*>)([^<]*)(</text>)")
MESSAGE_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{16}(?![0-9a-f])")
"""The console's id of a message, which a reply quotes ("> 回复<id>的消息")."""

RICH_ID = re.compile(r"\bterminal-\d+")
"""The ids rich derives from the screen's content (its CSS classes and clip paths)."""

TEXT_ELEMENT = re.compile(r'(<text\b[^>]*?\btextLength=")([0-9.]+)("[^>]*>)([^<]*)(</text>)')


class PictureError(RuntimeError):
    """A picture could not be made; the message names it and says why."""


# --- the fake model and the fake web service (in the parent process) ----------------------------

def _last_question(messages: list[dict[str, Any]]) -> tuple[str, bool]:
    """The last user message's text, and whether a tool answered after it."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
    content = messages[last].get("content") if last >= 0 else ""
    if isinstance(content, list):
        content = " ".join(part.get("text", "") for part in content if isinstance(part, dict))
    answered = any(m.get("role") == "tool" for m in messages[last + 1:])
    return str(content or ""), answered


def _scene_of(question: str) -> Scene | None:
    for scenes in SCENES.values():
        for scene in scenes.values():
            if scene.question.split(" ", 1)[1] in question:
                return scene
    return None


def respond(body: dict[str, Any]) -> Any:
    """The fake model: the scene's tool call, then its answer; "ok" to anything else."""
    from tests.fake_openai import text, tool_calls

    question, answered = _last_question(body.get("messages") or [])
    scene = _scene_of(question)
    if scene is None:
        return text("ok")
    offered = {tool.get("function", {}).get("name") for tool in body.get("tools") or []}
    if scene.tool and not answered:
        if scene.tool not in offered:
            return text(f"(the tool {scene.tool} was not offered: {sorted(n for n in offered if n)})")
        return tool_calls((scene.tool, scene.arguments or {}))
    return text(scene.answer)


def _sales_service() -> Any:
    """A web service on 127.0.0.1 answering `POST /sales/<lang>` with the chart of that
    language's webservices.md."""
    from tests.loopback import QuietHandler, serve

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            _, answer = page_example(self.path.rstrip("/").rsplit("/", 1)[-1])
            body = json.dumps(answer, ensure_ascii=False).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return serve(Handler)


def _services_file(folder: Path, url: str) -> Path:
    path = folder / "webservices.json"
    path.write_text(json.dumps({"toolkit": "services", "tools": [{
        "name": "sales", "description": "A shop's monthly sales, as a chart", "url": url,
        "parameters": {"type": "object", "properties": {"shop": {"type": "string"},
                                                        "months": {"type": "integer"}},
                       "required": ["shop"]}}]}), encoding="utf-8")
    return path


# --- one language's bot (a worker process) ---------------------------------------------------------

def worker_env(lang: str, base_url: str, work: Path, services: Path) -> dict[str, str]:
    """The whole environment of a language's bot: nothing of the developer's but PATH."""
    return {
        "PATH": os.environ.get("PATH", ""), "HOME": str(work), "TMPDIR": str(work),
        "MPLCONFIGDIR": str(work / "matplotlib"), "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8",
        "TERM": "xterm-256color", "COLUMNS": str(SCREEN[0]), "LINES": str(SCREEN[1]),
        "MARSHO_LANG": LANGUAGES[lang], "MARSHO_BASE_URL": base_url, "MARSHO_API_KEY": "sk-docs-pictures",
        "MARSHO_MODEL": "deepseek-chat", "MARSHO_WEBSERVICES_FILE": str(services),
        "LOCALSTORE_DATA_DIR": str(work / "data"), "LOCALSTORE_CACHE_DIR": str(work / "cache"),
        "LOCALSTORE_CONFIG_DIR": str(work / "config"),
    }


class Worker:
    """The pictures of one language, made in the running bot by the console's pilot."""

    def __init__(self, lang: str, folder: Path) -> None:
        self.lang = lang
        self.folder = folder
        self.scenes = SCENES[lang]
        self.charts: list[bytes] = []
        self.failure: str | None = None

    def start(self) -> None:
        """NoneBot with the console adapter and the plugin, as `bot.py --console` starts them,
        the console's screen headless and driven by `pilot`."""
        import nonebot
        from nonebot.adapters.console import Adapter as ConsoleAdapter
        from nonechat import Frontend

        worker = self
        run_async = Frontend.run_async

        async def headless(self: Frontend, **_: Any) -> Any:
            return await run_async(self, headless=True, size=SCREEN, auto_pilot=worker.pilot)

        Frontend.run_async = headless  # type: ignore[method-assign]
        nonebot.init(driver="~none", _env_file=(str(self.folder / "no-such.env"),), log_level="INFO")
        nonebot.get_driver().config.superusers.add("user")  # as bot.py --console does
        nonebot.get_driver().register_adapter(ConsoleAdapter)
        nonebot.load_plugin("nonebot_plugin_marsho")
        self._tap_charts()
        # the console shows the log in its own screen: what goes wrong reaches the worker's log too
        nonebot.logger.add(sys.stderr, level="WARNING", format="{time:HH:mm:ss} {level} {message}")
        nonebot.run()

    def _tap_charts(self) -> None:
        """Keep each chart the plugin's renderer draws (both the web service's and the bill's
        go through `render_table`)."""
        from nonebot_plugin_marsho.tools import charts

        render_table = charts.render_table

        def kept(*args: Any, **kwargs: Any) -> bytes:
            png = render_table(*args, **kwargs)
            self.charts.append(png)
            return png

        charts.render_table = kept  # type: ignore[assignment]

    async def pilot(self, pilot: Any) -> None:
        import nonebot

        try:
            await self._scenes(pilot)
        except PictureError as error:
            self.failure = str(error)
        except Exception as error:  # the pilot's own set-up
            self.failure = f"{type(error).__name__}: {error}"
        finally:
            pilot.app.exit()
            nonebot.get_driver().exit()  # type: ignore[attr-defined]

    async def _scenes(self, pilot: Any) -> None:
        chat, chart = self.scenes["chat"], self.scenes["chart"]
        step = "chat.svg"
        try:
            app = await _ready(pilot)
            await self._ask(pilot, chat.question, chat.answer)
            await self._save_screen(pilot, step)
            step = "chart.png"
            await self._ask(pilot, chart.question, chart.answer, chart=True)
            self._save_chart(step)
            step = "usage.png"
            await _write_usage(app)
            await self._ask(pilot, "marsho.usage all", chart=True)
            self._save_chart(step)
            step = "status.svg"
            await _clear(pilot)
            await self._ask(pilot, "marsho.status")
            await self._save_screen(pilot, step)
        except Exception as error:
            raise PictureError(f"{step}: {error}") from error

    async def _ask(self, pilot: Any, line: str, answer: str = "", *, chart: bool = False) -> None:
        """Type `line` as a person would (Ctrl+/ focuses the input line) and wait for the bot's
        reply (the one holding `answer`, when given; and its chart) to be drawn."""
        from textual.widgets import Input

        frontend = pilot.app
        backend = frontend.backend
        bot_id = backend.current_bot.id

        def replies() -> list[str]:
            return [str(m.message) for m in backend.storage.chat_history(backend.current_channel)
                    if m.user.id == bot_id]

        before, charts = len(replies()), len(self.charts)
        await pilot.press("ctrl+underscore")
        # as an input method or a paste puts it in: Textual's pilot cannot press "？"
        frontend.query_one(Input).insert_text_at_cursor(line)
        await pilot.press("enter")
        deadline = time.monotonic() + ANSWER_SECONDS
        while not any(answer in reply for reply in replies()[before:]):
            if time.monotonic() > deadline:
                raise PictureError(f"no answer to {line!r} within {ANSWER_SECONDS:g} s "
                                   f"(the bot said: {replies()[before:]!r})")
            await pilot.pause(0.1)
        if chart:
            while len(self.charts) == charts:  # the picture goes out after the text
                if time.monotonic() > deadline:
                    raise PictureError(f"no chart drawn for {line!r}")
                await pilot.pause(0.1)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.5)  # the reply's bubble slides in

    async def _save_screen(self, pilot: Any, name: str) -> None:
        from textual.widgets import Input

        # a cursor that does not blink: caught on or off, it would make each run's picture differ
        pilot.app.query_one(Input).cursor_blink = False
        await pilot.pause(0.2)
        svg = pilot.app.export_screenshot(title="marsho")
        (self.folder / name).write_text(local_fonts(fit_cells(svg)), encoding="utf-8")

    def _save_chart(self, name: str) -> None:
        if not self.charts:
            raise PictureError("the plugin drew no chart")
        (self.folder / name).write_bytes(self.charts[-1])


def fit_cells(svg: str) -> str:
    """`svg` (rich's export, as Textual saves screenshots) with each text's `textLength` as wide
    as the terminal cells it covers.

    rich writes `textLength` as the cell width times the number of characters, while it places
    each text by cells (rich 15): a Chinese character or an emoji covers two cells, so every
    Chinese line is squeezed into half its width and overlaps the text after it."""
    from rich.cells import cell_len  # rich ships with textual, which the console adapter uses

    def fitted(match: re.Match[str]) -> str:
        text = html.unescape(match[4])
        if not text:
            return match[0]
        cell = float(match[2]) / len(text)
        return f"{match[1]}{format(cell * cell_len(text), 'g')}{match[3]}{match[4]}{match[5]}"

    return TEXT_ELEMENT.sub(fitted, svg)


def local_fonts(svg: str) -> str:
    """`svg` without its web font (the screenshot would fetch it from a CDN wherever it is
    shown) and with FONTS for the screen's text."""
    return FONT_FACE.sub("", svg).replace(TERMINAL_FONT, FONTS)


def steady(svg: str) -> str:
    """`svg` with what changes from one run to the next fixed, for a picture that is committed
    (the README's): the clock at 12:00, the quoted message's id, the ids rich derives from the
    screen. Each stays as long as it was, so nothing moves on the screen."""
    svg = CLOCK.sub(lambda m: m[1] + "12:00:00"[:len(m[2])] + m[3], svg)
    svg = TEXT_CONTENT.sub(lambda m: m[1] + MESSAGE_ID.sub("0123456789abcdef", m[2]) + m[3], svg)
    return RICH_ID.sub("terminal-marsho", svg)


def make_readme_picture(path: Path) -> Path:
    """The README's picture at `path`: README_LANG's chat.svg, steady."""
    with tempfile.TemporaryDirectory(prefix="marsho-readme-picture-") as temp:
        made = make_pictures(Path(temp), [README_LANG])
        chat = next(p for p in made if p.name == "chat.svg")
        svg = steady(chat.read_text(encoding="utf-8"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg, encoding="utf-8")
    return path


async def _ready(pilot: Any) -> Any:
    """The running Marsho once its services are built (the console is up before them)."""
    from nonebot_plugin_marsho.chat.app import running

    deadline = time.monotonic() + ANSWER_SECONDS
    while True:
        app = running.get()
        if app.services is not None:
            return app
        if time.monotonic() > deadline:
            raise PictureError(f"the bot did not start: {app.problem}")
        await pilot.pause(0.1)


def usage_rows(now: datetime) -> list[Any]:
    """A group's made-up requests of the last USAGE_DAYS days before `now`: the same every run
    (busier at weekends' ends, a quiet day now and then)."""
    from nonebot_plugin_marsho.store.usage import UsageRow

    rows = []
    for back in range(USAGE_DAYS - 1, -1, -1):
        at = now - timedelta(days=back)
        for number, (user, model) in enumerate(USAGE_USERS):
            questions = (back * 7 + number * 5) % 11 + (6 if back % 7 in (1, 2) else 0)
            if questions < 2:
                continue  # nobody asked that day
            prompt = questions * (1_400 + 150 * number)
            rows.append(UsageRow(
                created_at=at.timestamp(), day=at.date().isoformat(), session_key="OneBot V11:group:20001",
                user_key=f"OneBot V11:{user}", group_key="OneBot V11:20001", model=model,
                endpoint="https://api.example.com/v1", prompt_tokens=prompt,
                completion_tokens=questions * 330, cached_tokens=prompt // 2, questions=questions))
    return rows


async def _write_usage(app: Any) -> None:
    """usage_rows into the bot's database, as the meter writes a group's requests."""
    await app.meter.store.write(usage_rows(app.meter.now()))


async def _clear(pilot: Any) -> None:
    """An empty chat for the next screenshot (Ctrl+L: the console's "Clear chat history")."""
    await pilot.press("ctrl+l")
    await pilot.pause(0.2)


def run_worker(lang: str, folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    worker = Worker(lang, folder)
    worker.start()
    if worker.failure:
        print(f"docs_pictures: {lang}/{worker.failure}", file=sys.stderr)
        return 1
    return 0


# --- the parent: both languages at once ------------------------------------------------------------

def make_pictures(out: Path, languages: list[str] | None = None) -> list[Path]:
    """Every picture of `languages` (all) under `out`; PictureError naming each one that failed."""
    from tests.fake_openai import FakeOpenAI

    languages = languages or list(LANGUAGES)
    with tempfile.TemporaryDirectory(prefix="marsho-docs-pictures-") as temp, FakeOpenAI() as endpoint:
        endpoint.responder = respond
        service = _sales_service()
        runs: list[tuple[str, Path, subprocess.Popen[bytes], Path]] = []
        try:
            for lang in languages:
                runs.append(_start_worker(lang, out, Path(temp), endpoint.base_url,
                                          f"http://127.0.0.1:{service.server_address[1]}/sales/{lang}"))
            problems = [problem for run in runs if (problem := _finished(*run))]
        finally:
            for _, _, process, _ in runs:
                if process.poll() is None:  # only when something above went wrong
                    process.kill()
                    process.wait()
            service.shutdown()
            service.server_close()
    if problems:
        raise PictureError("\n".join(problems))
    return picture_paths(out, languages)


def _start_worker(lang: str, out: Path, temp: Path, base_url: str, service_url: str
                  ) -> tuple[str, Path, subprocess.Popen[bytes], Path]:
    """A language's bot in a process of its own, on a work folder of its own in `temp`; the
    language's pictures of an earlier run are removed first, so none is left stale."""
    work = temp / lang
    work.mkdir()
    folder = out / lang / "assets" / "pictures"
    for name in PICTURES:
        (folder / name).unlink(missing_ok=True)
    env = worker_env(lang, base_url, work, _services_file(work, service_url))
    log = work / "worker.log"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker", lang, "--out", str(folder)],
            cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT)
    return lang, folder, process, log


def picture_paths(out: Path, languages: list[str] | None = None) -> list[Path]:
    """Where the pictures of `languages` (all) go under the docs folder `out`."""
    return [out / lang / "assets" / "pictures" / name for lang in languages or LANGUAGES for name in PICTURES]


def _finished(lang: str, folder: Path, process: subprocess.Popen[bytes], log: Path) -> str:
    """"" when the worker made every picture, else what failed (its log's end to say why)."""
    try:
        process.wait(WORKER_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    missing = [name for name in PICTURES if not _made(folder / name)]
    if process.returncode == 0 and not missing:
        return ""
    said = log.read_text("utf-8", errors="replace").strip().splitlines()
    reason = next((line for line in reversed(said) if line.startswith("docs_pictures: ")), "")
    tail = "\n    ".join([line for line in said if not line.startswith("docs_pictures: ")][-15:])
    return (f"docs_pictures: {lang}: not made: {', '.join(f'{lang}/{n}' for n in missing)}"
            f" (exit {process.returncode})\n  {reason or 'its log ends:'}\n    {tail}")


def _made(path: Path) -> bool:
    return path.is_file() and path.stat().st_size > 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Make the documentation's pictures from the plugin.")
    parser.add_argument("--out", type=Path, default=REPO / "docs",
                        help="the docs folder: pictures go in <out>/<lang>/assets/pictures/")
    parser.add_argument("--lang", action="append", choices=sorted(LANGUAGES),
                        help="only this language (repeatable); default: all")
    parser.add_argument("--readme", type=Path, metavar="PATH",
                        help="make only the README's picture (the chat, steady) at PATH: "
                             "docs/readme-chat.svg")
    parser.add_argument("--worker", choices=sorted(LANGUAGES), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker(args.worker, args.out)
    started = time.monotonic()
    try:
        if args.readme:
            made = [make_readme_picture(args.readme)]
        else:
            made = make_pictures(args.out.resolve(), args.lang)
    except PictureError as error:
        print(error, file=sys.stderr)
        return 1
    where = args.readme or args.out
    print(f"docs_pictures: {len(made)} pictures in {where} ({time.monotonic() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
