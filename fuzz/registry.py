"""The fuzz targets: name -> one_input(data), the exceptions that are its documented
rejection, and a small seed corpus of valid (structure-built) inputs."""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable

TARGETS: dict[str, Target] = {}


@dataclass
class Target:
    name: str
    fn: Callable[[bytes], None]
    rejects: tuple[type[BaseException], ...] = ()
    doc: str = ""
    seeds: list[bytes] = field(default_factory=list)

    def one_input(self, data: bytes) -> None:
        """Run one input; the documented rejection is swallowed, anything else raises."""
        try:
            self.fn(data)
        except self.rejects:
            pass


def target(name: str, rejects=(), seeds=()):
    def register(fn):
        TARGETS[name] = Target(name, fn, tuple(rejects), (fn.__doc__ or "").strip().splitlines()[0],
                               [bytes(s) for s in seeds])
        return fn
    return register


def load() -> dict[str, Target]:
    import os

    from . import targets_wire, targets_cores, targets_edges, targets_ib, targets_servernet, targets_pwfast  # noqa: F401,E501  (they register)

    if os.environ.get("GSN_FUZZ_SELFTEST"):  # a target that crashes on purpose, to test the runner
        def selftest(data: bytes) -> None:
            """Crashes (KeyError) when the input holds DE AD; rejects (ValueError) when it holds BE EF."""
            if b"\xbe\xef" in data:
                raise ValueError("rejected")
            if b"\xde\xad" in data:
                raise KeyError("crash")

        TARGETS.setdefault("selftest", Target("selftest", selftest, (ValueError,), selftest.__doc__.strip(),
                                              [b"seed"]))

    return TARGETS
