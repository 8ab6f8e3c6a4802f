"""A userspace stand-in for `tc netem delay 1ms loss L duplicate D reorder R` on one
UDP cable (this kernel has no sch_netem).  Run inside a namespace:

    python impair.py LISTEN_HOST:PORT  INNER_PEER_HOST:PORT  OUTER_BIND_HOST:PORT  OUTER_PEER_HOST:PORT
                     LOSS DUP REORDER SEED [FRAG_MTU]

Datagrams from the inner peer (gsnd) arriving on LISTEN go out of OUTER_BIND to
OUTER_PEER (the switch port), and the other way round.  Each datagram is lost with
probability LOSS, sent twice with DUP, and, as netem does, sent at once with
probability REORDER or else delayed by 1 ms, so the prompt ones overtake.
With FRAG_MTU, LOSS is per IP packet on an underlay of that MTU: a datagram that
would travel as k fragments is lost with probability 1 - (1 - LOSS)**k, as one
lost fragment loses the whole datagram.
"""

import heapq
import random
import selectors
import socket
import sys
import time


def addr(s):
    h, p = s.rsplit(":", 1)
    return h, int(p)


def main():
    listen, inner, bind, outer = map(addr, sys.argv[1:5])
    loss, dup, reorder = map(float, sys.argv[5:8])
    rng = random.Random(int(sys.argv[8]))
    frag_mtu = int(sys.argv[9]) if len(sys.argv) > 9 else 0

    def lost(size):
        if not frag_mtu:
            return rng.random() < loss
        frags = -(-(size + 8) // ((frag_mtu - 20) & ~7))  # IPv4: 8-byte fragment offsets
        return rng.random() < 1 - (1 - loss) ** frags
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(listen)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b.bind(bind)
    for s in (a, b):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
        s.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(a, selectors.EVENT_READ, (b, outer, inner))
    sel.register(b, selectors.EVENT_READ, (a, inner, outer))
    heap, seq = [], 0
    print("ready", flush=True)
    while True:
        timeout = max(0.0, heap[0][0] - time.monotonic()) if heap else None
        for key, _ in sel.select(timeout):
            out, dest, expect = key.data
            while True:
                try:
                    data, src = key.fileobj.recvfrom(65536)
                except BlockingIOError:
                    break
                if src != expect or lost(len(data)):
                    continue
                for _ in range(2 if rng.random() < dup else 1):
                    delay = 0.0 if rng.random() < reorder else 0.001
                    seq += 1
                    heapq.heappush(heap, (time.monotonic() + delay, seq, out, dest, data))
        now = time.monotonic()
        while heap and heap[0][0] <= now:
            _, _, out, dest, data = heapq.heappop(heap)
            try:
                out.sendto(data, dest)
            except OSError:
                pass


if __name__ == "__main__":
    main()
