"""Test-session setup: an isolated accounting cache so no test relies on a warm one."""

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("FEDPRIV_CACHE_DIR", str(tmp_path_factory.mktemp("fedpriv-cache")))
    yield
    mp.undo()
