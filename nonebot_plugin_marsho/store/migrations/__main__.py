"""`python -m nonebot_plugin_marsho.store.migrations <alembic command> ...`: Alembic's command line
for developers, without an alembic.ini.

It works on a new SQLite database of its own, upgraded to the newest revision first, so
`revision --autogenerate -m "what changed"` writes exactly what store/sql.py has and the
migrations lack. A new revision is numbered after the newest unless `--rev-id` says otherwise.
Owners never need this: `SqlStore.start()` applies the migrations.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from alembic import command
from alembic.config import CommandLine
from alembic.script import ScriptDirectory

from . import FOLDER, config


def main(argv: Sequence[str] | None = None) -> None:
    cli = CommandLine(prog="python -m nonebot_plugin_marsho.store.migrations")
    options = cli.parser.parse_args(argv)
    if not hasattr(options, "cmd"):
        cli.parser.error("too few arguments")
    with tempfile.TemporaryDirectory(prefix="marsho-migrations-") as folder:
        settings = config(cmd_opts=options)
        database = f"sqlite:///{Path(folder) / 'marsho.db'}"
        settings.set_main_option("sqlalchemy.url", database.replace("%", "%%"))
        command.upgrade(settings, "head")
        if options.cmd[0] is command.revision and getattr(options, "rev_id", None) is None:
            head = ScriptDirectory.from_config(settings).get_current_head() or "0"
            options.rev_id = f"{int(head) + 1:04d}"
        cli.run_cmd(settings, options)
        if options.cmd[0] is command.revision:
            print(f"Now read the new file, then set HEAD = {options.rev_id!r} in {FOLDER / '__init__.py'}",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
