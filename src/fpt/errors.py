"""The one exception type for mistakes a user can make (bad name, bad file, bad number).

The CLI turns it into a single line on stderr and exit status 2; library users catch it.
"""


class FptError(Exception):
    """A user-facing error: the message names what is wrong and how to fix it."""
