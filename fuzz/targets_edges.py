"""JSON edges: the control socket (parse, each daemon's schema, its real handler) and
stpd's API socket (its schema).  Requests are built from the schemas, then mutated."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from .draw import Draw
from .registry import target

ROOT = Path(__file__).resolve().parents[1]
JUNK = [None, True, False, 0, -1, 2**31, 2**64, 1.5, -0.0, "", "x" * 70, "gsn0", [], [1, 2], {}, {"a": 1},
        "02:00:00:00:00:01", "192.0.2.1", "::1", "ffff", "é\u0000"]


def json_value(d: Draw, depth: int = 0):
    k = d.below(8 if depth < 3 else 5)
    if k == 0:
        return d.choice(JUNK)
    if k == 1:
        return d.int(8) - 2**63 if d.bool() else d.int(1)
    if k == 2:
        return d.blob(20).decode("latin-1")
    if k == 3:
        return d.choice([float("nan"), float("inf"), 1e308, 0.5, -1.0])
    if k == 4:
        return d.bool()
    if k in (5, 6):
        return [json_value(d, depth + 1) for _ in range(d.below(4))]
    return {d.blob(6).decode("latin-1"): json_value(d, depth + 1) for _ in range(d.below(3))}


def _hints() -> dict:
    from daemons.constants import AdminCmd

    ips = ["192.0.2.1", "192.0.2.7", "10.0.0.1", "2001:db8::1", "::", "0.0.0.0", "255.255.255.255"]
    return {"command": [c.name for c in AdminCmd] + [c.name.lower() for c in AdminCmd] + ["BOGUS"],
            "args": ["", "00", "0a" * 16, "ff" * 16, "0" * 31], "ip": ips, "host": ips + ["localhost", ""],
            "ula": ["02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00", "02-00-00-00-00-01"],
            "interface": ["gsn0", "gsn1", "lo", "", "x" * 16]}


HINTS = _hints()
GENERIC = ["gsn0", "192.0.2.1", "02:00:00:00:00:01", "0a", "inc"]


def field_value(d: Draw, spec, field: str = ""):
    """A plausible value for one schema field (either schema flavour)."""

    name = type(spec).__name__
    lo, hi = getattr(spec, "lo", 0), getattr(spec, "hi", 255)
    if name == "Int":
        return d.choice([lo, hi, hi + 1, lo - 1, (lo + hi) // 2]) if d.bool() else lo + d.int(4) % (hi - lo + 1)
    if name == "Float":
        return d.choice([lo, hi, (lo + hi) / 2, hi * 2])
    if name == "Bool":
        return d.bool()
    if name == "List":
        return [field_value(d, spec.item, field) for _ in range(d.below(spec.max_len + 2))]
    if name == "B64":
        import base64

        return base64.b64encode(d.blob(40)).decode() if d.below(4) else d.blob(12).decode("latin-1")
    choices = getattr(spec, "choices", None)
    if choices and d.below(4) != 3:
        return d.choice(list(choices))
    if d.below(4) != 3:
        return d.choice(HINTS.get(field, GENERIC))
    return d.blob(getattr(spec, "max_len", 64) + 2).decode("latin-1")


def request(d: Draw, ops: dict, key: str) -> object:
    """A request for one op with each field valid, mutated or missing; or junk."""
    if d.below(8) == 7:  # (an input used up draws zeros: the valid branch)
        return json_value(d)
    op = d.choice(sorted(ops))
    req = {key: op if d.below(8) != 7 else json_value(d)}
    for name, spec in ops[op].items():
        how = d.below(6)
        if how == 5:
            continue
        req[name] = json_value(d) if how == 4 else field_value(d, spec, name)
    if d.below(10) == 9:
        req[d.blob(8).decode("latin-1")] = json_value(d)
    return req


def line(d: Draw, req) -> bytes:
    raw = json.dumps(req).encode()  # NaN/Infinity become the non-JSON words the edge refuses
    if d.below(8) == 7:
        from .mutate import mutate_bytes

        raw = mutate_bytes(d, raw)
    return raw


# --- the control socket ------------------------------------------------------------------
PORTAL_AUTOJUMP_S = 0.001  # real seconds every task waits before the portal's mock clock jumps


class _Portal:
    """The daemons (gsnd, switch, harpd, pktwayd, pktway-san), built once in a trio run
    on a mock clock in a thread; each input's request runs through the real edge there."""

    def __init__(self) -> None:
        import atexit
        import shutil
        import tempfile

        self.tmp = Path(tempfile.mkdtemp(prefix="gsn-fuzz-"))
        atexit.register(shutil.rmtree, self.tmp, ignore_errors=True)  # it lives as long as the process
        self.ready = threading.Event()
        self.daemons: dict = {}
        self.error: BaseException | None = None
        threading.Thread(target=self._thread, daemon=True).start()
        self.ready.wait(60)
        if self.error:
            raise self.error

    def _thread(self) -> None:
        import trio
        import trio.testing

        async def main():
            try:
                self._build()
            except BaseException as exc:  # noqa: BLE001 - reported to the fuzzing thread
                self.error = exc
                self.ready.set()
                return
            self.token = trio.lowlevel.current_trio_token()
            self.ready.set()
            await trio.sleep_forever()

        # not 0: with no deadline pending, a threshold of 0 polls without blocking, so the
        # idle thread spun a whole core for the rest of the process (the test suite's
        # namespace tests ran beside it); PORTAL_AUTOJUMP_S of real idleness per jump
        trio.run(main, clock=trio.testing.MockClock(autojump_threshold=PORTAL_AUTOJUMP_S))

    def _free_udp(self) -> str:
        import socket

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind(("127.0.0.1", 0))
            return f"127.0.0.1:{s.getsockname()[1]}"

    def _build(self) -> None:
        tmp, etc = self.tmp, ROOT / "etc"
        from daemons.gsnd import config as gconfig
        from daemons.gsnd.daemon import CONTROL_SCHEMA as GS, Gsnd

        cfg = gconfig.load(None, dict(interface="gsn0", local=self._free_udp(), peer="127.0.0.1:9",
                                      ula="02:00:00:00:00:01", runtime_dir=str(tmp), no_tap=True))
        self.daemons["gsnd"] = (Gsnd(cfg)._control, GS)
        from daemons.switch import config as sconfig
        from daemons.switch.daemon import CONTROL_SCHEMA as SS, SwitchDaemon

        p = tmp / "sw.toml"
        p.write_text(f'[switch]\nid = 1\n[[port]]\nnumber = 1\nlocal = "{self._free_udp()}"\npeer = "127.0.0.1:9"\n')
        self.daemons["switch"] = (SwitchDaemon(sconfig.load(str(p), dict(runtime_dir=str(tmp))))._control, SS)
        from harpd import options as hoptions
        from harpd.daemon import CONTROL_SCHEMA as HS, Harpd

        h = Harpd(hoptions.load(str(etc / "harpd.options")), runtime_dir=str(tmp), state_dir=str(tmp),
                  gsnd_runtime=str(tmp))
        self.daemons["harpd"] = (h._control, HS)
        from pktwayd.config import load
        from pktwayd.daemon import CONTROL_SCHEMA as PS, Pktwayd

        p = tmp / "r.toml"
        p.write_text((etc / "pktwayd.toml").read_text().replace("/run/pktwayd/rab.sock", str(tmp / "r.sock")))
        self.daemons["pktwayd"] = (Pktwayd(load(str(p)))._control, PS)

    def run(self, fn):
        import trio

        return trio.from_thread.run(fn, trio_token=self.token)


