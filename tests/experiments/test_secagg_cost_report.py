"""The cost study's report: each case beside its cryptographic floor and its target."""

from fedpriv.experiments.secagg_cost import write_report


def _row(case, clients, *, plain, secure, rounds=10, setup=0.0, target=None):
    return {"case": case, "learner": "boosting", "clients": clients, "rounds": rounds,
            "plain_cpu": plain, "secure_cpu": secure, "ratio": secure / plain,
            "setup_cpu": setup, "per_round_overhead": (secure - plain - setup) / rounds,
            "target_ratio": target, "load": ["0.1", "0.1", "0.1"],
            "secure_all": [secure], "plain_all": [plain]}  # fmt: skip


def test_each_case_is_judged_by_its_own_target_and_shown_beside_its_floor(tmp_path):
    rows = [
        _row("a", 100, plain=1.0, secure=1.2, target=1.5),  # ratio met
        _row("c-gam", 5, plain=1.0, secure=2.0, target=1.3),  # ratio missed
        _row("b", 1000, plain=1.0, secure=9.0, setup=3.0),  # 0.5 s a round: met
        _row("d", 5, plain=0.1, secure=0.2, rounds=800),  # 0.2 s > 0.17 s a fit: missed
    ]
    path = tmp_path / "cost.md"
    write_report(rows, path)
    table = {ln.split(" | ")[0][2:]: ln for ln in path.read_text().splitlines() if ln[:3] in
             ("| a", "| b", "| c", "| d")}  # fmt: skip
    assert table["a"].endswith("| ≤ 1.5× | yes |")
    assert table["c-gam"].endswith("| ≤ 1.3× | no |")
    assert table["b"].endswith("| ≤ 1 s/round | yes |") and "| 0.5000 |" in table["b"]
    assert table["d"].endswith("| ≤ 0.17 s a fit | no |")
    floor_ratio = float(table["a"].split(" | ")[9].rstrip("×"))
    assert floor_ratio > 1.0  # plain + the cryptography's floor: above plain alone
