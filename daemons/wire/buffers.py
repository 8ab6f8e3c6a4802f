"""The byte containers the codecs accept (a datagram, a slice of one, a bytearray being built)."""

from typing import TypeAlias

Bytes: TypeAlias = bytes | bytearray | memoryview
