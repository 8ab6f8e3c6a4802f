"""An attacker on a cable's underlay, for the authenticated-cable tests.  Run inside a
namespace we made:

    python rawudp.py capture IFACE SRC DST SECONDS OUTFILE   # UDP payloads SRC -> DST seen on IFACE
    python rawudp.py send SRC DST INFILE                     # each payload again, from SRC (raw IP)

``capture`` records, one hex line each, the payloads of the IPv4 UDP datagrams from
SRC to DST that cross IFACE in either direction (an AF_PACKET socket, so outgoing
ones too) for SECONDS; it prints "ready" once it listens.  ``send`` builds each
datagram's IPv4 and UDP headers itself (IPPROTO_RAW) with SRC as the source, so it
arrives exactly as one from the real sender would.
"""

import socket
import struct
import sys
import time

ETH_P_ALL, ETH_P_IP = 0x0003, 0x0800  # only ETH_P_ALL sockets see outgoing packets


def addr(text):
    host, port = text.rsplit(":", 1)
    return socket.inet_aton(host), int(port)


def capture(iface, src, dst, seconds, out):
    (sip, sport), (dip, dport) = addr(src), addr(dst)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(ETH_P_ALL))
    s.bind((iface, ETH_P_ALL))
    s.settimeout(0.05)
    print("ready", flush=True)
    got, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            pkt, (_if, proto, *_rest) = s.recvfrom(70000)
        except TimeoutError:
            continue
        if proto != ETH_P_IP:
            continue
        ihl = (pkt[0] & 0x0F) * 4
        if len(pkt) < ihl + 8 or pkt[9] != 17 or pkt[12:16] != sip or pkt[16:20] != dip:
            continue
        sp, dp, ulen = struct.unpack_from("!HHH", pkt, ihl)
        if (sp, dp) == (sport, dport):
            got.append(pkt[ihl + 8: ihl + ulen])
    with open(out, "w") as f:
        f.writelines(p.hex() + "\n" for p in got)


def send(src, dst, infile):
    (sip, sport), (dip, dport) = addr(src), addr(dst)
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    with open(infile) as f:
        payloads = [bytes.fromhex(line) for line in f if line.strip()]
    for p in payloads:
        udp = struct.pack("!HHHH", sport, dport, 8 + len(p), 0) + p
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0x4000, 64, 17, 0, sip, dip)
        s.sendto(ip + udp, (socket.inet_ntoa(dip), 0))
    print(len(payloads), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "capture":
        capture(sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5]), sys.argv[6])
    else:
        send(sys.argv[2], sys.argv[3], sys.argv[4])
