"""README's first command keeps working: the demo runs end to end on the bundled
defaults, shows every part succeeding, and leaves no namespace behind."""

import subprocess
import sys

from lab.netns import sh


def test_demo_runs_and_cleans_up():
    r = subprocess.run([sys.executable, "-m", "lab.demo"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    assert out.count("link up") == 3 and out.count(" 0% packet loss") == 5 and out.count("auth on") == 3
    assert "drops on the switches: 0" in out
    assert "fabric seen from switch 1: 2 switches, 1 link, manager 1" in out and "1:21 -- 2:21   spanning tree" in out
    assert "B2 got b'hello from fabric A' from 0x40" in out and "B2 got b'along the planned L2 route'" in out
    assert "who is 'a1'? -> 0x40" in out
    # IP across unlike SANs: GSN host A1 -> router rai -> a host on the InfiniBand-style fabric
    assert "-> half 0x52 -> half 0x53 -> I1 (0x70, IB SAN 0x300)" in out and "pw0 MTU 2016 bytes" in out
    assert "ping A1 -> I1 10.77.0.2: 5 packets transmitted, 5 received, 0% packet loss" in out
    assert out.rstrip().endswith("cleaning up namespaces and processes")
    assert "gsndemo" not in sh("ip", "netns", "list").stdout
