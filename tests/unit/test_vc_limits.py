"""Issue 10 item 9: the largest Messages a VC allows (gsn-harp.md §2, §3.1).

M_len counts the LLC/SNAP header and the payload (the 8 payload bytes in the
HEADER included), not the 16-byte MAC header; the largest M_len is 16 + 32 x the
VC's DATA micropacket limit: VC0 2,192 (68 DATA micropackets), VC1/VC2 131,216
(4,100), VC3 capped by the 32-bit field.  So the largest payload after LLC/SNAP
is M_len - 8: 2,184 and 131,208 bytes.
"""

import re
from pathlib import Path

import pytest

from daemons import constants as C
from daemons.endpoint.core import Endpoint
from daemons.link.reassembly import Delivered, Reassembler
from daemons.wire.errors import DecodeError
from daemons.wire.message import Message, decode_stream, encode_stream, max_payload, mps_for, stream_records
from stpd import constants as K

A, B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")
SPEC_MAX_M_LEN = {0: 2192, 1: 131216, 2: 131216}  # gsn-harp.md §2 "DERIVED maximum M_len"


class _Huge:
    """A payload that only has a length (the encoder must refuse it before reading it)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n


def test_max_payload_is_the_spec_max_m_len_minus_llc_snap():
    for vc, m_len in SPEC_MAX_M_LEN.items():
        assert max_payload(vc) == m_len - C.LLC_SNAP_BYTES
        assert mps_for(m_len) == 1 + C.VC_MAX_DATA_MPS[vc]  # HEADER + every DATA micropacket, no fill
    assert (max_payload(0), max_payload(1), max_payload(2)) == (2184, 131208, 131208)
    assert max_payload(3) == C.M_LEN_MAX - C.LLC_SNAP_BYTES  # the 32-bit M_len field is the VC3 cap


@pytest.mark.parametrize("vc", [0, 1, 2])
def test_largest_message_round_trips(vc):
    payload = bytes(range(256)) * (max_payload(vc) // 256) + b"z" * (max_payload(vc) % 256)
    msg = Message(vc, A, B, 0x88B5, payload)
    recs = msg.records()
    assert len(recs) == 1 + C.VC_MAX_DATA_MPS[vc]
    assert int.from_bytes(msg.stream()[12:16], "big") == SPEC_MAX_M_LEN[vc]
    r = Reassembler()
    assert r.feed(vc, recs) == [Delivered(msg, len(recs))]
    assert not r.counters


@pytest.mark.parametrize("vc", [0, 1, 2])
def test_one_byte_more_is_refused_by_the_encoder_and_discarded_by_the_decoder(vc):
    too_big = bytes(max_payload(vc) + 1)
    with pytest.raises(ValueError):
        encode_stream(vc, A, B, 0x88B5, too_big)
    # the same bytes framed as VC3 allows, then sent on this VC by a peer that ignores the limit
    stream = encode_stream(3, A, B, 0x88B5, too_big)
    assert int.from_bytes(stream[12:16], "big") == SPEC_MAX_M_LEN[vc] + 1
    r = Reassembler()
    assert r.feed(vc, stream_records(vc, stream)) == []
    assert r.counters["discard_vc_limit"] == 1
    with pytest.raises(DecodeError):
        decode_stream(vc, bytes(stream))


def test_vc3_limit_is_the_m_len_field():
    encode_limit = max_payload(3)
    with pytest.raises(ValueError):
        encode_stream(3, A, B, 0x88B5, _Huge(encode_limit + 1))


@pytest.mark.parametrize("vc", [0, 1, 2])
def test_gsnd_core_sends_the_largest_and_counts_one_more(vc):
    ep = Endpoint(1, 0.0)
    ep.link._go_up(1, 0.0)
    ep.ula = A
    assert ep.send(vc, B, 0x88B5, bytes(max_payload(vc)))
    assert ep.link.queued(vc) == 1 + C.VC_MAX_DATA_MPS[vc]
    assert not ep.send(vc, B, 0x88B5, bytes(max_payload(vc) + 1))
    assert ep.counters[f"tx_drop_vc{vc}_limit"] == 1


def test_stpd_largest_operation_is_the_largest_message():
    """stpd's per-VC ST payload limit plus its 40-byte header is exactly what gsnd sends."""
    for vc in range(4):
        assert K.VC_MAX_ST_PAYLOAD[vc] + K.HEADER_BYTES == max_payload(vc)
    assert K.VC_MAX_ST_PAYLOAD[:3] == (2144, 131168, 131168)  # st.md table


def test_readme_states_the_limits():
    text = " ".join((Path(__file__).parents[2] / "README.md").read_text().split())
    m = re.search(r"VC0 ([\d,]+) bytes; VC1 and VC2 ([\d,]+) bytes", text)
    assert m, "README no longer states the per-VC payload limits"
    assert [int(x.replace(",", "")) for x in m.groups()] == [max_payload(0), max_payload(1)]


@pytest.mark.parametrize("vc", [0, 1, 2])
async def test_ulp_send_takes_the_largest_and_refuses_one_more(vc, tmp_path):
    """gsnd's ULP SEND path (what stpd and harpd use) applies the same limit."""
    from daemons.gsnd.config import GsndConfig
    from daemons.gsnd.daemon import Gsnd

    gsnd = Gsnd(GsndConfig(local=("127.0.0.1", 0), peer=("127.0.0.1", 9), tap=None, runtime_dir=str(tmp_path)))
    try:
        gsnd.ep.link._go_up(1, 0.0)
        gsnd.ep.ula = A
        assert gsnd._send(vc, B, 0x8181, bytes(max_payload(vc))) is None
        assert gsnd._send(vc, B, 0x8181, bytes(max_payload(vc) + 1)) == f"payload_over_vc{vc}_limit_{max_payload(vc)}"
        st_op = K.HEADER_BYTES + K.VC_MAX_ST_PAYLOAD[vc]  # stpd's largest operation on this VC
        assert gsnd._send(vc, B, 0x8181, bytes(st_op)) is None
    finally:
        gsnd.transport.close()
