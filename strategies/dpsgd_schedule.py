"""DP-SGD's automatic schedule: q, T and the learning rate from the public record bound n.

The paper's selected settings (Table 5: q = 0.02, T = 800, learning rate 2.0,
the MLP's 3.0) were tuned on tables of tens of thousands of records. There a
step averages q·n ≈ 500–3,000 clipped gradients; on a table of a thousand
records it averages about 12, the noise N(0, (zC)²) swamps their sum and the
model is mostly noise (Heart, n = 640 at ε = 0.5: the MLP's Brier score 0.22,
0.24 and 0.39 in three fits against the base rate's 0.25).

Why a batch floor. At a fixed budget a larger expected batch improves a
step's signal-to-noise ratio. T Poisson(q)-subsampled Gaussian steps of
multiplier z are close to μ-GDP with μ ≈ q·√(T (e^{1/z²} − 1)) (the central
limit theorem of Dong, Roth & Su 2022, "Gaussian differential privacy"; Bu,
Dong, Long & Su 2020, "Deep learning with Gaussian differential privacy"), so for
z ≳ 1 the noise std of the averaged gradient, zC/(q·n) ≈ √T·C/(μ·n), does not
grow with q, while the sampling noise and the clipping bias of the average
shrink with the batch; at small z amplification by subsampling weakens and a
small batch costs more noise than it saves (Räisä, Jälkö & Honkela 2024,
"Subsampling is not magic: why large batch sizes work for differentially
private stochastic optimisation"). Large batches are among the most effective
changes to DP-SGD at fixed ε (De, Berrada, Hayes, Smith & Balle 2022,
"Unlocking high-accuracy differentially private image classification through
scale"; Ponomareva et al. 2023, "How to DP-fy ML", whose advice is to use as
large a batch as the compute allows).

The rule. The expected batch q·n is at least :data:`MIN_BATCH` records, the run
keeps the paper's :data:`EPOCHS` = q·T = 16 passes over the data, and the
learning rate η keeps each step's parameter noise η·zC/(q·n) at its value
under the paper's settings:

    q = max(0.02, min(1, MIN_BATCH / n)),   T = round(EPOCHS / q),   η = η₀·√(0.02 / q)

(T = 800, η = η₀ exactly where q = 0.02). In the GDP regime z ≈ q√T/μ = √(q·16)/μ,
so zC/(q·n) grows as √q at a fixed batch and η ∝ 1/√q holds η·zC/(q·n) where
the paper's settings put it, while T ∝ n shortens the run: the noise a weight
gathers over the steps (√T·η·zC/(q·n), :func:`~fedpriv.strategies.dpsgd_recalibration.noise_walk`)
falls as √n. Calibrated (one stage, δ = 1e-5), η·zC/(q·n) of the logistic
model at n = 26,050 / 6,900 / 2,970 / 640:

* ε = 0.5: 0.047 / 0.049 / 0.048 / 0.047 (noise walk 1.33 / 0.72 / 0.47 / 0.21);
* ε = 2:   0.016 / 0.015 / 0.014 / 0.013;
* ε = 8:   0.008 / 0.006 / 0.005 / 0.004 (z ≈ 1–2, where the GDP form no longer
  holds: the rule's steps are less noisy than the paper's).

Measured (``fedpriv.experiments.heldout``: held-out 20 %, 3 fits each with fresh keys,
ε = 0.5 / 2 / 8), mean Brier score before → after, the base rate's in brackets:
Heart (n = 640) logistic regression 0.258 / 0.230 / 0.199 → 0.184 / 0.210 /
0.183 (0.250), the MLP 0.284 / 0.229 / 0.211 → 0.197 / 0.194 / 0.197;
Framingham (n ≈ 2,960–7,300, a released count's bound) logistic regression
0.169 / 0.129 / 0.124 → 0.124 / 0.118 / 0.117 (0.129), the MLP 0.131 / 0.128 /
0.125 → 0.137 / 0.123 / 0.120, whose ε = 0.5 fits stay above the base rate in
two of three (AUC 0.54 → 0.64). There the released count's bound is 2.5 times
the 2,714 rows, so a step averages about 200 records, and the MLP's noise walk
(≈ 1.1) takes the ``linear`` recalibration, whose small share leaves its slope
noisy; with η = 0.3 (walk 0.21, the ``bias`` shift) three fits of three were
below the base rate (0.120–0.125, AUC 0.70). With the paper's η at the rule's
q and T, Heart's fits were better at ε = 8 (logistic regression 0.139) and
worse at ε = 0.5 (0.206; the MLP 0.240, one fit a constant), the MLP's on
Framingham at ε = 0.5 0.136. Adult (n = 26,050) fits the same models bit for
bit as before.

n is the strategy's public record bound (K × the declared max-records, or the
upper bound of a released count; :class:`~fedpriv.methods.StrategyContext`),
never the exact private count. Every bundled corpus of tens of thousands of
records has MIN_BATCH / n ≤ 0.02 and runs at the paper's q = 0.02, T = 800 and
η₀ (Adult: n = 26,050 as K × max-records at K = 5; BRFSS 38,400; Diabetes
130-US 146,290). An explicit ``rounds``, ``sampling_rate`` or ``learning_rate``
is kept; only an automatic one (:data:`AUTO`, the default) follows the rule,
T and η from whichever q the run uses.
"""

