"""An immutable, hashable, order-independent mapping from group name to a number.

Why not a plain ``dict``: results are frozen dataclasses that projections compare,
hash and replay; two tallies built from the same counts in a different candidate
order must be equal *and* print and iterate the same.  Iteration is in sorted key
order (computed once, on first use, so building one costs next to nothing on the
allocation hot path).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Generic, TypeVar

V = TypeVar("V")

__all__ = ["Counts"]


class Counts(Mapping[str, V], Generic[V]):
    """Read-only mapping iterated in sorted key order; equal to any mapping with the same items."""

    __slots__ = ("_data", "_keys", "_hash")

    def __init__(self, items: Mapping[str, V] | None = None) -> None:
        self._data: dict[str, V] = dict(items.items()) if items else {}
        self._keys: list[str] | None = None
        self._hash: int | None = None

    @classmethod
    def _trusted(cls, data: dict[str, V]) -> "Counts[V]":
        """Wrap a dict the caller built and will never modify (no copy)."""
        obj = cls.__new__(cls)
        obj._data = data
        obj._keys = None
        obj._hash = None
        return obj

    def _sorted_keys(self) -> list[str]:
        keys = self._keys
        if keys is None:
            keys = self._keys = sorted(self._data)
        return keys

    def __getitem__(self, key: str) -> V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._sorted_keys())

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        return key in self._data

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Counts):
            return self._data == other._data
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._data.items()))
        return self._hash

    def __repr__(self) -> str:
        return f"Counts({self.as_dict()!r})"

    def as_dict(self) -> dict[str, V]:
        """A fresh, mutable copy in sorted key order (for JSON encoding and the like)."""
        data = self._data
        return {k: data[k] for k in self._sorted_keys()}
