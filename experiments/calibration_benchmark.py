"""Calibration speed and safety: fedpriv vs dp-accounting's default, same run.

For ε ∈ {0.5, 1, 2, 4, 8}, δ = 1e-5, q = 0.05 and T ∈ {25, 75, 150, 800},
prints per configuration:

* fedpriv's cold time (empty cache), memory-cache time and disk-cache time;
* the calibrated z and its ε re-checked with dp-accounting's own
  ``PLDAccountant(value_discretization_interval=1e-4)`` (independent of
  fedpriv's PLD builder);
* dp-accounting's ``calibrate_dp_mechanism`` with its default PLD accountant
  and default bracket: its z, its time and the speed ratio.

Usage::

    python -m fedpriv.experiments.calibration_benchmark            # full grid
    python -m fedpriv.experiments.calibration_benchmark --quick    # ε ∈ {1, 8}, T ∈ {25, 800}
    python -m fedpriv.experiments.calibration_benchmark --no-baseline

Exit status is 1 if any calibrated ε exceeds its target at 1e-4.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
STEPS = (25, 75, 150, 800)
DELTA = 1e-5
Q = 0.05


def _library_epsilon(event, delta: float) -> float:
    from dp_accounting.pld import pld_privacy_accountant

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(event)
    return acc.get_epsilon(delta)


def _dp_accounting_default(eps: float, steps: int) -> tuple[float, float]:
    from dp_accounting import mechanism_calibration
    from dp_accounting.pld import pld_privacy_accountant

    from fedpriv.privacy import subsampled_gaussian_event

    t0 = time.perf_counter()
    z = mechanism_calibration.calibrate_dp_mechanism(
        pld_privacy_accountant.PLDAccountant,
        lambda z: subsampled_gaussian_event(z, sampling_probability=Q, steps=steps),
        eps,
        DELTA,
    )
    return float(z), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 × 2 grid instead of 5 × 4")
    parser.add_argument("--no-baseline", action="store_true", help="skip dp-accounting's default")
    args = parser.parse_args(argv)

    # A private, empty cache directory makes "cold" really cold.
    os.environ["FEDPRIV_CACHE_DIR"] = tempfile.mkdtemp(prefix="fedpriv-calib-bench-")
    from fedpriv.privacy import calibrate_gaussian_noise_multiplier, subsampled_gaussian_event
    from fedpriv.privacy import calibration as calibration_mod

    epsilons = (1.0, 8.0) if args.quick else EPSILONS
    steps_grid = (25, 800) if args.quick else STEPS
    # Warm-up: import-time and first-call costs are not calibration costs.
    calibrate_gaussian_noise_multiplier(
        target_epsilon=3.0, target_delta=1e-6, sampling_probability=0.1, steps=3
    )

    header = (
        f"{'eps':>4} {'T':>4} | {'z fedpriv':>10} {'eps@1e-4':>9} {'cold s':>7} {'mem s':>8} "
        f"{'disk s':>8}"
    )
    if not args.no_baseline:
        header += f" | {'z dp-acc':>10} {'dp-acc s':>8} {'ratio':>6}"
    print(f"q = {Q}, delta = {DELTA}; eps@1e-4 re-checked by dp-accounting's PLDAccountant")
    print(header)
    print("-" * len(header))
    cold, mem, disk, ratios, worst_gap = [], [], [], [], -float("inf")
    failures = 0
    for eps in epsilons:
        for steps in steps_grid:
            kw = {
                "target_epsilon": eps,
                "target_delta": DELTA,
                "sampling_probability": Q,
                "steps": steps,
            }
            first = calibrate_gaussian_noise_multiplier(**kw)
            t0 = time.perf_counter()
            again = calibrate_gaussian_noise_multiplier(**kw)
            t_mem = time.perf_counter() - t0
            calibration_mod.clear_memory_cache()
            t0 = time.perf_counter()
            from_disk = calibrate_gaussian_noise_multiplier(**kw)
            t_disk = time.perf_counter() - t0
            assert again.from_cache and from_disk.from_cache and not first.from_cache
            z = first.noise_multiplier
            checked = _library_epsilon(
                subsampled_gaussian_event(z, sampling_probability=Q, steps=steps), DELTA
            )
            failures += checked > eps
            worst_gap = max(worst_gap, checked - eps)
            cold.append(first.seconds)
            mem.append(t_mem)
            disk.append(t_disk)
            row = (
                f"{eps:>4g} {steps:>4d} | {z:>10.5f} {checked:>9.5f} {first.seconds:>7.3f} "
                f"{t_mem:>8.5f} {t_disk:>8.5f}"
            )
            if not args.no_baseline:
                z_ref, t_ref = _dp_accounting_default(eps, steps)
                ratios.append(t_ref / first.seconds)
                row += f" | {z_ref:>10.5f} {t_ref:>8.3f} {t_ref / first.seconds:>5.1f}x"
            print(row, flush=True)
    print("-" * len(header))
    print(
        f"fedpriv cold: max {max(cold):.3f} s, median {statistics.median(cold):.3f} s  "
        f"(target <= 1 s)"
    )
    print(
        f"fedpriv cached: memory max {max(mem) * 1e3:.3f} ms, disk max {max(disk) * 1e3:.3f} ms  "
        f"(target <= 100 ms)"
    )
    if ratios:
        print(
            f"dp-accounting default / fedpriv cold: min {min(ratios):.1f}x, "
            f"median {statistics.median(ratios):.1f}x"
        )
    print(f"every eps@1e-4 <= target: {failures == 0} (largest eps - target: {worst_gap:+.2e})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
