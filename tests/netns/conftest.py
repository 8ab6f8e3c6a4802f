import os
import shutil

import pytest

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"),
                                reason="network namespaces need root and iproute2")


def pytest_collection_modifyitems(items):
    for item in items:
        if "netns" in str(item.fspath):
            item.add_marker(pytest.mark.netns)
            item.add_marker(needs_root)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing namespace test shows its fabrics' daemon logs and gsnctl counters
    (the temporary directory holding them is removed at teardown)."""
    from lab.netns import DUMPS, LIVE

    report = yield
    if report.failed and call.when in ("setup", "call"):
        for tag, text in DUMPS:
            report.sections.append((f"fabric {tag} daemons (at its close)", text))
        for fab in sorted(LIVE, key=lambda f: f.tag):
            try:
                text = fab.diagnostics()
            except Exception as exc:  # never hide the test's own failure
                text = f"(diagnostics failed: {exc!r})"
            report.sections.append((f"fabric {fab.tag} daemons", text))
    if call.when in ("call", "teardown"):
        DUMPS.clear()
    return report
