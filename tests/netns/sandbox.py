"""Run a daemon under the kernel-side restrictions its systemd unit asks for, without systemd.

    /usr/bin/python3 tests/netns/sandbox.py --unit systemd/gsnd@.service -- gsnd --local ...

Applied from the unit file, then exec'd into the daemon (same pid):

- SystemCallFilter= (groups expanded by ``systemd-analyze syscall-filter``, allow list then
  ``~`` deny lists, as systemd composes them) with SystemCallErrorNumber= for the rest;
- RestrictAddressFamilies= (socket(2) of any other family fails with EAFNOSUPPORT);
- MemoryDenyWriteExecute= (no writable+executable mmap, no mprotect adding PROT_EXEC);
- UMask=;
- ProtectProc=/ProcSubset= (a private /proc mounted hidepid=/subset=);
- PrivateNetwork= (a new, empty network namespace).

The seccomp rules come from libseccomp's Python binding (Debian: python3-seccomp), hence the
system interpreter.  Users, capabilities and the file-system view (ProtectSystem=, ...) are
not emulated: the namespace tests run the daemons as root in temporary directories.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import socket
import subprocess
import sys

import seccomp

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_SLAVE = 0x2, 0x4, 0x8, 0x4000, 0x80000
PROT_WRITE, PROT_EXEC = 0x2, 0x4


def unit_settings(path: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in open(path):
        line = line.strip()
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, value = line.split("=", 1)
            out.setdefault(key.strip(), []).append(value.strip())
    return out


def syscall_groups() -> dict[str, list[str]]:
    text = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager"], check=True, capture_output=True,
                          text=True).stdout
    groups: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("@"):
            current = groups.setdefault(line.strip(), [])
        elif current is not None and line.strip() and not line.strip().startswith("#"):
            current.append(line.strip())
    return groups


def expand(names: list[str], groups: dict[str, list[str]]) -> set[str]:
    out: set[str] = set()
    for name in names:
        out |= expand(groups[name], groups) if name.startswith("@") else {name}
    return out


def allowed_syscalls(filters: list[str]) -> set[str] | None:
    """The allow list systemd ends up with: the first (allow) entry, minus every ~ entry."""
    if not filters:
        return None
    groups = syscall_groups()
    allow: set[str] = set()
    for entry in filters:
        deny = entry.startswith("~")
        names = expand(entry.lstrip("~").split(), groups)
        allow = allow - names if deny else allow | names
    return allow


def load_filters(settings: dict[str, list[str]]) -> None:
    err = getattr(errno, (settings.get("SystemCallErrorNumber") or ["EPERM"])[-1])
    families = settings.get("RestrictAddressFamilies")
    if families:
        keep = {getattr(socket, fam) for fam in " ".join(families).split()}
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        for fam in range(64):
            if fam not in keep:
                f.add_rule(seccomp.ERRNO(errno.EAFNOSUPPORT), "socket", seccomp.Arg(0, seccomp.EQ, fam))
        f.load()
    if settings.get("MemoryDenyWriteExecute") == ["yes"]:
        f = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
        wx = PROT_WRITE | PROT_EXEC
        f.add_rule(seccomp.ERRNO(errno.EPERM), "mmap", seccomp.Arg(2, seccomp.MASKED_EQ, wx, wx))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "mprotect", seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
        f.add_rule(seccomp.ERRNO(errno.EPERM), "pkey_mprotect",
                   seccomp.Arg(2, seccomp.MASKED_EQ, PROT_EXEC, PROT_EXEC))
        f.load()
    # the allow list goes last: once it is loaded, seccomp(2) itself is refused
    allow = allowed_syscalls(settings.get("SystemCallFilter", []))
    if allow is not None:
        f = seccomp.SyscallFilter(defaction=seccomp.ERRNO(err))
        for name in sorted(allow):
            try:
                f.add_rule(seccomp.ALLOW, name)
            except (RuntimeError, ValueError, OSError):  # not a syscall on this architecture
                pass
        f.load()


def namespaces(settings: dict[str, list[str]]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)

    def check(rc: int, what: str) -> None:
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    flags = CLONE_NEWNET if settings.get("PrivateNetwork") == ["yes"] else 0
    proc_opts = []
    if settings.get("ProtectProc", ["default"])[-1] != "default":
        proc_opts.append(f"hidepid={settings['ProtectProc'][-1]}")
    if settings.get("ProcSubset", ["all"])[-1] == "pid":
        proc_opts.append("subset=pid")
    if proc_opts:
        flags |= CLONE_NEWNS
    if not flags:
        return
    check(libc.unshare(flags), "unshare")
    if flags & CLONE_NEWNET:
        subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    if proc_opts:
        check(libc.mount(b"none", b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
        check(libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, ",".join(proc_opts).encode()),
              "mount proc")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--unit", required=True)
    ap.add_argument("argv", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    settings = unit_settings(args.unit)
    namespaces(settings)
    if "UMask" in settings:
        os.umask(int(settings["UMask"][-1], 8))
    load_filters(settings)
    os.execv(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main())
