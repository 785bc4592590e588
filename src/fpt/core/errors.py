"""The one exception type for mistakes a user can make (bad name, bad file, bad number).

The CLI turns it into a single line on stderr and exit status 2; library users catch it. Its
`kind` says what sort of failure it is, for the records sweeps and tables keep (failure.json),
so nothing downstream has to match the wording of a message.
"""

import reprlib

# Kinds of failure that tables report as something other than "failed".
USAGE = "usage"  # a bad option, file or value: the default
MISSING_DATA = "missing-data"  # a dataset is not on this machine
MISSING_BACKBONE = "missing-backbone"  # a backbone's weights are not on this machine
MISSING_BIT_BACKBONE = "missing-bit-backbone"  # --init bit before `fpt export-backbone` made one
SKIPPED = "skipped"  # a sweep cell left out on purpose (--skip-variants)
TOO_SHALLOW = "too-shallow"  # --layers K above a pretrained backbone's own depth
DIVERGED = "diverged"  # the loss or the trained weights became NaN or infinite (a rate too high)


class FptError(Exception):
    """A user-facing error: the message names what is wrong and how to fix it."""

    def __init__(self, message: str, kind: str = USAGE, said_by_rank_0: bool = False):
        super().__init__(message)
        self.kind = kind
        # rank 0's own error handed to another rank (World.agree): rank 0 prints it, the others need not
        self.said_by_rank_0 = said_by_rank_0


class StopRequested(KeyboardInterrupt):
    """A run stopped on request (Ctrl-C, SIGTERM) at a step boundary, after saving its checkpoint.
    A KeyboardInterrupt, so that whatever handles an interrupt handles this one too; the CLI exits
    with the shell's 128 + the signal's number."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.signum = signum


def _short_repr() -> reprlib.Repr:
    # reprlib, not repr: a value from a file can be megabytes, or a YAML alias bomb whose repr would
    # be gigabytes (nested aliases are shared when read and expanded only when printed)
    short = reprlib.Repr()
    short.maxstring = short.maxother = 40
    short.maxlist = short.maxtuple = short.maxdict = short.maxset = 4
    short.maxlevel = 2
    return short


_SHORT = _short_repr()


def quoted(value) -> str:
    """A value as a message quotes it, in at most about a line: strings cut to 40 characters,
    containers to their first 4 items and 2 levels."""
    return _SHORT.repr(value)


def quoted_text(text: str, limit: int = 40) -> str:
    """A cell of a file as a message quotes it: at most `limit` characters, and its length when cut
    (a cell can be megabytes)."""
    return repr(text) if len(text) <= limit else f"{text[:limit]!r}... ({len(text):,} characters)"


def check_type(value, allowed: tuple[type, ...], what: str) -> None:
    """Refuse, in one line, a value of none of the `allowed` types (None stands for null)."""
    # bool is an int in Python: a count given as true/false is a mistake, not 1/0
    if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in allowed)
        raise FptError(f"{what} must be {names}, got {quoted(value)}")


def require(module: str, pip_command: str):
    """Import an optional package, or say in one line how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise FptError(f"this needs the optional package {module!r}: {pip_command}") from None
    except Exception as exc:  # installed but broken (it raises as it is imported): one line, not its traceback
        first = str(exc).splitlines()[0][:80] if str(exc) else ""
        cause = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
        raise FptError(
            f"the optional package {module!r} fails to import ({cause}); reinstall it: {pip_command}"
        ) from None
