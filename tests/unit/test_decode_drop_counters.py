"""The undecodable-message counters of harpd, stpd, pktwayd (``<pkg>/drops.py``): every
field each decoder can name has its own member, so no drop lands in rx_bad_other, and
the keys are the ``rx_bad_<field>`` operators already see."""

from hypothesis import given, settings, strategies as st

from daemons.wire.errors import DecodeError
from harpd import wire as harp_wire
from harpd.drops import BadHarp
from pktwayd.drops import BadPacket
from pktwayd.eep import decode as eep_decode
from stpd import wire as st_wire
from stpd.drops import BadOp


def _field_named(bad_of, decode, raw):
    try:
        decode(raw)
    except DecodeError as exc:
        bad = bad_of(exc)
        assert bad.name != "OTHER", f"{exc.field!r} ({exc}) has no member in {type(bad).__name__}"
        assert bad == f"rx_bad_{exc.field}"


@settings(max_examples=2000)
@given(st.binary(max_size=96), st.sampled_from(["pw0", "mw5"]))
def test_pktway(raw, dialect):
    _field_named(BadPacket.of, lambda r: eep_decode(r, dialect), raw)


@settings(max_examples=2000)
@given(st.binary(max_size=64) | st.builds(lambda h, t: h + t, st.sampled_from(
    [b"\x00\x1c", b"\x00\x01", b"\x00\x06"]), st.binary(max_size=62)))
def test_harp(raw):
    _field_named(BadHarp.of, harp_wire.decode, raw)


@settings(max_examples=2000)
@given(st.binary(min_size=36, max_size=80))
def test_st(raw):
    _field_named(BadOp.of, st_wire.decode, raw)


def test_unknown_fields_are_other():
    exc = DecodeError("a new field", 0, "x")
    assert (BadPacket.of(exc), BadHarp.of(exc), BadOp.of(exc)) == (BadPacket.OTHER, BadHarp.OTHER, BadOp.OTHER)
    assert BadPacket.of(DecodeError("DL", 0, "x")).from_twin == "twin_rx_bad_DL"