_PORTAL: list[_Portal] = []


@target("control", seeds=[b"", b"\x00\x01", b"\x02\x03\x00" * 10, b"\x07" * 40])
def control(data: bytes) -> None:
    """The JSON control socket: parse_request, each daemon's CONTROL_SCHEMA, its real handler (no internal errors)."""
    from collections import Counter

    from daemons.runtime.control import handle, parse_request

    if not _PORTAL:
        _PORTAL.append(_Portal())
    portal = _PORTAL[0]
    d = Draw(data)
    name = d.choice(sorted(portal.daemons))
    handler, schema = portal.daemons[name]
    raw = line(d, request(d, schema.ops, "cmd"))
    try:
        obj = parse_request(raw)
    except ValueError:
        return  # refused at the edge with one line
    counters: Counter = Counter()

    async def edge():
        return await handle(obj, handler, schema, counters)

    reply = portal.run(edge)
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
    assert counters["internal_error"] == 0, (name, obj, reply)
    assert "\n" not in reply.get("error", ""), (name, obj, reply)
    json.dumps(reply, allow_nan=False)


@target("stpd.api", seeds=[b"", b"\x01\x02", b"\x03" * 30])
def stpd_api(data: bytes) -> None:
    """stpd's API socket edge: api.decode (size cap, nesting scan, JSON, schema) on schema-built requests."""
    from stpd import api

    d = Draw(data)
    raw = line(d, request(d, api.SCHEMA, "op")) if d.below(4) else d.rest()
    try:
        msg = api.decode(raw)
    except api.RequestError as exc:
        assert "\n" not in str(exc)
        return
    assert msg["op"] in api.SCHEMA
    api.encode({k: v for k, v in msg.items() if not isinstance(v, bytes)})
