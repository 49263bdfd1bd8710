"""The exceptions the package raises beside ValueError and TypeError."""


class Error(RuntimeError):
    """A libktune call failed.  `status` is the C status code (negative),
    `name` its name without the prefix ("ERR_INVALID"), `message` the
    context's ktune_errmsg() (or ktune_open's reason)."""

    def __init__(self, status, name, message):
        self.status, self.name, self.message = status, name, message
        super().__init__(f"{name}: {message}" if message else name)


class LibraryNotFoundError(ImportError):
    """libktune could not be loaded (the message lists every path tried)."""
