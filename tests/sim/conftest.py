"""Fixtures shared by the simulations."""

from __future__ import annotations

import functools

import pytest

from daemons.switch import core
from daemons.switch.forward import Forwarder, PyForwarder
from tests.sim import fabric, mesh


@pytest.fixture(params=["compiled", "python"])
def switch_forwarder(request, monkeypatch):
    """Run a simulation's switches with the compiled ingress walk and with its Python
    oracle (use with ``pytestmark = pytest.mark.usefixtures("switch_forwarder")``)."""
    impl = {"compiled": Forwarder, "python": PyForwarder}[request.param]
    make = functools.partial(core.Switch, forwarder=impl)
    monkeypatch.setattr(fabric, "Switch", make)
    monkeypatch.setattr(mesh, "Switch", make)
    return impl
