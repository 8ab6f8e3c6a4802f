"""Fuzzed control requests, through each daemon's schema into its real handler: a
request is refused at the edge with one line, or handled; never an internal error."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import trio
from hypothesis import HealthCheck, given, settings, strategies as st

from daemons.constants import AdminCmd
from daemons.runtime.control import handle, parse_request
from daemons.runtime.schema import Bool, Field, Float, Int, List, Schema, Str

ETC = Path(__file__).resolve().parents[2] / "etc"

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
                         st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=80))
json_values = st.recursive(json_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                                 st.dictionaries(st.text(max_size=8), inner,
                                                                                 max_size=4)), max_leaves=12)

ULAS = st.binary(min_size=6, max_size=6).map(lambda b: ":".join(f"{x:02x}" for x in b))
HINTS = {  # plausible values, so the handlers' deeper paths are reached
    ("admin", "command"): st.one_of(st.sampled_from([c.name for c in AdminCmd]),
                                    st.sampled_from([c.name.lower() for c in AdminCmd])),
    ("resolve", "ip"): st.ip_addresses(v=4).map(str),
    ("set", "ip"): st.ip_addresses(v=4).map(str),
    ("delete", "ip"): st.ip_addresses(v=4).map(str),
    ("set", "ula"): ULAS,
    ("set", "interface"): st.sampled_from(["gsn0", "gsn1", None]),
    ("delete", "interface"): st.sampled_from(["gsn0", "gsn1", None]),
}


def valid(spec: Field) -> st.SearchStrategy:
    if isinstance(spec, Int):
        s = st.integers(spec.lo, spec.hi)
    elif isinstance(spec, Float):
        s = st.floats(spec.lo, spec.hi, allow_nan=False)
    elif isinstance(spec, Bool):
        s = st.booleans()
    elif isinstance(spec, Str):
        s = (st.from_regex(spec.pattern, fullmatch=True) if spec.pattern else st.text()).filter(
            lambda v: len(v) <= spec.max_len)
    elif isinstance(spec, List):
        s = st.lists(valid(spec.item), max_size=spec.max_len)
    else:  # pragma: no cover
        raise TypeError(spec)
    return st.one_of(s, st.none()) if spec.nullable else s


@st.composite
def structured(draw, schema: Schema) -> object:
    """A valid op with each field valid, mutated (any JSON value) or missing, maybe extra keys."""
    op = draw(st.sampled_from(sorted(schema.ops)))
    req: dict = {"cmd": op}
    for name, spec in schema.ops[op].items():
        how = draw(st.sampled_from(["valid", "valid", "hint", "mutate", "missing"]))
        if how == "missing":
            continue
        if how == "mutate":
            req[name] = draw(json_values)
        elif how == "hint" and (op, name) in HINTS:
            req[name] = draw(HINTS[(op, name)])
        else:
            req[name] = draw(valid(spec))
    if draw(st.integers(0, 9)) == 0:
        req[draw(st.text(max_size=8))] = draw(json_values)
    return req


def requests(schema: Schema) -> st.SearchStrategy:
    junk = st.one_of(json_values, st.dictionaries(st.just("cmd"), json_values),
                     st.builds(lambda op, v: {"cmd": op, **v}, st.text(max_size=12),
                               st.dictionaries(st.text(max_size=8), json_values, max_size=3)))
    return st.one_of(structured(schema), structured(schema), junk)


def _as_line(req: object) -> bytes:
    return json.dumps(req).encode()  # NaN/Infinity become the non-JSON words the edge refuses


async def fuzz(handler, schema: Schema, max_examples: int = 150) -> Counter:
    """Run hypothesis in a thread; each example goes through the socket's edge into the
    real handler on the trio side."""
    counters: Counter = Counter()
    seen_ok = Counter()

    @settings(max_examples=max_examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(requests(schema))
    def one(req):
        async def _edge():
            try:
                obj = parse_request(_as_line(req))
            except ValueError as exc:
                return {"ok": False, "error": f"bad request: {exc}"}
            return await handle(obj, handler, schema, counters)

        reply = trio.from_thread.run(_edge)
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
        assert not reply.get("error", "").startswith("internal error"), (req, reply)
        assert "\n" not in reply.get("error", "")
        json.dumps(reply, allow_nan=False)  # the reply is JSON
        seen_ok[reply["ok"]] += 1

    await trio.to_thread.run_sync(one)
    assert counters["internal_error"] == 0
    assert seen_ok[True] > 0, "no request got through: the strategies are too narrow"
    return counters


def _free_udp() -> str:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


async def test_fuzz_gsnd_control(autojump_clock, tmp_path):
    from daemons.gsnd import config as gconfig
    from daemons.gsnd.daemon import CONTROL_SCHEMA, Gsnd

    cfg = gconfig.load(None, dict(interface="gsn0", local=_free_udp(), peer="127.0.0.1:9",
                                  ula="02:00:00:00:00:01", runtime_dir=str(tmp_path), no_tap=True))
    d = Gsnd(cfg)
    try:
        await fuzz(d._control, CONTROL_SCHEMA)
    finally:
        d.transport.close()


async def test_fuzz_switch_control(autojump_clock, tmp_path):
    from daemons.switch import config as sconfig
    from daemons.switch.daemon import CONTROL_SCHEMA, SwitchDaemon

    path = tmp_path / "sw.toml"
    path.write_text(f'[switch]\nid = 1\n[[port]]\nnumber = 1\nlocal = "{_free_udp()}"\npeer = "127.0.0.1:9"\n')
    d = SwitchDaemon(sconfig.load(str(path), dict(runtime_dir=str(tmp_path))))
    try:
        await fuzz(d._control, CONTROL_SCHEMA, 60)
    finally:
        for t in d.transports.values():
            t.close()


async def test_fuzz_harpd_control(autojump_clock, tmp_path):
    from harpd import options as hoptions
    from harpd.daemon import CONTROL_SCHEMA, Harpd

    d = Harpd(hoptions.load(str(ETC / "harpd.options")), runtime_dir=str(tmp_path), state_dir=str(tmp_path),
              gsnd_runtime=str(tmp_path))
    counters = await fuzz(d._control, CONTROL_SCHEMA)
    assert counters["bad_request"] > 0


async def test_fuzz_pktwayd_control(autojump_clock, tmp_path):
    from pktwayd.config import load
    from pktwayd.daemon import CONTROL_SCHEMA, Pktwayd

    path = tmp_path / "r.toml"
    path.write_text((ETC / "pktwayd.toml").read_text().replace("/run/pktwayd/rab.sock", str(tmp_path / "r.sock")))
    d = Pktwayd(load(str(path)))
    await fuzz(d._control, CONTROL_SCHEMA, 60)


def test_nan_never_passes_a_float_field():
    s = Schema({"x": {"f": Float(0, 1)}})
    for bad in (math.nan, math.inf):
        try:
            parse_request(_as_line({"cmd": "x", "f": bad}))
        except ValueError:
            continue
        raise AssertionError("NaN/Infinity parsed")
    assert s.validate(parse_request(b'{"cmd": "x", "f": 0.5}'))
