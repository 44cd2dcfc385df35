"""How the command line reports a failure: one ``Error:`` line and exit status 2 for anything the user
can fix (a bad value, a damaged file, an output that would replace an input, too little memory, a
missing extra); one line naming an internal error and exit status 1 for anything else. ``qora --debug
...`` shows the traceback instead."""

from __future__ import annotations

import click

from qora.backend import BackendUnavailable
from qora.io.errors import QoraError

__all__ = ["QoraCommands", "USER_ERRORS", "one_line"]

# What a user's input or environment causes. ValueError is here because it is what a check that
# names a parameter raises; OSError covers missing, unreadable and unwritable files and full disks.
USER_ERRORS = (QoraError, ValueError, OSError, MemoryError, ImportError, BackendUnavailable)


def one_line(exc: BaseException) -> str:
    """A message for ``exc`` on one line, with the file name an OSError carries."""
    if isinstance(exc, OSError) and exc.strerror and exc.filename:
        text = f"{exc.filename}: {exc.strerror}"
    else:
        text = str(exc) or type(exc).__name__
    return " ".join(text.split())


class _Failure(click.ClickException):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class QoraCommands(click.Group):
    """The root group: runs a command and turns what it raises into one line (see the module)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.Abort, click.UsageError):
            raise
        except KeyboardInterrupt:  # Ctrl-C: the shell's status (128 + SIGINT), not click's "Aborted!" and 1
            click.echo("Interrupted: stopped (outputs being written were removed, existing files kept)", err=True)
            raise click.exceptions.Exit(130) from None
        except click.ClickException as exc:
            if exc.exit_code == 1:
                exc.exit_code = 2  # a command's own clear error is a user error too
            raise
        except Exception as exc:
            if ctx.params.get("debug"):
                raise
            if isinstance(exc, USER_ERRORS):
                raise _Failure(one_line(exc), 2) from exc
            raise _Failure(f"internal error ({type(exc).__name__}: {one_line(exc)}); please report it, with the "
                           "traceback that `qora --debug ...` prints", 1) from exc
