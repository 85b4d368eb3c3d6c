"""The one exception the trace package raises for bad input."""

from __future__ import annotations


class TraceError(Exception):
    """A trace, manifest or map file that cannot be used, or an analysis that cannot be trusted.

    The message names the file (when there is one) and what is wrong with it; the CLI prints
    it without a traceback and exits with code 2.
    """

    def __init__(self, message: str, path: object | None = None) -> None:
        self.path = None if path is None else str(path)
        super().__init__(f"{self.path}: {message}" if self.path else message)
