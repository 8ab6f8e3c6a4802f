"""Per-VC credit accounting for one link end (counted in micropackets).

Receive side invariant, per VC:  ``used + pending + rx_outstanding == buffer``

* ``used`` — micropackets sitting in our receive buffer, not yet released;
* ``pending`` — freed buffer space whose credit has not been sent back yet;
* ``rx_outstanding`` — credits the peer holds (or that are on their way to it).

Transmit side: ``tx`` is what the peer has granted us and we have not spent;
it never goes negative.
"""

from __future__ import annotations

import numpy as np

from ..constants import NUM_VCS


class CreditLedger:
    def __init__(self, buffers: tuple[int, ...]) -> None:
        self.buffers = tuple(buffers)
        self.tx = [0] * NUM_VCS
        self.used = [0] * NUM_VCS
        self.pending = [0] * NUM_VCS
        self.rx_outstanding = [0] * NUM_VCS

    def grant_initial(self) -> None:
        """After a link reset the whole buffer is offered to the peer."""
        self.pending = list(self.buffers)
        self.used = [0] * NUM_VCS
        self.rx_outstanding = [0] * NUM_VCS

    # transmit side
    def granted(self, per_vc: np.ndarray) -> None:
        for vc in range(NUM_VCS):
            self.tx[vc] += int(per_vc[vc])

    def spend(self, vc: int, n: int) -> None:
        if n > self.tx[vc]:
            raise AssertionError(f"spending {n} credits on VC{vc} with {self.tx[vc]} held")
        self.tx[vc] -= n

    # receive side
    def received(self, vc: int, n: int) -> int:
        """The peer sent ``n`` micropackets; returns how many its credits covered."""
        accepted = min(n, self.rx_outstanding[vc])
        self.rx_outstanding[vc] -= accepted
        self.used[vc] += accepted
        return accepted

    def release(self, vc: int, n: int) -> None:
        n = min(n, self.used[vc])
        self.used[vc] -= n
        self.pending[vc] += n

    def reclaim(self, vc: int, n: int) -> int:
        """Take back up to ``n`` released credits not yet sent (the upper layer
        holds the buffer after all); returns how many."""
        n = max(0, min(n, self.pending[vc]))
        self.pending[vc] -= n
        self.used[vc] += n
        return n

    def returned(self, vc: int, n: int) -> None:
        """``n`` credits of VC ``vc`` were put on the wire."""
        self.pending[vc] -= n
        self.rx_outstanding[vc] += n

    def balanced(self) -> bool:
        return all(
            u + p + o == b and u >= 0 and p >= 0 and o >= 0 and t >= 0
            for u, p, o, b, t in zip(self.used, self.pending, self.rx_outstanding, self.buffers, self.tx)
        )
