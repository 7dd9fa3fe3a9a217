"""The command registry: one declaration per `marsho.<name>` (its names, who may use it and where,
its handler), kept by name and alias; a name declared twice is an error, never an overwrite."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from nonebot.adapters import Bot, Event

from ...agent.engine import Engine
from ...i18n import Texts
from ...tools.model import Role
from ..app import Marsho, Services
from ..where import Where

Who = Literal["member", "admin", "superuser"]
"""Who may use a command: anyone; a group's admins and owners (and superusers); superusers."""
Place = Literal["anywhere", "groups"]
"""Where a command works: any chat, or only groups and channels (it is about the group)."""

WORD = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""A command's name or alias: what `marsho.<word>` reads (chat/matchers.py's COMMAND_WORD) in
lower case; `marsho。<word>` reads only letters."""
NOT_COMMANDS = frozenset({"chat", "unknown"})
"""What chat/matchers.py's Request says when a message names no command: a question, or a word
that names none."""


@dataclass(frozen=True)
class Answer:
    """A command's reply: its text, and pictures sent after it (a chart)."""

    text: str
    pictures: Sequence[bytes] = ()


@dataclass(frozen=True)
class CommandContext:
    """What a command's handler is given: the running bot, the message, who sent it where, and
    the text after the command."""

    app: Marsho
    bot: Bot
    event: Event
    where: Where
    role: Role
    """The asker's role: superuser, else their role in the group (owner, admin), else member."""
    key: str
    """The session key of the asker's conversation here."""
    shared: bool
    """Whether that conversation is the group's (a group, MARSHO_SESSION_SCOPE=group)."""
    text: str
    """What follows the command's name, stripped."""
    commands: Registry
    """The registry the command was found in (what `marsho.help` lists)."""
    reserved: Sequence[str] = ()
    """Names nobody may take or speak as: the trigger words, the bot's NICKNAME, its account id."""
    services: Services | None = None
    """The services as the message found them (None before the bot was ready): a turn finishes
    on them even if the bot stops meanwhile and tears them down."""

    @property
    def t(self) -> Texts:
        """The texts in the chat's language (MARSHO_LANG)."""
        return self.app.texts

    @property
    def engine(self) -> Engine:
        """The engine the message found (the handler runs only once there is one)."""
        return self.services.engine if self.services is not None else self.app.require_engine()

    @property
    def name(self) -> str:
        """marsho's name as commands are written with it (MARSHO_NAME: `marsho.reset`)."""
        return self.app.config.marsho_name

    @property
    def admin(self) -> bool:
        """A group's admin or owner, or a superuser."""
        return self.role != "member"


Handler = Callable[[CommandContext], Awaitable["str | Answer"]]
"""A command's work: the context in, the reply out."""

RANK: dict[Who, int] = {"member": 0, "admin": 1, "superuser": 2}
"""Who outranks whom: a group's admins may do what members may, superusers what admins may."""
ROLE_RANK: dict[Role, int] = {"member": 0, "admin": 1, "owner": 1, "superuser": 2}


@dataclass(frozen=True)
class Form:
    """One way to write a command: what follows its name, who may use it so and where, and what
    it does (the catalogue's `form.<command>.<key>`, in both languages). The handler checks the
    asker with `Command.refused`, and the commands pages list the forms, so the two agree."""

    key: str
    args: str = ""
    """What follows the command's name, as the reference writes it: `forget <number>|all`."""
    who: Who = "member"
    where: Literal["anywhere", "groups", "private"] = "anywhere"
    refusal: str = ""
    """The catalogue key of what an asker who may not use it reads (given `name` and `command`);
    "" for the common one (`command.admins`, `command.superusers`)."""

    def allows(self, role: Role) -> bool:
        """Whether someone of `role` may use it."""
        return ROLE_RANK[role] >= RANK[self.who]


