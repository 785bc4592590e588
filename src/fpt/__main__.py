"""`python -m fpt ...` runs the `fpt` command."""

from fpt.cli import entry

entry()
