"""Commands are declarations in one registry (chat/commands/): a command without a handler or a
name declared twice fails, every command has its help in both languages, and the bot answers,
refuses and suggests from whatever the registry holds."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import pytest
from nonebug import App

from nonebot_plugin_marsho.chat import matchers
from nonebot_plugin_marsho.chat.commands import (
    REGISTRY,
    Answer,
    Command,
    CommandContext,
    DuplicateCommandError,
    Registry,
)
from nonebot_plugin_marsho.chat.matchers import Request, parse_request
from nonebot_plugin_marsho.chat.render import unknown_command_text, usage_text
from nonebot_plugin_marsho.i18n import EN, ZH, Texts
from tests.conftest import SUPERUSER_ID
from tests.onebot import group_message, private_message
from tests.test_persona import exchange

EN_TEXTS = Texts("en")


async def said(context: CommandContext) -> str:
    return f"alarms for {context.where.user_id}: {context.text or 'none'}"


# the declarations


def test_a_command_declared_without_a_handler_fails() -> None:
    with pytest.raises(TypeError, match="marsho.alarms is declared without a handler"):
        Command("alarms", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Command("alarms")  # type: ignore[call-arg]


def test_every_registered_command_has_a_handler_to_await() -> None:
    assert len(REGISTRY) == 20
    assert [c.name for c in REGISTRY.all() if not inspect.iscoroutinefunction(c.handler)] == []


def test_two_declarations_of_one_name_are_an_error_not_an_overwrite() -> None:
    registry = Registry([Command("alarms", said)])
    with pytest.raises(DuplicateCommandError, match="marsho.alarms is declared twice"):
        registry.register(Command("alarms", said, who="superuser"))
    kept = registry.get("alarms")
    assert kept is not None and kept.who == "member"


@pytest.mark.parametrize(("first", "second"), [
    (Command("alarms", said, aliases=("alarm",)), Command("alarm", said)),  # a name taken as an alias
    (Command("alarms", said), Command("later", said, aliases=("alarms",))),  # an alias taken as a name
    (Command("alarms", said, aliases=("r",)), Command("later", said, aliases=("r",))),  # one alias, twice
])
def test_a_word_shared_by_two_declarations_is_an_error(first: Command, second: Command) -> None:
    registry = Registry([first])
    with pytest.raises(DuplicateCommandError):
        registry.register(second)
    assert registry.names() == (first.name,)


@pytest.mark.parametrize("aliases", [("alarms",), ("alarm", "alarm")])
def test_a_command_cannot_declare_one_word_twice(aliases: tuple[str, ...]) -> None:
    with pytest.raises(DuplicateCommandError, match=f"marsho.{aliases[-1]} is declared twice"):
        Registry([Command("alarms", said, aliases=aliases)])


@pytest.mark.parametrize("name", ["Alarms", "chat", "unknown", "1st", "alarm me", "", "x" * 33])
def test_a_name_the_trigger_cannot_read_is_refused(name: str) -> None:
    with pytest.raises(ValueError):
        Command(name, said)


def test_the_registry_has_no_word_twice() -> None:
    words = [word for command in REGISTRY.all() for word in command.words]
    assert len(words) == len(set(words))


@pytest.mark.parametrize("catalogue", [EN, ZH], ids=["en", "zh-CN"])
def test_every_registered_command_has_its_help_line_in_both_languages(catalogue: dict[str, str]) -> None:
    for command in REGISTRY.all():
        assert command.help_key in catalogue, command.name
        line = catalogue[command.help_key].format(name="marsho")
        assert line.startswith(f"marsho.{command.name} "), line


def test_the_help_lists_every_registered_command_in_its_order() -> None:
    lines = usage_text(EN_TEXTS, ["marsho"], False).split("\n")
    assert lines[-len(REGISTRY):] == [EN_TEXTS(c.help_key, name="marsho") for c in REGISTRY.all()]


# reading a message with a registry


def test_the_command_words_are_the_registrys() -> None:
    registry = Registry([*REGISTRY.all(), Command("alarms", said, aliases=("alarm",))])
    assert parse_request("marsho.alarms soon", ["marsho"], {"/"}, registry) == Request("alarms", "soon")
    assert parse_request("marsho.alarm soon", ["marsho"], {"/"}, registry) == Request("alarms", "soon")
    assert parse_request("小棉。alarm", ["小棉"], {"/"}, registry) == Request("alarms", "")
    assert parse_request("marsho.alarms soon", ["marsho"], {"/"}) == Request("unknown", "alarms")


def test_the_did_you_mean_comes_from_the_registry(alarms: Registry) -> None:
    lines = unknown_command_text(EN_TEXTS, "marsho", "alarmz", alarms.names()).split("\n")
    assert lines[:2] == ["marsho.alarmz is not one of my commands. Did you mean marsho.alarms? All of them:",
                         "marsho.alarms  alarms things"]
    assert len(lines) == 1 + len(alarms)
    assert "Did you mean" not in unknown_command_text(EN_TEXTS, "marsho", "alarmz")  # the bot's own


# the bot answering from a registry of the test's own


@pytest.fixture
def alarms(monkeypatch: pytest.MonkeyPatch) -> Iterator[Registry]:
    """The bot's registry with four commands more, and their help lines."""
    async def secret(context: CommandContext) -> Answer:
        return Answer(f"the secret, for {context.role}")

    async def broken(context: CommandContext) -> str:
        raise RuntimeError("a bug")

    registry = Registry([
        *REGISTRY.all(), Command("alarms", said, aliases=("alarm",)),
        Command("secret", secret, who="superuser"), Command("tidy", secret, who="admin", where="groups"),
        Command("broken", broken),
    ])
    for name in ("alarms", "secret", "tidy", "broken"):
        monkeypatch.setitem(EN, f"usage.{name}", f"{{name}}.{name}  {name} things")
        monkeypatch.setitem(ZH, f"usage.{name}", f"{{name}}.{name}  {name}")
    monkeypatch.setattr(matchers, "REGISTRY", registry)
    yield registry


