"""Fixtures shared by the simulations."""

from __future__ import annotations

import functools

import pytest

from daemons.switch import core
from daemons.switch.forward import Forwarder, PyForwarder
from tests.sim import fabric, mesh


@pytest.fixture(params=["compiled", "python", "plane"])
def switch_forwarder(request, monkeypatch):
    """Run a simulation's switches with the compiled ingress walk, with its Python
    oracle, and with the whole data path compiled (Switch(plane=True))
    (use with ``pytestmark = pytest.mark.usefixtures("switch_forwarder")``)."""
    impl = {"compiled": Forwarder, "python": PyForwarder, "plane": Forwarder}[request.param]
    make = functools.partial(core.Switch, forwarder=impl, plane=request.param == "plane")
    monkeypatch.setattr(fabric, "Switch", make)
    monkeypatch.setattr(mesh, "Switch", make)
    return impl
