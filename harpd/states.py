"""The HARP client's state machines as tables (RFC 2835 §5): a LIS's phase and a
cache entry's revalidation.

A LIS starts DOWN; a cache entry starts NONE (not being revalidated).  Events marked
remote come from the fabric: an undefined pair with one of them is the sender's fault
(``RemoteProtocolError``, counted and dropped); any other undefined pair is ours
(``LocalProtocolError``).
"""

from __future__ import annotations

import enum

from daemons.transitions import TransitionTable


class Phase(enum.Enum):
    DOWN = "down"
    PROBE = "probe"
    REGISTER = "register"
    OPER_SERVER = "operational"
    OPER_BCAST = "broadcast"


class PhaseEvent(enum.Enum):
    START = "start"  # local: the port has a ULA and an address in the LIS (again)
    PORT_DOWN = "port_down"  # local: no ULA or no address in the LIS
    BROADCAST_ECHO = "broadcast_echo"  # remote: our broadcast probe came back
    PROBES_UNANSWERED = "probes_unanswered"  # local: every probe sent, none came back
    REGISTERED = "registered"  # remote: a server answered our registration
    SERVERS_LOST = "servers_lost"  # local: no responsive server is left


_P, _E = Phase, PhaseEvent
PHASE_MACHINE: TransitionTable[Phase, PhaseEvent] = TransitionTable(
    "harp lis phase",
    {**{(p, _E.START): _P.PROBE for p in Phase},
     **{(p, _E.PORT_DOWN): _P.DOWN for p in Phase},
     (_P.PROBE, _E.BROADCAST_ECHO): _P.OPER_BCAST,
     (_P.PROBE, _E.PROBES_UNANSWERED): _P.REGISTER,
     (_P.PROBE, _E.REGISTERED): _P.OPER_SERVER,
     (_P.REGISTER, _E.REGISTERED): _P.OPER_SERVER,
     (_P.OPER_SERVER, _E.REGISTERED): _P.OPER_SERVER,  # re-registration
     (_P.OPER_SERVER, _E.SERVERS_LOST): _P.REGISTER},
    remote={_E.BROADCAST_ECHO, _E.REGISTERED}, initial={_P.DOWN})


class Reval(enum.Enum):
    NONE = "none"  # valid, not being revalidated
    ASK_SERVER = "ask_server"  # a HARP_REQUEST to the server is out
    ASK_HOST = "ask_host"  # the server was silent: an InHARP_REQUEST to the host itself is out
    LETTING_EXPIRE = "letting_expire"  # unused at revalidation time: left to expire


class RevalEvent(enum.Enum):
    DUE = "due"  # local: revalidation time, entry in use (or the server's answer overdue)
    DUE_UNUSED = "due_unused"  # local: revalidation time, entry not used for a lifetime
    HOST_ANSWERED = "host_answered"  # remote: the host's InHARP_REPLY


REVAL_MACHINE: TransitionTable[Reval, RevalEvent] = TransitionTable(
    "harp revalidation",
    {(Reval.NONE, RevalEvent.DUE): Reval.ASK_SERVER,
     (Reval.NONE, RevalEvent.DUE_UNUSED): Reval.LETTING_EXPIRE,
     (Reval.ASK_SERVER, RevalEvent.DUE): Reval.ASK_HOST,
     (Reval.ASK_HOST, RevalEvent.HOST_ANSWERED): Reval.NONE},
    remote={RevalEvent.HOST_ANSWERED}, initial={Reval.NONE})