@dataclass(frozen=True)
class Command:
    """One `marsho.<name>`. Its help line is the catalogue's `usage.<name>`, in both languages
    (tests/test_command_registry.py checks)."""

    name: str
    handler: Handler
    who: Who = "member"
    where: Place = "anywhere"
    aliases: tuple[str, ...] = ()
    needs_model: bool = True
    """Answered only once the settings are valid and the model is ready; False for what must work
    even then (`marsho.help`)."""
    forms: tuple[Form, ...] = ()
    """Every way to write it, with who may (at least `who`); the commands pages list them."""

    def __post_init__(self) -> None:
        if not callable(self.handler):
            raise TypeError(f"marsho.{self.name} is declared without a handler")
        keys = [form.key for form in self.forms]
        if len(keys) != len(set(keys)):
            raise ValueError(f"marsho.{self.name} declares a form twice: {keys}")
        lower = [form.key for form in self.forms if RANK[form.who] < RANK[self.who]]
        if lower:
            raise ValueError(f"marsho.{self.name} is for {self.who}s only, but its forms {lower} say less")
        for word in self.words:
            if not WORD.fullmatch(word) or word in NOT_COMMANDS:
                not_words = " or ".join(sorted(NOT_COMMANDS))
                raise ValueError(f"marsho.{word} cannot be a command's name: lower-case letters, digits, _ "
                                 f"and -, at most 32, a letter first, not {not_words}")

    @property
    def words(self) -> tuple[str, ...]:
        """Its name and aliases: every word that calls it."""
        return (self.name, *self.aliases)

    @property
    def help_key(self) -> str:
        """The catalogue key of its help line."""
        return f"usage.{self.name}"

    def refusal(self, context: CommandContext) -> str | None:
        """Why the asker may not use it here, as they read it; None if they may."""
        t, command = context.t, f"{context.name}.{self.name}"
        if self.where == "groups" and not context.where.shared:
            return t("group.only", command=command)
        if self.who == "superuser" and context.role != "superuser":
            return t("command.superusers", command=command)
        if self.who == "admin" and not context.admin:
            return t("command.admins", command=command)
        return None

    def form(self, key: str) -> Form:
        """The form declared as `key` (KeyError if none is)."""
        for form in self.forms:
            if form.key == key:
                return form
        raise KeyError(f"marsho.{self.name} declares no form {key!r}")

    def refused(self, context: CommandContext, key: str) -> str | None:
        """Why the asker may not use the form `key`, as they read it; None if they may."""
        form = self.form(key)
        if form.allows(context.role):
            return None
        written = " ".join(word for word in form.args.split() if word.isalpha())  # `all`, `group`
        command = f"{context.name}.{self.name}" + (f" {written}" if written else "")
        common = "command.superusers" if form.who == "superuser" else "command.admins"
        return context.t(form.refusal or common, name=context.name, command=command)

    async def answer(self, context: CommandContext) -> Answer:
        """The reply: the refusal, or what the handler says."""
        refused = self.refusal(context)
        if refused is not None:
            return Answer(refused)
        reply = await self.handler(context)
        return Answer(reply) if isinstance(reply, str) else reply


class DuplicateCommandError(ValueError):
    """Two commands declared with one name or alias."""


class Registry:
    """Commands by name and alias, in the order they were registered (the help's)."""

    def __init__(self, commands: Iterable[Command] = ()) -> None:
        self._commands: dict[str, Command] = {}
        self._words: dict[str, Command] = {}
        for command in commands:
            self.register(command)

    def register(self, command: Command) -> Command:
        """Add `command`; DuplicateCommandError if one of its words already calls another."""
        for index, word in enumerate(command.words):
            holder = self._words.get(word) or (command if word in command.words[:index] else None)
            if holder is not None:
                raise DuplicateCommandError(f"marsho.{word} is declared twice: by {holder.name!r} and by "
                                            f"{command.name!r}")
        self._commands[command.name] = command
        self._words.update(dict.fromkeys(command.words, command))
        return command

    def get(self, word: str) -> Command | None:
        """The command that `word` (a name or an alias) calls, None if none does."""
        return self._words.get(word)

    def all(self) -> tuple[Command, ...]:
        """Every command, in the help's order."""
        return tuple(self._commands.values())

    def names(self) -> tuple[str, ...]:
        """Every command's name, in the help's order."""
        return tuple(self._commands)

    def __contains__(self, word: object) -> bool:
        return word in self._words

    def __len__(self) -> int:
        return len(self._commands)
