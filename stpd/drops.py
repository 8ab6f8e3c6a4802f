"""Why StCore drops a received op: the counter keys operators see (``stp status``)."""

from __future__ import annotations

import enum

from daemons.wire.errors import DecodeError


class Drop(enum.StrEnum):
    UNKNOWN_PORT = "rx_drop_unknown_port"
    BAD_TUPLE = "rx_drop_bad_tuple"  # wrong peer, port or key
    SLOT_OVERRUN = "rx_drop_slot_overrun"
    STRAY_CA = "rx_drop_stray_CA"
    OUT_OF_STATE = "rx_drop_out_of_state"  # RD, DA or DC the VC's state does not allow
    CTS_UNKNOWN_ID = "rx_drop_CTS_unknown_id"
    CTS_BEYOND_T_LEN = "rx_drop_CTS_beyond_t_len"
    DATA_UNKNOWN_ID = "rx_drop_DATA_unknown_id"
    DATA_OUT_OF_BLOCK = "rx_drop_DATA_out_of_block"
    MRA_UNKNOWN = "rx_drop_MRA_unknown"
    PUT_OUT_OF_BOUNDS = "rx_drop_PUT_out_of_bounds"
    FOC_STALE = "rx_FOC_stale"


class BadOp(enum.StrEnum):
    """An ST op that did not decode (stpd/wire.py ``decode``): the field that was wrong, as
    the counter key."""

    HEADER = "rx_bad_header"  # shorter than the 40-byte header
    OP = "rx_bad_Op"  # an op ST does not have
    FUNCTION = "rx_bad_Function"  # a function the op does not have
    OPTIONS = "rx_bad_options"  # options that run past the packet
    OPTION_LENGTH = "rx_bad_option length"
    CHECKSUM = "rx_bad_Checksum"
    OTHER = "rx_bad_other"  # a field this list does not name (a codec change not counted here yet)

    @classmethod
    def of(cls, exc: DecodeError) -> BadOp:
        return _BAD_OP.get(exc.field, cls.OTHER)


_BAD_OP = {m.value.removeprefix("rx_bad_"): m for m in BadOp if m is not BadOp.OTHER}
