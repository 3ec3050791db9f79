"""The config file as a document: each place in it knows its key path, so every error can name it.

`SettingsError` is the one error of reading settings; `bot.config.settings.load` raises it (and
callers catch it there). `DocumentNode` reads one place of the parsed YAML with the checks every setting
shares: mapping or not, known keys, text, numbers in a range, booleans, durations.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine.domain.durations import DurationError, parse_duration
from engine.domain.errors import Category, ScalebotError


class SettingsError(ScalebotError, ValueError):
    """A bad setting; the message names the key path (or environment variable) and the fix."""

    category = Category.CONFIGURATION


class DocumentNode:
    """One place in the YAML document, so every error can name its key path."""

    def __init__(self, value: Any, path: str) -> None:
        self.value = value
        self.path = path or "(top level)"
        self._prefix = f"{path}." if path else ""

    def _mapping(self) -> dict[str, Any]:
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            raise SettingsError(f"{self.path}: expected a mapping of settings")
        return self.value

    def has(self, key: str) -> bool:
        return key in self._mapping()

    def only(self, *known: str) -> None:
        for key in self._mapping():
            if key not in known:
                raise SettingsError(f"{self._prefix}{key}: unknown setting (known here: {', '.join(known)})")

    def child(self, key: str) -> DocumentNode:
        return DocumentNode(self._mapping().get(key), f"{self._prefix}{key}")

    def items(self) -> list[tuple[str, DocumentNode]]:
        return [(str(k), DocumentNode(v, f"{self._prefix}{k}")) for k, v in self._mapping().items()]

    def _get(self, key: str) -> tuple[Any, str]:
        return self._mapping().get(key), f"{self._prefix}{key}"

    def string(self, key: str, default: str) -> str:
        value, path = self._get(key)
        if value is None:
            return default
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise SettingsError(f"{path}: expected text, got {type(value).__name__}")
        return str(value)

    def strings(self, key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value, path = self._get(key)
        if value is None:
            return default
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SettingsError(f"{path}: expected a list of text values")
        return tuple(value)

    def integer(self, key: str, default: int, *, low: int, high: int) -> int:
        value, path = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise SettingsError(f"{path}: expected a whole number from {low} to {high}, got {value!r}")
        return value

    def number(self, key: str, default: float, *, low: float, high: float) -> float:
        value, path = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
            raise SettingsError(f"{path}: expected a number from {low:g} to {high:g}, got {value!r}")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        value, path = self._get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise SettingsError(f"{path}: expected true or false, got {value!r}")
        return value

    def duration(self, key: str, default: timedelta) -> timedelta:
        value, path = self._get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise SettingsError(f"{path}: expected a duration such as 30m, got {value!r}")
        try:
            return parse_duration(str(value))
        except (DurationError, OverflowError) as exc:
            raise SettingsError(f"{path}: {exc}") from exc
