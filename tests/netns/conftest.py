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
