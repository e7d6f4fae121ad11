"""``fedpriv report``'s page in a real browser: headless Chromium (Debian's ``chromium``)
renders it offline, with no console error, every shape plot drawn, and a screenshot
that is a picture, not a blank page. Skipped, with the reason printed, without Chromium."""

import re
import shutil
import subprocess

import numpy as np
import pytest
from fedpriv.server.report import write_report

from fedpriv.artefact import load_model
from tests.server.test_report import finished  # noqa: F401 - the fixture

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium (apt-get install chromium): the page is not rendered"
)
#: As the machine's probe starts it: no sandbox (root), no network of its own, a new profile.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0")  # fmt: skip
#: What Chromium logs for any console message of the page (it has no script: none is
#: expected), an uncaught error, and a resource it could not load.
CONSOLE_ERROR = re.compile(r"CONSOLE[:(]\d+|Uncaught|Failed to load resource|ERR_[A-Z_]+")


def chromium(page, tmp_path, *args: str) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    profile.mkdir()
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if CONSOLE_ERROR.search(line)]


def test_the_console_check_sees_a_script_error(tmp_path):
    """The check below can fail: a page whose script throws is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><script>undefined_function()</script></body></html>")
    run = chromium(bad, tmp_path, "--dump-dom")
    assert console_errors(run.stderr), run.stderr[-2000:]


def test_the_page_renders_in_chromium(finished, tmp_path):  # noqa: F811 - the fixture
    page = write_report(finished, tmp_path / "report.html")
    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_errors(dom.stderr) == []
    terms = len(load_model(finished / "model.fedpriv.npz").schema.columns)
    assert dom.stdout.count('class="shape-plot"') == terms  # every term drawn
    assert "<title>fedpriv report: dp_gam on heart" in dom.stdout
    assert dom.stdout.count("<polyline") >= 3  # ε curve, ROC, reliability at least
    shot = tmp_path / "report.png"
    run = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2400")
    assert run.returncode == 0 and shot.is_file(), run.stderr[-2000:]
    assert console_errors(run.stderr) == []
    from PIL import Image

    pixels = np.asarray(Image.open(shot).convert("RGB"))
    assert pixels.shape[:2] == (2400, 1280)
    # A page, not a blank or an error screen: many colours (text, charts, bands), and the
    # badge's green of a completed run somewhere.
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 200
    green = (abs(pixels.astype(int) - [0x2C, 0xA0, 0x2C]).sum(axis=2) < 12).sum()
    assert green > 100


@pytest.mark.processes
def test_the_main_jobs_report_renders_in_chromium(tmp_path):
    """The README's main job (a ``flwr run`` simulation of 5 hospitals, the main-job
    preset), its report written by ``fedpriv report`` and rendered: every term drawn."""
    from fedpriv.server.cli import main as fedpriv
    from fedpriv.server.simulate import main as simulate

    assert simulate(["--out-dir", str(tmp_path / "out")]) == 0
    (run,) = [p for p in (tmp_path / "out").iterdir() if p.is_dir() and not p.is_symlink()]
    assert fedpriv(["report", str(run)]) == 0
    page = run / "report.html"
    dom = chromium(page, tmp_path, "--dump-dom")
    assert dom.returncode == 0 and console_errors(dom.stderr) == [], dom.stderr[-2000:]
    assert "<title>fedpriv report: dp_gam on diabetes130" in dom.stdout
    terms = len(load_model(run / "model.fedpriv.npz").schema.columns)
    assert dom.stdout.count('class="shape-plot"') == terms