async def test_a_command_registered_later_is_answered_by_its_name_and_alias(
    app: App, plugin_engine, alarms: Registry
) -> None:
    await exchange(app, (group_message("marsho.alarms tomorrow 9:00"), "alarms for 10001: tomorrow 9:00"),
                   (private_message("marsho.alarm"), "alarms for 10001: none"))


async def test_an_unknown_word_is_told_the_closest_command_of_the_registry(
    app: App, plugin_engine, alarms: Registry
) -> None:
    expected = unknown_command_text(EN_TEXTS, "marsho", "alarmz", alarms.names())
    assert expected.startswith("marsho.alarmz is not one of my commands. Did you mean marsho.alarms?")
    await exchange(app, (group_message("marsho.alarmz"), expected))


async def test_the_help_lists_a_command_registered_later(
    app: App, plugin_engine, marsho, alarms: Registry
) -> None:
    config = marsho.config
    help_text = usage_text(EN_TEXTS, config.trigger_names, config.marsho_at, alarms.names())
    assert "marsho.alarms  alarms things" in help_text.split("\n")
    await exchange(app, (group_message("marsho.help"), help_text))


async def test_who_may_use_a_command_is_checked_from_its_declaration(
    app: App, plugin_engine, alarms: Registry
) -> None:
    boss = int(SUPERUSER_ID)
    await exchange(
        app,
        (group_message("marsho.secret"), "Only the bot's superusers may use marsho.secret."),
        (group_message("marsho.secret", user_id=boss), "the secret, for superuser"),
        (group_message("marsho.tidy"), "Only group admins and superusers may use marsho.tidy."),
        (group_message("marsho.tidy", role="admin"), "the secret, for admin"),
        (private_message("marsho.tidy", user_id=boss), "marsho.tidy works in groups only."),
    )


async def test_a_command_that_fails_gets_the_failures_reply(app: App, plugin_engine, alarms: Registry) -> None:
    brief = EN_TEXTS("error.brief", reason=EN_TEXTS("brief.internal"))
    detail = EN_TEXTS("error.internal", error="RuntimeError: a bug")
    await exchange(app, (group_message("marsho.broken"), brief),
                   (group_message("marsho.broken", user_id=int(SUPERUSER_ID)), detail))


