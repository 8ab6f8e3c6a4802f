"""Every name a module of the daemons promises in ``__all__`` exists (issue item 17):
``from module import *`` must not fail, nor a documented name be missing."""

import importlib
import pkgutil

import pytest

PACKAGES = ["daemons", "harpd", "stpd", "pktwayd", "ib"]


def _modules():
    out = []
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        out.append(name)
        out += [m.name for m in pkgutil.walk_packages(pkg.__path__, name + ".")]
    return sorted(out)


MODULES = _modules()


def test_every_package_is_walked():
    assert {"pktwayd.eep", "pktwayd.messages", "harpd.wire"} <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_names_exist(name):
    mod = importlib.import_module(name)
    exported = getattr(mod, "__all__", ())
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    missing = [n for n in exported if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