from __future__ import annotations

import math

#: ``rounds``, ``sampling_rate`` or ``learning_rate`` = 0: automatic (module docstring).
AUTO = 0
#: The paper's selected sampling rate and number of steps (Table 5).
PAPER_RATE, PAPER_ROUNDS = 0.02, 800
#: Passes over the data the paper's settings make: q·T = 0.02 × 800.
EPOCHS = 16
#: The expected batch q·n the rule keeps at least (records per step).
MIN_BATCH = 500


def auto_sampling_rate(n_records: int) -> float:
    """q = max(0.02, min(1, :data:`MIN_BATCH` / n)): the paper's rate, or the rate whose
    expected batch over the public bound ``n_records`` holds MIN_BATCH records."""
    if n_records * PAPER_RATE >= MIN_BATCH:
        return PAPER_RATE
    return min(1.0, MIN_BATCH / n_records)


def auto_rounds(sampling_rate: float, *, least: int = 1) -> int:
    """T = round(:data:`EPOCHS` / q), at least ``least`` (the rounds a plan's centring
    and recalibration take, and a step); 800 at the paper's q = 0.02."""
    if sampling_rate == PAPER_RATE:
        return PAPER_ROUNDS
    return max(least, round(EPOCHS / sampling_rate))


def auto_learning_rate(paper_rate: float, sampling_rate: float) -> float:
    """η = η₀·√(0.02 / q): the paper's η₀ at q = 0.02; a step's parameter noise held
    at the paper's at a larger q (module docstring)."""
    if sampling_rate == PAPER_RATE:
        return paper_rate
    return paper_rate * math.sqrt(PAPER_RATE / sampling_rate)


def schedule(
    n_records: int,
    *,
    rounds: int = AUTO,
    sampling_rate: float = AUTO,
    learning_rate: float = AUTO,
    paper_learning_rate: float,
    least: int = 1,
) -> tuple[int, float, float]:
    """(T, q, η) of a run on ``n_records`` public records: each explicit value kept,
    each automatic one (:data:`AUTO`) from the rule (module docstring)."""
    if not (isinstance(n_records, int) and n_records >= 1):
        raise ValueError(f"n_records must be an integer ≥ 1; got {n_records!r}")
    q = auto_sampling_rate(n_records) if sampling_rate == AUTO else float(sampling_rate)
    t = auto_rounds(q, least=least) if rounds == AUTO else int(rounds)
    lr = (
        auto_learning_rate(paper_learning_rate, q)
        if learning_rate == AUTO
        else float(learning_rate)
    )
    return t, q, lr
