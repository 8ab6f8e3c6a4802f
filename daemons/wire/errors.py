"""The exceptions the codecs and the sans-IO cores raise.

``DecodeError``: malformed bytes.  ``LocalProtocolError``: this side used a core or a
state machine wrongly (a bug or an API misuse: never caused by a peer).
``RemoteProtocolError``: a peer sent something its state does not allow (counted and
answered by the core, never fatal).
"""


class DecodeError(ValueError):
    """Malformed input: names the field and the byte offset where it went wrong."""

    def __init__(self, field: str, offset: int, problem: str) -> None:
        self.field = field
        self.offset = offset
        self.problem = problem
        super().__init__(f"{field} at offset {offset}: {problem}")


class ProtocolError(Exception):
    """An event the state machine named ``machine`` does not allow in ``state``."""

    def __init__(self, machine: str, state: str, event: str) -> None:
        self.machine = machine
        self.state = state
        self.event = event
        super().__init__(f"{machine}: {event} not allowed in state {state}")


class LocalProtocolError(ProtocolError):
    """Our own misuse of a core (the driver or the core itself asked for it)."""


class RemoteProtocolError(ProtocolError):
    """The peer's fault: a message its state does not allow."""
