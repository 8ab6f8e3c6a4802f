from hypothesis import given, strategies as st

from daemons.link.credits import CreditLedger

ops = st.lists(st.tuples(st.sampled_from(["recv", "release", "return"]), st.integers(0, 3), st.integers(0, 50)),
               max_size=200)


@given(ops)
def test_receive_side_invariant(seq):
    led = CreditLedger((16, 64, 32, 128))
    led.grant_initial()
    for op, vc, n in seq:
        if op == "recv":
            assert led.received(vc, n) <= n
        elif op == "release":
            led.release(vc, n)
        else:
            led.returned(vc, min(n, led.pending[vc]))
        assert led.balanced()
