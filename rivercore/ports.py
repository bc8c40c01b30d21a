"""A port the process installs once (the application wiring it up when it is ready),
and that refuses to be used before: a missing implementation is an error, never a
silent default."""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Installed(Generic[T]):
    def __init__(self, what: str, why: str):
        self.what = what
        self.why = why
        self._value: T | None = None

    def install(self, value: T) -> None:
        self._value = value

    def get(self) -> T:
        if self._value is None:
            raise RuntimeError(f"No {self.what} is installed: {self.why}.")
        return self._value
