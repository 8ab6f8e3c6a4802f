"""./gsn fuzz: run the fuzz targets for a wall time, minimise and save any crash.

    ./gsn fuzz --list
    ./gsn fuzz --minutes 5 [TARGET...]          every target (or those named), one after another
    ./gsn fuzz --replay fuzz/crashes/link-0123abcd.bin

Each target runs under atheris (coverage-guided libFuzzer) in a child process, its
corpus kept in fuzz/corpus/<target>/ (seeded from the target's structure-built
seeds); ``--engine random`` mutates the seeds in-process instead (no atheris).  A
crash is re-run in-process, minimised and written to fuzz/crashes/<target>-<hash>.bin.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from .minimize import minimize, signature
from .registry import load

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CRASHES = HERE / "crashes"
CORPUS = HERE / "corpus"


def target_of(path: Path, targets) -> str:
    stem = path.name.rsplit(".", 1)[0]
    name = stem.rsplit("-", 1)[0]
    if name not in targets:
        raise SystemExit(f"{path}: no target named {name!r} (files are <target>-<hash>.bin)")
    return name


def save_crash(target, data: bytes, log=print) -> Path | None:
    """Minimise ``data`` if it still crashes in-process and save it; None if it does not."""
    sig = signature(target, data)
    if sig is None:
        return None
    small = minimize(target, data)
    CRASHES.mkdir(exist_ok=True)
    path = CRASHES / f"{target.name}-{hashlib.sha1(small).hexdigest()[:12]}.bin"
    path.write_bytes(small)
    rel = path.relative_to(ROOT)
    log(f"  CRASH {target.name}: {sig[0]} at {sig[1]}:{sig[2]} ({len(data)} -> {len(small)} bytes)")
    log(f"    replay: ./gsn fuzz --replay {rel}")
    return path


def seed_corpus(target) -> Path:
    d = CORPUS / target.name
    d.mkdir(parents=True, exist_ok=True)
    for s in target.seeds:
        (d / f"seed-{hashlib.sha1(s).hexdigest()[:12]}").write_bytes(s)
    return d


def run_atheris(target, seconds: float, max_len: int) -> tuple[int, list[Path]]:
    corpus = seed_corpus(target)
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{target.name}-") as art:
        cmd = [sys.executable, "-m", "fuzz.worker", target.name, f"-max_total_time={max(1, int(seconds))}",
               f"-max_len={max_len}", "-timeout=20", "-rss_limit_mb=2048", "-print_final_stats=1",
               f"-artifact_prefix={art}/", str(corpus)]
        code = None
        try:
            run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds + 120)
            out, code = run.stderr + run.stdout, run.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        m = re.search(r"stat::number_of_executed_units:\s*(\d+)", out)
        execs = int(m.group(1)) if m else max([int(x) for x in re.findall(r"^#(\d+)\s", out, re.M)] or [0])
        found = []
        for f in sorted(Path(art).iterdir()):
            data = f.read_bytes()
            saved = save_crash(target, data)
            if saved is None:  # e.g. a timeout or memory blow-up that does not reproduce in-process
                CRASHES.mkdir(exist_ok=True)
                saved = CRASHES / f"{target.name}-{f.name.split('-')[0]}-{hashlib.sha1(data).hexdigest()[:12]}.bin"
                saved.write_bytes(data)
                print(f"  {f.name.split('-')[0].upper()} {target.name} (not reproducible in-process); "
                      f"input kept: {saved.relative_to(ROOT)}")
                tail = "\n".join(out.splitlines()[-15:])
                print("    " + tail.replace("\n", "\n    "))
            found.append(saved)
        if not found and code != 0:
            print(f"  {target.name}: the atheris worker exited {code}:\n{out[-2000:]}")
        return execs, found


def run_random(target, seconds: float, max_len: int, rng: random.Random) -> tuple[int, list[Path]]:
    """No atheris: mutate the seeds (and what grew from them) in-process."""
    pool = list(target.seeds) or [b""]
    deadline, n, found = time.monotonic() + seconds, 0, []
    while time.monotonic() < deadline:
        base = bytearray(rng.choice(pool))
        for _ in range(rng.randint(1, 8)):
            k = rng.randrange(4)
            if k == 0 or not base:
                base += rng.randbytes(rng.randint(1, 16))
            elif k == 1:
                base[rng.randrange(len(base))] = rng.randrange(256)
            elif k == 2:
                del base[rng.randrange(len(base)) :]
            else:
                i = rng.randrange(len(base))
                base[i:i] = rng.randbytes(rng.randint(1, 8))
        data = bytes(base[:max_len])
        n += 1
        try:
            target.one_input(data)
        except Exception:  # noqa: BLE001
            p = save_crash(target, data)
            if p:
                found.append(p)
                break
        if len(pool) < 256 and rng.random() < 0.05:
            pool.append(data)
    return n, found


def replay(path: Path) -> int:
    targets = load()
    target = targets[target_of(path, targets)]
    data = path.read_bytes()
    try:
        target.one_input(data)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        print(f"{path}: crashes {target.name}", file=sys.stderr)
        return 1
    print(f"{path}: {target.name} handles it (no crash)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="./gsn fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("targets", nargs="*", help="target names (default: all; see --list)")
    ap.add_argument("--minutes", type=float, default=1.0, help="total wall time, shared between the targets")
    ap.add_argument("--list", action="store_true", help="list the targets")
    ap.add_argument("--replay", type=Path, metavar="FILE", help="run one saved input through its target")
    ap.add_argument("--engine", choices=["atheris", "random"], default=None,
                    help="atheris (default when installed) or in-process random mutation")
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--seed", type=int, default=None, help="for --engine random")
    args = ap.parse_args(argv)
    if args.replay:
        return replay(args.replay)
    targets = load()
    if args.list:
        width = max(map(len, targets))
        for name, t in targets.items():
            rej = ", ".join(e.__name__ for e in t.rejects) or "none (drops are counted)"
            print(f"{name:<{width}}  {t.doc}  [rejects: {rej}]")
        return 0
    unknown = [n for n in args.targets if n not in targets]
    if unknown:
        ap.error(f"unknown target(s) {', '.join(unknown)}; see --list")
    chosen = [targets[n] for n in (args.targets or targets)]
    engine = args.engine
    if engine is None:
        try:
            import atheris  # noqa: F401

            engine = "atheris"
        except ImportError:
            engine = "random"
    rng = random.Random(args.seed)
    share = args.minutes * 60 / len(chosen)
    print(f"fuzzing {len(chosen)} target(s) with {engine}, {share:.0f} s each")
    total, crashes, rows = 0, [], []
    for t in chosen:
        t0 = time.monotonic()
        if engine == "atheris":
            n, found = run_atheris(t, share, args.max_len)
        else:
            n, found = run_random(t, share, args.max_len, rng)
        dt = time.monotonic() - t0
        rows.append((t.name, n, n / dt if dt else 0.0, len(found)))
        print(f"  {t.name:<20} {n:>9} inputs {n / dt if dt else 0:>8.0f}/s  crashes: {len(found)}", flush=True)
        total += n
        crashes += found
    print(f"total: {total} inputs, {len(crashes)} crash(es)")
    for c in crashes:
        print(f"  ./gsn fuzz --replay {c.relative_to(ROOT)}")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
