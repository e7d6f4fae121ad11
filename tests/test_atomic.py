"""`latest`: the pointer to a results directory's newest run."""

import os

from fedpriv.atomic import point_latest


def test_latest_follows_the_newest_run_and_never_replaces_a_real_entry(tmp_path):
    for run in ("101", "202"):
        (tmp_path / run).mkdir()
        (tmp_path / run / "model.fedpriv.npz").write_text(run)
    assert point_latest(tmp_path, "101") == tmp_path / "latest"
    assert point_latest(tmp_path, "202") == tmp_path / "latest"
    assert os.readlink(tmp_path / "latest") == "202"  # relative: the folder can move
    assert (tmp_path / "latest" / "model.fedpriv.npz").read_text() == "202"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["101", "202", "latest"]
    other = tmp_path / "elsewhere"
    (other / "latest").mkdir(parents=True)  # a user's own folder called latest
    assert point_latest(other, "101") is None
    assert (other / "latest").is_dir() and not (other / "latest").is_symlink()
