"""State machines as data: a table of (state, event) -> next state per machine.

An undefined pair raises: ``RemoteProtocolError`` when the event comes from the peer,
``LocalProtocolError`` when it is ours.  The cores keep the table beside their state
enum and move only through ``TransitionTable.next``.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from daemons.wire.errors import LocalProtocolError, RemoteProtocolError

S = TypeVar("S", bound=enum.Enum)
E = TypeVar("E", bound=enum.Enum)


class TransitionTable(Generic[S, E]):
    """``table[(state, event)]`` is the next state; ``remote`` names the peer's events,
    ``initial`` the states a machine is created in."""

    def __init__(self, name: str, table: Mapping[tuple[S, E], S], *, remote: Iterable[E],
                 initial: Iterable[S]) -> None:
        self.name = name
        self.table = dict(table)
        self.remote = frozenset(remote)
        self.initial = frozenset(initial)

    def allows(self, state: S, event: E) -> bool:
        return (state, event) in self.table

    def next(self, state: S, event: E) -> S:
        """The state after ``event`` in ``state``; raises when the pair is undefined."""
        try:
            return self.table[(state, event)]
        except KeyError:
            cls = RemoteProtocolError if event in self.remote else LocalProtocolError
            raise cls(self.name, state.name, event.name) from None

    def reachable(self) -> set[S]:
        """The states reachable from ``initial`` through the table."""
        seen = set(self.initial)
        todo = list(seen)
        while todo:
            s = todo.pop()
            for (frm, _), to in self.table.items():
                if frm is s and to not in seen:
                    seen.add(to)
                    todo.append(to)
        return seen
