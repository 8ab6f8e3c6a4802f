"""The mypy tiers in pyproject.toml stay what ARCHITECTURE.md says: every codec and
sans-IO core is checked with every --strict flag, and no module is both strict and debt."""

import tomllib
from fnmatch import fnmatch
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MYPY = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
# mypy --strict, less the global-only flags (warn_unused_configs, warn_redundant_casts are set globally)
STRICT_FLAGS = ("disallow_any_generics", "disallow_subclassing_any", "disallow_untyped_calls", "disallow_untyped_defs",
                "disallow_incomplete_defs", "check_untyped_defs", "disallow_untyped_decorators", "warn_unused_ignores",
                "warn_return_any", "no_implicit_reexport", "strict_equality", "extra_checks")
# What is a codec or a core by its name (ARCHITECTURE.md "Checks" lists the others by hand)
ALWAYS_STRICT = ("*core.py", "*/wire.py", "*/codec.py", "*/states.py", "*/drops.py", "daemons/wire/*.py",
                 "daemons/link/*.py", "daemons/transitions.py")


def _override(flag: str) -> list[str]:
    found = [o for o in MYPY["overrides"] if o.get(flag)]
    assert len(found) <= 1, f"one override sets {flag}"
    return found[0]["module"] if found else []


def _covered(module: str, patterns: list[str]) -> bool:
    return any(module == p or (p.endswith(".*") and module.startswith(p[:-1])) for p in patterns)


def _modules(pattern: str) -> set[str]:
    """Modules of the checked packages whose path matches ``pattern`` (fnmatch: ``*`` spans directories)."""
    paths = (p.relative_to(ROOT) for package in MYPY["files"] for p in (ROOT / package).rglob("*.py"))
    return {".".join(p.with_suffix("").parts) for p in paths if fnmatch(str(p), pattern) and p.name != "__init__.py"}


def test_the_strict_override_is_all_of_strict():
    (strict,) = [o for o in MYPY["overrides"] if o.get("disallow_any_generics")]
    assert {f: strict.get(f) for f in STRICT_FLAGS} == dict.fromkeys(STRICT_FLAGS, True)
    assert MYPY["warn_redundant_casts"] is True


def test_every_codec_and_core_is_strict():
    strict = _override("disallow_any_generics")
    wanted = set().union(*(_modules(p) for p in ALWAYS_STRICT))
    assert "daemons.endpoint.core" in wanted and "servernet.codec" in wanted  # the globs find them
    assert sorted(m for m in wanted if not _covered(m, strict)) == []


def test_no_module_is_exempt():
    """The debt list is gone: a module mypy finds errors in fails the gate, none is ignored."""
    assert _override("ignore_errors") == []


def test_every_listed_module_exists():
    listed = [m for m in _override("disallow_any_generics") + _override("ignore_errors") if not m.endswith(".*")]
    missing = [m for m in listed if not (ROOT / (m.replace(".", "/") + ".py")).exists()]
    assert missing == []
