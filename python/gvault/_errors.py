"""The exceptions gvault raises. Each is a GvaultError, and also the builtin
exception it resembles where one fits (so `except ValueError` still works)."""


class GvaultError(Exception):
    """Base class of every gvault error."""


class IoError(GvaultError, OSError):
    """The operating system refused an operation (disk full, permissions...)."""


class Corruption(GvaultError):
    """Stored bytes are not what was written: damaged, or altered. Nothing
    from them is returned."""


class KeyError(GvaultError):  # noqa: A001 - gvault.KeyError, as the store names it
    """A master key is missing or wrong."""


class NotFound(GvaultError, LookupError):
    """No such store, snapshot or checkpoint."""


class NotAStore(GvaultError):
    """The directory holds something that is not a gvault store."""


class NotARepository(GvaultError):
    """The directory holds no gvault repository."""


class Locked(GvaultError):
    """Another process holds the store or repository in a way this open
    cannot share."""


class ReadOnly(GvaultError):
    """The store is open read-only and the call would change it."""


class InvalidArgument(GvaultError, ValueError):
    """The call's arguments cannot be accepted."""


class Unsupported(GvaultError):
    """Written by a newer gvault, or needs something this build lacks."""


class AccelError(GvaultError):
    """The accelerator (CPU or GPU backend) could not run a job."""


class Closed(GvaultError):
    """The store is closed, or stopped accepting writes after an error."""
