"""The package's exceptions."""


class AlignmallocError(RuntimeError):
    """A request alignmalloc refused; the message says what to change."""
