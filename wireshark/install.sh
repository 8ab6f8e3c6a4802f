#!/usr/bin/env bash
# Install the gsn-revival Lua dissectors (this directory's *.lua) where Wireshark and
# tshark load plugins from, in a gsn-revival/ subdirectory.
#   ./gsn wireshark-install            root: the global Lua plugin folder; others: ~/.local/lib/wireshark/plugins
#   ./gsn wireshark-install --user     ~/.local/lib/wireshark/plugins, whoever runs it
#   ./gsn wireshark-install --dir DIR  DIR/gsn-revival
# The folders are the ones `tshark -G folders` names ("Global Lua Plugins", "Personal Lua Plugins").
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)"
usage="usage: ./gsn wireshark-install [--user | --dir DIR]"
mode=auto dir=
while [ $# -gt 0 ]; do
  case "$1" in
    --user) mode=user ;;
    --dir) [ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }; mode=dir; dir=$2; shift ;;
    -h|--help) echo "$usage"; sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "wireshark-install: unknown argument '$1'" >&2; echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
folder() {  # the folder tshark reports for a "... Lua Plugins" line, or nothing
  command -v tshark >/dev/null && tshark -G folders 2>/dev/null | sed -n "s/^$1 Lua Plugins:[[:space:]]*//p" | head -n1
}
if [ "$mode" = auto ]; then
  if [ "$(id -u)" = 0 ]; then
    dir=$(folder Global)
    [ -n "$dir" ] || { echo "wireshark-install: tshark not found, so the global plugin folder is unknown; install tshark or use --user/--dir" >&2; exit 1; }
  else
    mode=user
  fi
fi
if [ "$mode" = user ]; then
  dir=$(folder Personal)
  dir=${dir:-$HOME/.local/lib/wireshark/plugins}
fi
dest="$dir/gsn-revival"
mkdir -p "$dest"
install -m 0644 "$src"/*.lua "$dest"/
echo "installed $(cd "$src" && ls *.lua | tr '\n' ' ')into $dest"
echo "check: tshark -G plugins | grep gsn_   (Wireshark: Help > About > Plugins)"
