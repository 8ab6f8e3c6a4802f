"""Why StCore drops a received op: the counter keys operators see (``stp status``)."""

from __future__ import annotations

import enum


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
