"""Helpers for the dissector tests: write pcaps of UDP datagrams, run tshark with the
project's Lua dissectors (wireshark/*.lua), and read fields out of its JSON."""

from __future__ import annotations

import functools
import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

LUA_DIR = Path(__file__).resolve().parent.parent / "wireshark"
LUA_FILES = sorted(LUA_DIR.glob("*.lua"))
LINKTYPE_RAW = 101  # the packet is an IPv4/IPv6 header onward
LINKTYPE_ETHERNET = 1

needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark missing: ./gsn installs it (root)")


def _checksum(header: bytes) -> int:
    total = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def ipv4_udp(src: tuple[str, int], dst: tuple[str, int], payload: bytes) -> bytes:
    """An IPv4 + UDP packet (UDP checksum 0: not computed) carrying ``payload``."""
    import ipaddress

    udp = struct.pack("!HHHH", src[1], dst[1], 8 + len(payload), 0) + payload
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0,
                      ipaddress.IPv4Address(src[0]).packed, ipaddress.IPv4Address(dst[0]).packed)
    hdr = hdr[:10] + struct.pack("!H", _checksum(hdr)) + hdr[12:]
    return hdr + udp


def write_pcap(path: Path, packets: list[bytes], linktype: int = LINKTYPE_RAW, snaplen: int = 262144) -> Path:
    """A classic pcap, one packet a millisecond apart, each cut to ``snaplen`` bytes."""
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, snaplen, linktype)]
    for i, pkt in enumerate(packets):
        kept = pkt[:snaplen]
        out.append(struct.pack("<IIII", 1_700_000_000 + i // 1000, (i % 1000) * 1000, len(kept), len(pkt)) + kept)
    path.write_bytes(b"".join(out))
    return path


def read_pcap(path: Path) -> tuple[int, list[tuple[bytes, bytes]]]:
    """(linktype, [(record header, packet)]) of a classic little-endian pcap."""
    data = path.read_bytes()
    magic, _, _, _, _, _, linktype = struct.unpack_from("<IHHiIII", data)
    assert magic in (0xA1B2C3D4, 0xA1B23C4D), f"not a little-endian pcap: {magic:#x}"
    off, out = 24, []
    while off < len(data):
        head = data[off : off + 16]
        incl = struct.unpack_from("<I", head, 8)[0]
        out.append((head, data[off + 16 : off + 16 + incl]))
        off += 16 + incl
    return linktype, out


def rewrite_pcap(src: Path, dst: Path, packets: list[tuple[bytes, bytes]], linktype: int) -> Path:
    out = [struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)]
    for head, pkt in packets:
        out.append(head[:8] + struct.pack("<II", len(pkt), len(pkt)) + pkt)
    dst.write_bytes(b"".join(out))
    return dst


_HOME = tempfile.TemporaryDirectory(prefix="tshark-home-")  # removed when the interpreter exits


@functools.cache
def _environment() -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    """(the -X options that load wireshark/*.lua, the environment for tshark).

    tshark runs with an empty home, so copies installed for a user (``./gsn
    wireshark-install --user``) are not loaded beside the repository's (Wireshark refuses
    to register a protocol twice).  Copies in the global plugin folder (``./gsn
    wireshark-install`` as root) are always loaded: they are used when they are exactly
    the repository's files, and are an error otherwise."""
    env = dict(os.environ, HOME=_HOME.name)
    listing = subprocess.run(["tshark", "-G", "plugins"], capture_output=True, text=True, env=env, timeout=60).stdout
    mine = {p.name: p for p in LUA_FILES}
    installed = {Path(line.split("\t")[-1]) for line in listing.splitlines() if "lua script" in line}
    installed = {p for p in installed if p.name in mine}
    if not installed:
        return tuple(f"lua_script:{p}" for p in LUA_FILES), tuple(env.items())
    stale = [str(p) for p in installed if p.read_bytes() != mine[p.name].read_bytes()]
    assert not stale and len(installed) == len(mine), (
        f"installed dissectors differ from wireshark/ ({', '.join(stale) or 'some missing'}): "
        "run ./gsn wireshark-install again")
    return (), tuple(env.items())


def tshark_scripts() -> tuple[str, ...]:
    """The -X values tshark_json passes (none when identical copies are installed globally)."""
    return _environment()[0]


def tshark_json(pcap: Path, *extra: str, timeout: float = 60) -> list[dict]:
    """The packets of ``pcap`` as tshark's JSON (duplicate keys merged into lists)."""
    scripts, env = _environment()
    cmd = ["tshark", "-n", "-Q", "-r", str(pcap), "-T", "json", "--no-duplicate-keys"]
    for script in scripts:
        cmd += ["-X", script]
    cmd += list(extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(env))
    assert proc.returncode == 0, f"tshark failed ({proc.returncode}): {proc.stderr[-2000:]}"
    assert "Lua" not in proc.stderr and "lua" not in proc.stderr, proc.stderr[-2000:]
    # a Lua run-time error (a dissector bug, or input it did not expect) is in the tree, as is
    # one the dissectors caught themselves ("dissector error")
    for marker in ("_ws.lua.error", "Lua Error", "dissector error"):
        at = proc.stdout.find(marker)
        assert at < 0, f"tshark reported {marker}: {proc.stdout[max(0, at - 200) : at + 300]}"
    return json.loads(proc.stdout or "[]")


def values(node, key: str) -> list:
    """Every value of ``key`` anywhere in a JSON tree, in document order (lists flattened)."""
    out: list = []

    def walk(n):
        if isinstance(n, dict):
            for k, v in n.items():
                if k == key:
                    out.extend(v if isinstance(v, list) else [v])
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(node)
    return out


def experts(node) -> list[str]:
    """Every expert-info message in a JSON tree."""
    return [str(m) for m in values(node, "_ws.expert.message")]