# who may use each form: declared once (Command.forms), held by the handlers


FORM_EXAMPLES: dict[tuple[str, str], tuple[str, str]] = {
    # (command, form): (the text after the command's name, "group" or "private")
    ("reset", "own"): ("", "private"), ("reset", "shared"): ("", "group"),
    ("tools", "list"): ("", "private"), ("calls", "last"): ("", "private"),
    ("history", "show"): ("", "private"), ("help", "show"): ("", "private"),
    ("nickname", "show"): ("", "private"), ("nickname", "set"): ("Kitty", "private"),
    ("nickname", "reset"): ("reset", "private"),
    ("memory", "mine"): ("", "private"), ("memory", "forget"): ("forget all", "private"),
    ("memory", "group"): ("group", "group"), ("memory", "group_forget"): ("group forget all", "group"),
    ("memory", "of"): ("of 77003", "private"), ("memory", "other_group"): ("group 77004", "private"),
    ("reminders", "mine"): ("", "private"), ("reminders", "cancel"): ("cancel 1", "private"),
    ("reminders", "group"): ("group", "group"), ("reminders", "all"): ("all", "private"), ("reminders", "resume"): ("resume 1", "private"),
    ("context", "show"): ("", "group"), ("context", "on"): ("on", "group"), ("context", "off"): ("off", "group"),
    ("forget", "forget"): ("", "group"),
    ("persona", "show"): ("", "group"), ("persona", "set"): ("a cat", "group"),
    ("persona", "reset"): ("reset", "group"),
    ("active", "show"): ("", "group"), ("active", "chance"): ("0.1", "group"), ("active", "off"): ("off", "group"),
    ("active", "keywords"): ("keywords cat", "group"), ("active", "keywords_off"): ("keywords off", "group"),
    ("usage", "yours"): ("", "private"), ("usage", "all"): ("all", "private"),
    ("kb", "list"): ("", "private"), ("kb", "add"): ("add", "group"), ("kb", "add_own"): ("add", "private"),
    ("kb", "remove"): ("remove 1", "group"), ("kb", "remove_own"): ("remove 1", "private"),
}
"""Every form of the commands anyone may call (the others are refused before their handler)."""


def _context(app, command: Command, text: str, place: str, role: str) -> CommandContext:
    from nonebot_plugin_marsho.chat.where import Where
    from nonebot_plugin_marsho.store.session import session_key

    # ids of this test's own: what the forms change (memories, a group's settings) is nobody else's
    group = place == "group"
    where = Where("OneBot V11", "group" if group else "private", "77002" if group else "77001", "77001")
    key = session_key(where.platform, group_id=where.group_id, user_id=where.user_id, scope="group")
    return CommandContext(app=app, bot=None, event=None, where=where, role=role, key=key,  # type: ignore[arg-type]
                          shared=group, text=text, commands=REGISTRY, services=app.services)


def test_every_form_of_the_commands_anyone_may_call_has_an_example() -> None:
    forms = {(c.name, f.key) for c in REGISTRY.all() if c.who == "member" for f in c.forms}
    assert forms == set(FORM_EXAMPLES)


@pytest.mark.parametrize(("name", "key"), list(FORM_EXAMPLES), ids="-".join)  # type: ignore[arg-type]
async def test_each_form_refuses_exactly_those_its_declaration_leaves_out(
    marsho, plugin_engine, name: str, key: str
) -> None:
    command = REGISTRY.get(name)
    assert command is not None
    form = command.form(key)
    text, place = FORM_EXAMPLES[(name, key)]
    refusal = command.refused(_context(marsho, command, text, place, "member"), key)
    assert (refusal is None) == (form.who == "member")
    for role in ("member", "admin", "superuser"):
        context = _context(marsho, command, text, place, role)
        reply = (await command.answer(context)).text
        assert (reply == refusal) == (not form.allows(role)), (role, reply)  # type: ignore[arg-type]
