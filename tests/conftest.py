"""Test-session setup: an isolated accounting cache so no test relies on a warm one,
and one thread per BLAS/OpenMP pool (the suite runs on two pytest workers on two
cores; a second thread per worker only oversubscribes them, e.g. scikit-learn's
histogram boosting took 1.6–19.5 s per fit with two threads under load, 0.3–0.9 s
with one)."""

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import pytest  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("FEDPRIV_CACHE_DIR", str(tmp_path_factory.mktemp("fedpriv-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True, scope="session")
def _fedpriv_logger_as_configured(request):
    """The ``fedpriv`` logger as an entry point leaves it (``logs.configure``: it does
    not propagate to the root logger) from the first test on. pytest's capture handler
    joins a non-propagating logger only when a test phase begins: without this, a test
    whose call configures logging (the ServerApp, the CLI) loses its ``fedpriv`` records
    to ``caplog`` when it is the first such test of its worker, and passes otherwise.
    Live logging (``--log-cli-level``) gets its handler on the logger too."""
    import logging

    logger = logging.getLogger("fedpriv")
    saved = logger.propagate
    logger.propagate = False
    plugin = request.config.pluginmanager.get_plugin("logging-plugin")
    live = getattr(plugin, "log_cli_handler", None)
    if live is not None:
        logger.addHandler(live)
    yield
    if live is not None:
        logger.removeHandler(live)
    logger.propagate = saved


@pytest.fixture
def largest_pld(monkeypatch):
    """Points of the largest PLD composed while the test runs (0: none was built)."""
    from fedpriv.privacy import pld as pld_mod
    from fedpriv.privacy import pld_size

    seen = [0]
    original = pld_mod.composed_pld

    def recording(groups, vdi, **kw):
        out = original(groups, vdi, **kw)
        if out is not None:
            seen[0] = max(seen[0], pld_size.span(out))
        return out

    monkeypatch.setattr(pld_mod, "composed_pld", recording)
    return seen
