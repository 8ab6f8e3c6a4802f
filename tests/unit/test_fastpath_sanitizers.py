"""Build daemons._fastpath, daemons._link and daemons._switchfwd with ASan+UBSan into a temp dir and
run the differential tests, the link tests (Link and CLink), the CLink differential test,
gsnd's data plane (C reassembly, pumps on real descriptors, the ULP clients it serves),
the switch's forwarding walk and its C loop (SwitchPlane.run), and the fuzz harnesses
against them in a subprocess.

Fails on any sanitizer report.  Skipped when gcc or libasan is missing.
"""

from __future__ import annotations

import os

from tests.unit.sanitize import ROOT, build, run_tests

MODULES = ("_fastpath", "_link", "_switchfwd")
TESTS = ["tests/unit/test_fastpath.py", "tests/unit/test_link_lcrc.py", "tests/fuzz/test_fuzz_fastpath.py",
         "tests/unit/test_link.py", "tests/unit/test_packet_of_death.py", "tests/unit/test_clink_differential.py",
         "tests/unit/test_link_recovery.py",
         "tests/fuzz/test_fuzz_link.py", "tests/unit/test_reasm_differential.py", "tests/unit/test_dataplane.py",
         "tests/fuzz/test_fuzz_dataplane.py", "tests/unit/test_switchfwd_differential.py",
         "tests/fuzz/test_fuzz_switchfwd.py", "tests/sim/test_switch_sim.py",
         "tests/unit/test_switchloop_differential.py", "tests/fuzz/test_fuzz_switchloop.py",
         "tests/unit/test_dploop.py", "tests/unit/test_switchrun.py", "tests/fuzz/test_fuzz_switchrx.py",
         # its bounds are wall-clock latencies, which the instrumented build stretches
         "--deselect", "tests/unit/test_dploop.py::test_control_socket_and_trio_timers_are_served_under_full_load",
         "tests/unit/test_ulp_send.py", "tests/unit/test_ulp_dataplane.py", "tests/unit/test_ulpraw_wire.py",
         "tests/unit/test_txfast.py",
         "tests/unit/test_rx_checks.py", "tests/unit/test_cableauth_compiled.py", "tests/fuzz/test_fuzz_cableauth.py",
         "tests/unit/test_vnet.py", "tests/fuzz/test_fuzz_lcrc.py", "tests/fuzz/test_fuzz_txfast.py",
         # atheris runs its own interpreter child, which would not carry the instrumented module
         "--deselect", "tests/fuzz/test_fuzz_fastpath.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_link.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_dataplane.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_switchfwd.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_switchloop.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_switchrx.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_cableauth.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_lcrc.py::test_atheris_short_run",
         "--deselect", "tests/fuzz/test_fuzz_txfast.py::test_atheris_short_run"]


def test_kernels_clean_under_asan_and_ubsan(tmp_path):
    sos = {f"daemons.{name}": build(ROOT / "daemons" / f"{name}.c", tmp_path,
                                    *(["crypto"] if name == "_link" else []))  # keyed cables' HMAC (_cableauth.h)
           for name in MODULES}
    run_tests(sos, TESTS, "import daemons, daemons.link.clink\nassert daemons.link.clink._link is daemons._link",
              GSN_FUZZ_RUNS=os.environ.get("GSN_FUZZ_RUNS", "1500"))
