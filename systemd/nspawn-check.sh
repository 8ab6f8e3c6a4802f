#!/usr/bin/env bash
# ./gsn systemd-check: boot the shipped units under a real systemd (PID 1 of a
# systemd-nspawn container from a debootstrap'd Debian rootfs) and check what issue 17 lists:
# gsn-switch, gsnd@gsn0, gsnd@gsn1, harpd, stpd and pktwayd@rab reach active with READY and a
# STATUS= line, a ping crosses the fabric (gsn0 -> switch -> gsn1, the latter in a network
# namespace of its own inside the container), `systemctl reload` works without procps, and
# after `systemctl stop` nothing is left in /run/gsnd.
#
# Needs root, debootstrap and systemd-container (installed with apt when missing), and the
# network for debootstrap (deb.debian.org) on the first run (the project and its dependencies
# are built as wheels on this host and installed in the container without an index); the
# rootfs is kept in $GSN_ROOTFS (default /var/cache/gsn-revival/rootfs-bookworm) for later runs.
# The container itself runs with --private-network.  Run by hand, not by the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOTFS=${GSN_ROOTFS:-/var/cache/gsn-revival/rootfs-bookworm}
MACHINE=gsncheck$$
fail() { echo "systemd-check: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || fail "run as root"

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v systemd-nspawn >/dev/null || need+=(systemd-container)
if [ ${#need[@]} -gt 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ ! -x "$ROOTFS/usr/bin/python3" ]; then
  echo "debootstrap bookworm into $ROOTFS (once)" >&2
  # no procps: ExecReload= must not need kill(1)
  debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,python3,python3-venv,iproute2,iputils-ping \
    bookworm "$ROOTFS" http://deb.debian.org/debian >/dev/null
fi

# --- install the project as an operator would: a wheel into a venv, then install-units
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
# the project and its dependencies as wheels, so the container installs with no index at all
.venv/bin/pip wheel -q -w "$wheels" . >/dev/null 2>&1 || fail "building the wheels"
rm -rf "$ROOTFS/var/cache/gsn-wheel" && mkdir -p "$ROOTFS/var/cache/gsn-wheel" && cp "$wheels"/*.whl "$ROOTFS/var/cache/gsn-wheel/"
systemd-nspawn -q --register=no --keep-unit -D "$ROOTFS" --pipe /bin/sh -ec '
  [ -x /opt/gsn-revival/bin/python ] || python3 -m venv /opt/gsn-revival
  /opt/gsn-revival/bin/pip install -q --no-index --find-links /var/cache/gsn-wheel --force-reinstall gsn-revival
  rm -f /etc/gsn/gsnd-gsn0.toml /etc/gsn/gsnd-gsn1.toml
  /opt/gsn-revival/bin/gsnctl install-units >/dev/null
' || fail "installing into the container"

# --- configs: the shipped ones; gsnd@gsn1 on switch port 2 from its own namespace "h2"
etc="$ROOTFS/etc/gsn"
sed -e 's/^local = "127.0.0.1:6401"/local = "10.99.0.2:6402"/' -e 's/^peer = "127.0.0.1:7001"/peer = "10.99.0.1:7002"/' \
    -e 's/^id = 1 /id = 2 /' -e 's/^interface = "gsn0"/interface = "gsn1"/' etc/gsnd.toml > "$etc/gsnd-gsn1.toml"
sed -e 's/^local = "127.0.0.1:7002"/local = "10.99.0.1:7002"/' -e 's/^peer = "127.0.0.1:6402"/peer = "10.99.0.2:6402"/' \
    etc/gsn-switch.toml > "$etc/gsn-switch.toml"
mkdir -p "$ROOTFS/etc/systemd/system/gsnd@gsn1.service.d"
cat > "$ROOTFS/etc/systemd/system/gsn-check-setup.service" <<'EOF'
[Unit]
Description=systemd-check: /dev/net/tun 0666 as on a stock host, network namespace h2 joined by a veth
Before=gsnd@gsn0.service gsnd@gsn1.service gsn-switch.service
[Service]
Type=oneshot
RemainAfterExit=yes
# nspawn copies the host's node, whose mode a container host may have narrowed to 0600
ExecStart=/bin/chmod 0666 /dev/net/tun
ExecStart=/usr/bin/ip netns add h2
ExecStart=/usr/bin/ip link add v-h1 type veth peer name v-h2 netns h2
ExecStart=/usr/bin/ip addr add 10.99.0.1/30 dev v-h1
ExecStart=/usr/bin/ip link set v-h1 up
ExecStart=/usr/bin/ip -n h2 addr add 10.99.0.2/30 dev v-h2
ExecStart=/usr/bin/ip -n h2 link set v-h2 up
ExecStart=/usr/bin/ip -n h2 link set lo up
[Install]
WantedBy=multi-user.target
EOF
cat > "$ROOTFS/etc/systemd/system/gsnd@gsn1.service.d/netns.conf" <<'EOF'
[Unit]
Requires=gsn-check-setup.service
After=gsn-check-setup.service
[Service]
NetworkNamespacePath=/run/netns/h2
EOF
UNITS="gsn-switch.service gsnd@gsn0.service gsnd@gsn1.service harpd.service stpd.service pktwayd@rab.service"
systemd-nspawn -q --register=no --keep-unit -D "$ROOTFS" --pipe /bin/sh -ec "
  systemd-sysusers >/dev/null 2>&1 || true
  systemctl enable gsn-check-setup.service $UNITS >/dev/null 2>&1
" || fail "enabling the units"

# --- boot
systemd-nspawn -q --boot --register=no --keep-unit --private-network -D "$ROOTFS" -M "$MACHINE" \
  >"$wheels/console.log" 2>&1 &
NSPAWN=$!
cleanup() {
  kill "$NSPAWN" 2>/dev/null || true
  wait "$NSPAWN" 2>/dev/null || true
  rm -rf "$wheels"
}
trap cleanup EXIT
leader=""
for _ in $(seq 100); do
  leader=$(pgrep -P "$NSPAWN" 2>/dev/null | head -1 || true)
  [ -n "$leader" ] && [ "$(cat /proc/"$leader"/comm 2>/dev/null)" = systemd ] && break
  sleep 0.2
done
[ -n "$leader" ] || fail "the container did not boot (see $wheels/console.log)"
inside() { nsenter -t "$leader" -a "$@"; }
active() { [ "$(inside systemctl is-active "$1" 2>/dev/null)" = active ]; }

for u in $UNITS; do
  for _ in $(seq 150); do active "$u" && break; sleep 0.2; done
  active "$u" || { inside journalctl -q --no-pager -o cat -n 5 -u "$u" >&2 || true; fail "$u is not active"; }
  status=$(inside systemctl show -p StatusText --value "$u")
  [ -n "$status" ] || fail "$u sent no STATUS="
  user=$(inside systemctl show -p User --value "$u")
  echo "ok   $u active, User=$user, STATUS=$status"
done
for _ in $(seq 100); do
  inside systemctl show -p StatusText --value gsnd@gsn1.service | grep -q "link up" && break; sleep 0.2
done
inside ip addr add 192.0.2.1/24 dev gsn0 && inside ip link set gsn0 up
inside ip netns exec h2 ip addr add 192.0.2.2/24 dev gsn1 && inside ip netns exec h2 ip link set gsn1 up
mtu=$(inside cat /sys/class/net/gsn0/mtu)
[ "$mtu" = 65280 ] || fail "gsn0 MTU $mtu, expected 65280"
inside ping -c 3 -W 2 192.0.2.2 >/dev/null || fail "ping 192.0.2.2 across the fabric"
echo "ok   ping gsn0 (192.0.2.1) -> switch -> gsn1 (192.0.2.2, namespace h2), gsn0 MTU $mtu"

inside test ! -e /usr/bin/kill -a ! -e /bin/kill || echo "note: a kill binary exists in the rootfs" >&2
for u in $UNITS; do
  inside systemctl reload "$u" || fail "systemctl reload $u"
  active "$u" || fail "$u not active after reload"
  for _ in $(seq 50); do  # journald takes the line from the stream asynchronously
    inside journalctl -q -b -u "$u" --no-pager -o cat | grep -q reload.done && break; sleep 0.1
  done
  inside journalctl -q -b -u "$u" --no-pager -o cat | grep -q reload.done || fail "$u logged no reload.done"
done
echo "ok   systemctl reload of every unit acknowledged (reload.done in the journal)"
for u in harpd.service stpd.service; do  # STATUS= follows: both have gsnd's ULA by now
  for _ in $(seq 100); do inside systemctl show -p StatusText --value "$u" | grep -q "ULA 02:" && break; sleep 0.2; done
  echo "ok   $u STATUS=$(inside systemctl show -p StatusText --value "$u")"
done
# priorities: gsnd.started is info; link.down (the switch stopped) a warning
inside systemctl stop gsn-switch.service
for _ in $(seq 100); do
  inside journalctl -q -b -p warning --no-pager -o cat -u gsnd@gsn0.service | grep -q link.down && break; sleep 0.2
done
inside journalctl -q -b -p info --no-pager -o cat -u gsnd@gsn0.service | grep -q gsnd.started \
  || fail "gsnd.started not in the journal at priority info"
! inside journalctl -q -b -p warning --no-pager -o cat -u gsnd@gsn0.service | grep -q gsnd.started \
  || fail "journalctl -p warning shows an info line"
warnings=$(inside journalctl -q -b -p warning --no-pager -o cat -u gsnd@gsn0.service | grep -o '"event": "[^"]*"' \
  | sort | uniq -c | tr -s ' ' | paste -sd, - || true)
[ -n "$warnings" ] || fail "journalctl -p warning shows no warning from gsnd@gsn0 after its switch stopped"
echo "ok   journal priorities: info lines only at -p info; -p warning -u gsnd@gsn0 shows $warnings"

inside systemctl stop $UNITS
left=$(inside sh -c 'ls -A /run/gsnd /run/gsn-switch /run/harpd /run/stpd /run/pktwayd 2>/dev/null' | grep -v '^/' || true)
[ -z "$left" ] || fail "left behind after stop: $left"
echo "ok   stopped: nothing left in /run/gsnd (kept as RuntimeDirectoryPreserve=yes) or the other runtime dirs"
echo "systemd-check: all passed"
