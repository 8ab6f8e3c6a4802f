"""The ST state machines as tables (spec st.md §3): a virtual connection and a transfer.

A VC is created RC_SENT (we connect) or CONNECTED (we accept an RC) and moves only
through ``VC_MACHINE``; a transfer is created OPEN and ends once through
``TRANSFER_MACHINE``.  Events marked remote come from the peer: an undefined pair
with one of them is the peer's fault (``RemoteProtocolError``: counted and dropped);
any other undefined pair is ours (``LocalProtocolError``).
"""

from __future__ import annotations

import enum

from daemons.transitions import TransitionTable


class State(enum.Enum):
    RC_SENT = "rc_sent"
    CONNECTED = "connected"
    RD_SENT = "rd_sent"
    DA_SENT = "da_sent"
    CLOSED = "closed"


class VcEvent(enum.Enum):
    CA = "ca"  # remote: the peer accepted our RC
    CA_REJECT = "ca_reject"  # remote: the peer refused it
    USE = "use"  # local: an op on the connection (send, read, put, get, status, post)
    CLOSE = "close"  # local: the user closes
    RD = "rd"  # remote: the peer closes
    DA = "da"  # remote: the peer acknowledged our RD
    DC = "dc"  # remote: the peer confirmed our DA
    GIVE_UP = "give_up"  # local: RC or teardown retries exhausted


_S, _V = State, VcEvent
VC_MACHINE: TransitionTable[State, VcEvent] = TransitionTable("st connection", {
    (_S.RC_SENT, _V.CA): _S.CONNECTED,
    (_S.RC_SENT, _V.CA_REJECT): _S.CLOSED,
    (_S.RC_SENT, _V.CLOSE): _S.CLOSED,  # closed before connected: nothing to tear down
    (_S.RC_SENT, _V.GIVE_UP): _S.CLOSED,
    (_S.CONNECTED, _V.USE): _S.CONNECTED,
    (_S.CONNECTED, _V.CLOSE): _S.RD_SENT,
    (_S.CONNECTED, _V.RD): _S.DA_SENT,
    (_S.RD_SENT, _V.CLOSE): _S.RD_SENT,  # already closing
    (_S.RD_SENT, _V.RD): _S.DA_SENT,  # both closed at once
    (_S.RD_SENT, _V.DA): _S.CLOSED,
    (_S.RD_SENT, _V.DC): _S.CLOSED,
    (_S.RD_SENT, _V.GIVE_UP): _S.CLOSED,
    (_S.DA_SENT, _V.CLOSE): _S.DA_SENT,  # already closing
    (_S.DA_SENT, _V.RD): _S.DA_SENT,  # RD again: our DA was lost
    (_S.DA_SENT, _V.DA): _S.CLOSED,  # both closed at once: their DA crossed ours
    (_S.DA_SENT, _V.DC): _S.CLOSED,
    (_S.DA_SENT, _V.GIVE_UP): _S.CLOSED,
}, remote={_V.CA, _V.CA_REJECT, _V.RD, _V.DA, _V.DC}, initial={_S.RC_SENT, _S.CONNECTED})


class XState(enum.Enum):
    OPEN = "open"
    DONE = "done"  # every byte moved
    FAILED = "failed"  # ended here (timeout, buffer gone, abort): END sent when connected
    ENDED = "ended"  # ended by the peer (END, or RA with REJECT)


class XEvent(enum.Enum):
    COMPLETE = "complete"  # local
    FAIL = "fail"  # local
    PEER_END = "peer_end"  # remote


TRANSFER_MACHINE: TransitionTable[XState, XEvent] = TransitionTable("st transfer", {
    (XState.OPEN, XEvent.COMPLETE): XState.DONE,
    (XState.OPEN, XEvent.FAIL): XState.FAILED,
    (XState.OPEN, XEvent.PEER_END): XState.ENDED,
}, remote={XEvent.PEER_END}, initial={XState.OPEN})
