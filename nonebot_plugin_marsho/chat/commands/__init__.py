"""marsho's commands (`marsho.<name>`): one declaration each (a `Command`: its name and aliases,
who may use it and where, its handler; its help line is the catalogue's `usage.<name>`), one
module per family, and `REGISTRY`, the commands the bot answers, in the order `marsho.help`
lists them.

A new command: a module (or a family's module) declares it, e.g. in `commands/reminders.py`

    async def reminders_command(context: CommandContext) -> str | Answer: ...
    REMINDERS = Command("reminders", reminders_command, who="member", where="anywhere", forms=(
        Form("mine"), Form("group", "group", who="admin", where="groups")))

(each `Form` is one way to write it, with who may; the handler checks the asker with
`REMINDERS.refused(context, "group")`, and `form.reminders.<key>` in both catalogues says what
it does on the commands pages), then it takes its place in `REGISTRY` below, and
`usage.reminders` goes into both catalogues of i18n.py. chat/matchers.py reads the command
words, checks who may use it, and calls it.
"""

from __future__ import annotations

from . import actions, bill, documents, group, guide, loops, owner, people, reminders, session, tools
from .registry import (
    Answer,
    Command,
    CommandContext,
    DuplicateCommandError,
    Form,
    Handler,
    Place,
    Registry,
    Who,
)

__all__ = ["REGISTRY", "Answer", "Command", "CommandContext", "DuplicateCommandError", "Form", "Handler",
           "Place", "Registry", "Who"]

REGISTRY = Registry([
    session.RESET, tools.TOOLS, session.CALLS, session.HISTORY, people.NICKNAME, people.MEMORY,
    reminders.REMINDERS, group.CONTEXT,
    group.FORGET, group.PERSONA, group.ACTIVE, guide.HELP, bill.USAGE, owner.MODEL, session.EXPORT,
    owner.STATUS, bill.QUOTA, actions.ACTIONS, loops.RESUME, documents.KB,
])
"""Every command, in the order the help lists them."""
HELP_ORDER = REGISTRY.names()
"""The commands' names in the help's order."""
