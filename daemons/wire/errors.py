"""The one exception every codec raises on malformed input."""


class DecodeError(ValueError):
    """Malformed input: names the field and the byte offset where it went wrong."""

    def __init__(self, field: str, offset: int, problem: str) -> None:
        self.field = field
        self.offset = offset
        self.problem = problem
        super().__init__(f"{field} at offset {offset}: {problem}")
