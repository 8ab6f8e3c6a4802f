"""`gsnctl show`: one screen for a host, in the spirit of `wg show`.

Every daemon found under the runtime root (default /run) is asked over its own socket:
each gsnd (gsnd/*.ctl) with its link, cable peer, last-heard age, rates and the
fabric's ULAs (LIST_ULAS) joined with harpd's IP neighbours; a gsn-switch
(gsn-switch/control.sock) with its ports; harpd, stpd and pktwayd above them.
Rates come from two readings ``interval`` seconds apart.  A daemon that does not
answer is shown as such; nothing here raises for one daemon's failure.
"""

from __future__ import annotations

import glob
import time
from pathlib import Path

from .runtime.control import request
from .runtime.log import is_drop

TIMEOUT_S = 2.0  # per request: a wedged daemon must not hang the whole screen


def _ask(path: str, req: dict) -> dict:
    try:
        reply = request(path, req, timeout=TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        return {"ok": False, "error": exc.strerror or str(exc) or type(exc).__name__}
    return reply if isinstance(reply, dict) else {"ok": False, "error": "not a JSON object"}


def _rate(new: dict, old: dict | None, key: str, dt: float) -> float | None:
    if old is None or dt <= 0:
        return None
    return round(max(new.get(key, 0) - old.get(key, 0), 0) / dt, 1)


def _drops(counters: dict) -> dict:
    """Non-zero counters whose names say something was lost or refused."""
    return {k: v for k, v in sorted(counters.items()) if v and isinstance(v, int) and is_drop(k)}


def gather(root: str = "/run", interval: float = 1.0) -> dict:
    """Everything `gsnctl show` prints, as one JSON-able dict."""
    run = Path(root)
    gsnds = sorted(glob.glob(str(run / "gsnd" / "*.ctl")))
    switch = run / "gsn-switch" / "control.sock"
    first = {p: _ask(p, {"cmd": "status"}) for p in gsnds}
    sw_first = _ask(str(switch), {"cmd": "status"}) if switch.exists() else None
    t0 = time.monotonic()
    if interval > 0:
        time.sleep(interval)
    out: dict = {"gsnd": {}, "switch": None, "harpd": None, "stpd": None, "pktwayd": {}}
    harpd_sock = run / "harpd" / "control.sock"
    neighbours: dict[str, list[dict]] = {}
    if harpd_sock.exists():
        st = _ask(str(harpd_sock), {"cmd": "status"})
        nb = _ask(str(harpd_sock), {"cmd": "neighbours"})
        for row in nb.get("neighbours", []) if nb.get("ok") else []:
            neighbours.setdefault(row.get("ula", ""), []).append(row)
        out["harpd"] = {"socket": str(harpd_sock), "ok": bool(st.get("ok")), "error": st.get("error"),
                        "interfaces": st.get("status", {}), "neighbours": nb.get("neighbours", [])}
    dt = time.monotonic() - t0 if interval > 0 else 0.0
    for p in gsnds:
        out["gsnd"][Path(p).stem] = _gsnd(p, first[p], dt, neighbours)
    if sw_first is not None:
        out["switch"] = _switch(str(switch), sw_first, dt)
    stpd_sock = run / "stpd" / "api.sock"
    if stpd_sock.exists():
        out["stpd"] = _stpd(str(stpd_sock))
    for p in sorted(glob.glob(str(run / "pktwayd" / "*.sock"))):
        r = _ask(p, {"cmd": "routes"})
        out["pktwayd"][Path(p).stem] = {"socket": p, "ok": bool(r.get("ok")), "error": r.get("error"),
                                        "halves": [_half(h) for h in r.get("halves", [])]}
    return out


def _gsnd(path: str, first: dict, dt: float, neighbours: dict[str, list[dict]]) -> dict:
    r = _ask(path, {"cmd": "status"})
    if not r.get("ok"):
        return {"socket": path, "ok": False, "error": r.get("error")}
    st, old = r["status"], first.get("status") if first.get("ok") else None
    link, cable = st["link"], st["cable"]
    per_vc, old_vc = st.get("per_vc", {}), (old or {}).get("per_vc", {})
    rates = {"rx_mps": _rate(link["counters"], old and old["link"]["counters"], "rx_mps", dt),
             "tx_mps": _rate(link["counters"], old and old["link"]["counters"], "tx_mps", dt)}
    for k in ("rx_bytes", "tx_bytes"):
        rates[k] = None if not old_vc or dt <= 0 else round(max(sum(per_vc.get(k, [])) - sum(old_vc.get(k, [])), 0) / dt, 1)
    peers = []
    if link["state"] == "up":
        u = _ask(path, {"cmd": "ulas"})
        for e in u.get("ulas", []) if u.get("ok") else []:
            ips = [n["ip"] for n in neighbours.get(e["ula"], [])]
            peers.append({"ula": e["ula"], "port": e["port"], "ips": ips, "self": e["ula"] == st["ula"]})
    counters = {**st["counters"], **link["counters"], **st["reassembly"], **cable.get("transport", {}),
                **st["ulp"]["counters"], **{k: v for k, v in st["ulp"].get("delivery", {}).items() if isinstance(v, int)}}
    return {"socket": path, "ok": True, "ula": st["ula"], "link": link["state"], "neighbour": st["neighbour"],
            "cable": {"local": cable["local"], "peer": cable["peer"], "id": cable["id"], "mtu": cable.get("mtu"),
                      "last_heard_s": cable.get("last_heard_s")},
            "credits_tx": link["credits_tx"], "queued_mps": link["queued_mps"], "per_vc": per_vc, "rates": rates,
            "ulp_clients": st["ulp"]["clients"], "tap": st.get("ip", {}).get("tap"), "drops": _drops(counters),
            "peers": peers}


def _switch(path: str, first: dict, dt: float) -> dict:
    r = _ask(path, {"cmd": "status"})
    if not r.get("ok"):
        return {"socket": path, "ok": False, "error": r.get("error")}
    st, old = r["status"], first.get("status") if first.get("ok") else None
    ports = {}
    for n, p in sorted(st["ports"].items(), key=lambda kv: int(kv[0])):
        o = old["ports"].get(n) if old else None
        lc = p["link"]["counters"]
        ports[n] = {"link": p["link"]["state"], "peer": p.get("cable", {}).get("peer"),
                    "last_heard_s": p.get("cable", {}).get("last_heard_s"),
                    "rx_mps": _rate(lc, o and o["link"]["counters"], "rx_mps", dt),
                    "tx_mps": _rate(lc, o and o["link"]["counters"], "tx_mps", dt),
                    "ulas": [e["ula"] for e in st["table"] if str(e["port"]) == n],
                    "drops": _drops({**p["counters"], **lc})}
    return {"socket": path, "ok": True, "switch_id": st["switch_id"], "broadcast": st["broadcast"], "ports": ports}


def _stpd(path: str) -> dict:
    from stpd.client import StClient, StError

    try:
        st = StClient(path).status()
    except (OSError, StError) as exc:
        return {"socket": path, "ok": False, "error": str(exc)}
    return {"socket": path, "ok": True, "connections": len(st.get("vcs", [])), "listeners": st.get("listeners", []),
            "scope": st.get("scope"), "drops": _drops(st.get("counters", {}))}


def _half(h: dict) -> dict:
    return {"addr": hex(h["addr"]), "san_id": hex(h["san_id"]), "up": h["up"], "twin_alive": h.get("twin_alive"),
            "buddies": h.get("buddies", []), "sans_routed": len(h.get("rts", [])), "drops": _drops(h.get("counters", {}))}


def _age(s: float | None) -> str:
    return "never" if s is None else f"{s:.1f} s ago"


def _rates(r: dict, keys: tuple[str, ...]) -> str:
    vals = [(k, r.get(k)) for k in keys]
    if all(v is None for _k, v in vals):
        return "rates: (no interval)"
    return "rates: " + ", ".join(f"{k.replace('_', ' ')} {v:g}/s" for k, v in vals if v is not None)


def render(data: dict) -> str:
    """The text screen: one block per daemon, indented like `wg show`."""
    lines: list[str] = []
    for name, g in data["gsnd"].items():
        lines.append(f"gsnd: {name}")
        if not g["ok"]:
            lines.append(f"  not answering: {g['error']}")
            continue
        c = g["cable"]
        lines += [f"  ULA: {g['ula'] or 'none'}   link: {g['link']}   neighbour: {g['neighbour']}",
                  f"  cable {c['id']}: {c['local'][0]}:{c['local'][1]} -> {c['peer'][0]}:{c['peer'][1]}   "
                  f"mtu {c['mtu']}   last heard {_age(c['last_heard_s'])}",
                  f"  {_rates(g['rates'], ('rx_mps', 'tx_mps', 'rx_bytes', 'tx_bytes'))}",
                  f"  per VC: messages rx {g['per_vc'].get('rx_messages')} tx {g['per_vc'].get('tx_messages')}   "
                  f"credits {g['credits_tx']}   queued {g['queued_mps']}",
                  f"  ULP clients: {g['ulp_clients']}   TAP: {g['tap'] or 'none'}"]
        if g["drops"]:
            lines.append("  drops: " + ", ".join(f"{k} {v}" for k, v in g["drops"].items()))
        for p in g["peers"]:
            ip = ", ".join(p["ips"]) or "-"
            lines.append(f"\n  peer: {p['ula']}{'  (this host)' if p['self'] else ''}\n    switch port: {p['port']}\n"
                         f"    ip: {ip}")
        lines.append("")
    sw = data["switch"]
    if sw is not None:
        if not sw["ok"]:
            lines += [f"gsn-switch: not answering: {sw['error']}", ""]
        else:
            lines.append(f"gsn-switch: {sw['switch_id']}   broadcast {'on' if sw['broadcast'] else 'off'}")
            for n, p in sw["ports"].items():
                peer = f"{p['peer'][0]}:{p['peer'][1]}" if p["peer"] else "?"
                lines.append(f"  port {n}: {p['link']}   peer {peer}   last heard {_age(p['last_heard_s'])}   "
                             f"{_rates(p, ('rx_mps', 'tx_mps'))}   ULAs {', '.join(p['ulas']) or '-'}")
                if p["drops"]:
                    lines.append("    drops: " + ", ".join(f"{k} {v}" for k, v in p["drops"].items()))
            lines.append("")
    h = data["harpd"]
    if h is not None:
        if not h["ok"]:
            lines += [f"harpd: not answering: {h['error']}", ""]
        else:
            lines.append("harpd:")
            for i, st in h["interfaces"].items():
                for lis in st["lis"]:
                    role = "server" if lis["server"] else "client"
                    lines.append(f"  {i}: LIS {lis['lis']}   ip {lis['ip'] or '-'}   {lis['phase']}   {role}")
            lines.append(f"  neighbours: {len(h['neighbours'])}")
            lines.append("")
    s = data["stpd"]
    if s is not None:
        lines += [f"stpd: {'connections ' + str(s['connections']) if s['ok'] else 'not answering: ' + s['error']}"
                  + (f"   listening on {s['listeners']}" if s.get("listeners") else ""), ""]
    for name, r in data["pktwayd"].items():
        if not r["ok"]:
            lines += [f"pktwayd {name}: not answering: {r['error']}", ""]
            continue
        lines.append(f"pktwayd: {name}")
        for half in r["halves"]:
            lines.append(f"  half {half['addr']} on SAN {half['san_id']}: {'up' if half['up'] else 'down'}   "
                         f"SANs routed {half['sans_routed']}   buddies {len(half['buddies'])}")
        lines.append("")
    if not lines:
        return "no GSN daemon found under the runtime root\n"
    return "\n".join(lines).rstrip("\n") + "\n"

