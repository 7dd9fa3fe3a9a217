"""`python -m nonebot_plugin_marsho`: check toolkits, call one tool, or ask once, with the settings
of `.env` in the current folder, exactly as the bot would."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

PACKAGE = "nonebot_plugin_marsho"


def say(*parts: Any, **options: Any) -> None:
    """print(), with the bot's secrets hidden (API keys, tokens, `${NAME}` values)."""
    from nonebot_plugin_marsho.redaction import redact

    print(*(redact(str(part)) for part in parts), **options)


def _load_plugin(verbose: bool) -> Any:
    """Initialise NoneBot from `.env` and load this package as the bot does; returns plugin.py."""
    import importlib
    import warnings

    import nonebot
    from nonebot.log import default_format, logger

    # the CLI talks to no chat platform: no adapter is expected
    warnings.filterwarnings("ignore", message="No adapters found")
    logger.remove()  # the log goes to stderr, so stdout holds only what the command prints
    logger.add(sys.stderr, level="DEBUG" if verbose else "WARNING", format=default_format,
               diagnose=False)
    nonebot.init(driver="~none")
    # runpy imported the package before NoneBot was initialised (so it wired nothing):
    # forget it, and let NoneBot load it as a plugin
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    if nonebot.load_plugin(PACKAGE) is None:
        raise SystemExit(f"{PACKAGE} could not be loaded as a NoneBot plugin (see the log above)")
    return importlib.import_module(f"{PACKAGE}.plugin")


def _print_toolset(toolset: Any) -> None:
    for toolkit in toolset.toolkits:
        say(f"✓ {toolkit.name}  ({toolkit.source}: {toolkit.path})")
        for tool in toolkit.tools:
            mark = "" if tool.permission == "everyone" else f"  [{tool.permission}]"
            say(f"    {tool.name}{mark}: {tool.summary}")
    for name in toolset.disabled:
        say(f"- {name}  (disabled in .env)")
    for name, sends in toolset.available.items():
        say(f"○ {name}  (off until MARSHO_ENABLED_TOOLKITS names it"
              + (f"; sends {sends})" if sends else ")"))
    for problem in toolset.warnings:
        say(f"! {problem.toolkit}: {problem}")
    for name, problems in toolset.failed_toolkits().items():
        say(f"✗ {name or '(toolset folder)'}")
        for problem in problems:
            say(f"    {problem}")


def command_tools(app: Any) -> int:
    """List and check every toolkit; non-zero when any failed to load."""
    toolset = app.load_toolset()
    _print_toolset(toolset)
    errors = len(toolset.errors)
    say(f"{len(toolset.toolkits)} toolkits, {len(toolset.tools)} tools, {errors} errors, "
          f"{len(toolset.warnings)} warnings")
    return 1 if errors else 0


async def command_call(app: Any, name: str, arguments: str) -> int:
    """Run one tool exactly as a model's call would (as the bot's owner)."""
    from nonebot_plugin_marsho.chat.app import held_secrets
    from nonebot_plugin_marsho.redaction import SECRETS
    from nonebot_plugin_marsho.tools import OWNER_CONTEXT, ToolCall, ToolRunner

    config = app.config
    toolset = app.load_toolset()
    SECRETS.add(*held_secrets(config, toolset))
    for problem in toolset.errors:
        say(f"✗ {problem.toolkit}: {problem}", file=sys.stderr)
    runner = ToolRunner(toolset, timeout=config.marsho_tool_timeout,
                        max_result_bytes=config.marsho_max_tool_result_bytes)
    try:
        result = await runner.run_one(ToolCall("cli", name, arguments), OWNER_CONTEXT)
    finally:
        runner.close()
    say(result.content)
    say(f"[{result.status} in {result.seconds:.2f} s]", file=sys.stderr)
    return 0 if result.ok else 1


async def command_ask(app: Any, text: str) -> int:
    """One turn against the configured endpoint, showing each tool call and result."""
    from nonebot_plugin_marsho.chat.render import reply_text
    from nonebot_plugin_marsho.exceptions import MarshoError
    from nonebot_plugin_marsho.tools import OWNER_CONTEXT

    def progress(call: Any, result: Any) -> None:
        if result is None:
            say(f"→ {call.name}({call.arguments})", flush=True)
        else:
            say(f"← {call.name} [{result.status}, {result.seconds:.2f} s]: {result.content}",
                  flush=True)

    await app.start()
    try:
        engine = app.require_engine()
        prompt = app.prompt.system(nickname=None, shared=False)  # with the time
        reply = await engine.chat("cli:local", text, OWNER_CONTEXT, system_prompt=prompt,
                                  progress=progress)
    except MarshoError as error:
        say(f"error: {error}", file=sys.stderr)
        return 1
    finally:
        await app.stop()
    say(reply_text(app.texts, reply, engine.max_tool_rounds, app.config.marsho_max_answer_chars))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {PACKAGE}",
        description="Use marsho's tools and endpoint from the shell, with the settings of .env.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show NoneBot's log")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("tools", help="list and check every toolkit; exit 1 on any error")
    call = commands.add_parser("call", help="run one tool as the model's call would")
    call.add_argument("name", help="full tool name, e.g. clock__now")
    call.add_argument("arguments", nargs="?", default="{}", help="JSON object of arguments")
    ask = commands.add_parser("ask", help="ask once, printing each tool call as it happens")
    ask.add_argument("text", help="the question")
    args = parser.parse_args(argv)
    app = _load_plugin(args.verbose).marsho
    if args.command == "tools":
        return command_tools(app)
    if args.command == "call":
        return asyncio.run(command_call(app, args.name, args.arguments))
    return asyncio.run(command_ask(app, args.text))


if __name__ == "__main__":
    sys.exit(main())
