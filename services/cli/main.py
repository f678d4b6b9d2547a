"""Entry point of the `cascade` console command.

Errors are one clear line on stderr and exit code 1 (set CASCADE_DEBUG=1 for the traceback);
long work shows rich progress bars.
"""

from __future__ import annotations

import os
import sys

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from services.cli import data, demo, model, runs, serve
from services.common.errors import CascadeError
from services.common.settings import format_validation_error
from services.reward import cli as reward_cli
from services.teacher import cli as teacher_cli

app = typer.Typer(
    name="cascade",
    help="Cascade RL post-training: SFT, per-domain RL stages and multi-domain on-policy distillation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("init-model")(model.init_model)
app.add_typer(data.app, name="data")
app.command("serve")(serve.serve)
app.command("demo")(demo.demo)
app.command("up")(runs.up)
app.command("run")(runs.run)
app.command("status")(runs.status)
app.command("resume")(runs.resume)
app.command("report")(runs.report)
app.command("cancel")(runs.cancel)
app.add_typer(teacher_cli.app, name="teacher")
app.add_typer(reward_cli.app, name="reward")

err_console = Console(stderr=True)


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; turn expected failures into one line and exit code 1."""
    try:
        code = app(args=argv, standalone_mode=False)
    except (CascadeError, ValueError, RuntimeError, FileNotFoundError, FileExistsError, PermissionError,
            TimeoutError) as exc:
        _fail(str(exc))
    except ValidationError as exc:
        _fail(format_validation_error(exc, exc.title).replace("\n", "; "))
    except KeyboardInterrupt:
        _fail("interrupted")
    except SystemExit:
        raise
    except Exception as exc:
        import click

        if isinstance(exc, click.exceptions.Exit):
            sys.exit(exc.exit_code)
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            _fail("aborted")
        if os.environ.get("CASCADE_DEBUG"):
            raise
        _fail(f"{type(exc).__name__}: {exc} (set CASCADE_DEBUG=1 for the traceback)")
    else:  # typer turns Ctrl-C / SIGTERM into exit code 130 and returns codes rather than exiting
        if code == 130:
            _fail("interrupted")
        if isinstance(code, int) and code:
            sys.exit(code)


def _fail(message: str) -> None:
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
