"""What a run may ask for: sizes that fit in memory, a budget the calibration certifies.

The bounds a run's settings are held to beyond their types, declared here with
the reasoning behind each number and checked by
:mod:`fedpriv.federation.settings` before anything is allocated or started:
:data:`SIZE_LIMITS` (each size setting of a built-in method),
:data:`MAX_MODEL_ENTRIES` (a product of them, e.g. rounds × 2^depth), the run's
own sizes (:data:`RUN_SIZE_LIMITS`: clients, declared records per client, ping
rounds), and the supported (ε, δ) of a run (:data:`EPSILON_MAX`, :data:`DELTA_MIN`,
:data:`DELTA_MAX`). :mod:`fedpriv.federation.ranges` states them for ``--help``.
And a user's ``--set key=`` with an empty value (:func:`parse_overrides`): the
pyproject's ``""`` means "the default", a user's is an unset shell variable.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from numbers import Integral
from typing import Any

from fedpriv.privacy.calibration_range import TAIL_MASS_TRUNCATION


class SettingError(ValueError):
    """A run-config or estimator value outside its allowed range (one line)."""


def kebab(name: str) -> str:
    return name.replace("_", "-")


#: Largest finite ε of a run (ε = inf is the non-private reference). A PLD
#: calibration cannot certify an ε above its plan's floor, where the noise is so
#: small that its PLD passes ``MAX_PLD_POINTS`` (:mod:`fedpriv.privacy.calibration_range`).
#: The floor is lowest for a few unsampled steps (q = 1, T = 3–4) and falls as δ
#: grows; measured: 35.5 at δ = 1e-5, 25.2 at δ = 1e-2 (T = 4), 19.6 at δ = 0.1.
#: With δ ≤ :data:`DELTA_MAX`, every ε ≤ 20 calibrates (a test calibrates that
#: worst plan at the limit). Beyond it a guarantee says little anyway: e^20 ≈ 5e8.
EPSILON_MAX = 20.0
#: Smallest δ is excluded: a composed PLD puts up to this much mass at infinite loss
#: per composition, so no noise certifies δ at or below it.
DELTA_MIN = TAIL_MASS_TRUNCATION
#: Largest δ of a private run: δ is the chance the ε bound fails outright, and it
#: must stay far below 1/n; above 1e-2 the ε floor falls under :data:`EPSILON_MAX`.
DELTA_MAX = 1e-2

#: Entries (tree leaves or nodes, pair-term cells) a model, or one round's released
#: vector, may hold: 2^23 ≈ 8.4 M. An entry costs at most ~64 bytes across the arrays
#: holding it (split feature int64, threshold float64, C leaf values), so a model
#: stays near 0.5 GiB at most; secure aggregation holds a few copies of a round's
#: vector (masks, shares). Checked from the settings, before anything is allocated.
MAX_MODEL_ENTRIES = 2**23
#: The random forest's deepest automatic depth (``fedpriv.strategies.random_forest.MAX_AUTO_DEPTH``,
#: which fedpriv cannot import; a test checks they agree).
FOREST_MAX_AUTO_DEPTH = 10

#: Upper bound of each built-in method's size settings (snake_case), and why: each
#: would otherwise allocate in proportion to its value before any round runs (a
#: boosting run of 1e9 rounds asked for 231 GiB of tree arrays). Each size field's
#: declared constraint (:mod:`fedpriv.federation.constraints`, ``most``) refers to its
#: entry here; :func:`check_sizes` and ``--help`` read it there.
SIZE_LIMITS: dict[str, dict[str, tuple[int, str]]] = {
    # One tree of 2^depth leaves kept per round: 10,000 trees of the default depth 5
    # are 330 k leaves (the paper uses 50–75); deeper trees meet MAX_MODEL_ENTRIES.
    "boosting": {"rounds": (10_000, "one tree is kept per round")},
    # A DP-SGD step keeps nothing per round but the ledger's small event (~1 KB):
    # 100,000 steps (125 × the paper's 800) stay near 100 MB.
    "logistic": {"rounds": (100_000, "the ledger keeps an event per step")},
    # The MLP's width: NetworkSpec's own bound (per-example gradients of a
    # (d + 2)·h-parameter model for every sampled row).
    "mlp": {"hidden": (4_096, "the model and its per-example gradients grow with it")},
    # A stage grows at most trees × max-frontier × 2^stage-height nodes (released
    # counts for each): 512 trees or a frontier of 2,048 at the other defaults.
    "lumberjack": {
        "trees": (512, "each tree's nodes are kept and counted"),
        "max_frontier": (2_048, "each frontier node's subtree is counted every stage"),
    },
    # trees × 2^depth leaves (depth 0: automatic, at most 2^10): 4,096 trees at auto.
    "random_forest": {"trees": (4_096, "each tree's leaves are counted in one vector")},
    # A round visits one column; the pair stage holds C(candidates, 2) ×
    # interaction-bins² cells: 64 candidates are 2,016 pairs.
    "dp_gam": {
        "rounds": (10_000, "the ledger keeps an event per round"),
        "interaction_candidates": (64, "each pair of candidates holds a grid of cells"),
    },
}


#: Fewest clients of a run: secure aggregation needs two parties (a "sum" of one
#: client's vector is that vector): the engine's ``MIN_PARTIES`` (a test checks they agree).
MIN_CLIENTS = 2
#: Most clients of a run. Secure aggregation keeps, per round, a mask seed for every
#: pair of clients and every client's Shamir shares of every other's seeds: K² of each
#: (K = 1,000: a million shares, ~0.1 GB, and K² key agreements a round); a bundled
#: corpus split IID among a billion clients asked for 30 GiB before round 1.
MAX_CLIENTS = 1_000
#: Largest declared bound on records per client (``max-records``). The secure sum adds
#: K vectors of at most max-records × a query's per-record bound each, at the fixed-point
#: scale 2^32, in a signed 64-bit integer: max-records × K × bound < 2^31 (the codec,
#: :func:`fedpriv.federation.planning.codec_for`, checks the product). With K ≥ 2 and a
#: record adding 1 to a count, no run holds 2^30 (≈ 1.07e9): a billion is the most.
MAX_RECORDS = 10**9
#: Most timed empty rounds before training (``ping-rounds``, a benchmark's baseline):
#: each is a round trip through every node, kept in the timings.
MAX_PING_ROUNDS = 1_000

#: The run's own size settings (snake_case): (smallest, largest, why the largest).
RUN_SIZE_LIMITS: dict[str, tuple[int, int, str]] = {
    "num_clients": (
        MIN_CLIENTS, MAX_CLIENTS, "secure aggregation needs two parties and keeps K² key "
        "shares a round",
    ),
    "max_records": (
        1, MAX_RECORDS, "the secure sum of K × max-records × a record's bound must fit "
        "64 bits at scale 2^32",
    ),
    "ping_rounds": (0, MAX_PING_ROUNDS, "each is a round trip through every node"),
}  # fmt: skip


def run_size_range(key: str) -> str:
    """A run size setting's declared range, e.g. ``[2, 1000]`` (``key`` snake_case)."""
    lo, hi, _ = RUN_SIZE_LIMITS[key]
    return f"[{lo}, {hi}]"


def check_run_sizes(values: Mapping[str, Any]) -> None:
    """Refuse a run size setting (snake_case keys, as the message names them) outside
    :data:`RUN_SIZE_LIMITS`."""
    for key, (lo, hi, why) in RUN_SIZE_LIMITS.items():
        value = values.get(key)
        if value is None:
            continue
        if not isinstance(value, Integral) or isinstance(value, bool) or not lo <= value <= hi:
            raise SettingError(
                f"{key} must be an integer in {run_size_range(key)}; got {value!r} ({why})"
            )


def check_sizes(method: str, values: Mapping[str, Any], *, spell=kebab) -> None:
    """Refuse a size setting above its declared memory bound (the field's constraint's
    ``most``, from :data:`SIZE_LIMITS`), before any allocation."""
    from fedpriv.federation.constraints import constraints
    from fedpriv.methods import get_method

    for key, c in constraints(get_method(method).config_class).items():
        if getattr(c, "most", None) is None:
            continue
        most, why = c.most
        value = values.get(key)
        if isinstance(value, Integral) and not isinstance(value, bool) and value > most:
            raise SettingError(
                f"{spell(key)} must be an integer in {c.text(run=True)}; got {value!r} ({why}: a "
                f"larger value does not fit in memory)"
            )


def model_entries(method: str, config: Any) -> tuple[int, str] | None:
    """Entries the largest of ``method``'s arrays holds under ``config``, and what they
    are in the settings' terms (``None``: no product of settings to bound)."""
    if method == "boosting":
        return config.rounds * 2**config.depth, "rounds × 2^depth tree leaves"
    if method == "random_forest":
        depth = config.depth or FOREST_MAX_AUTO_DEPTH
        return config.trees * 2**depth, "trees × 2^depth leaves (depth 0: up to 2^10)"
    if method == "lumberjack":
        from fedpriv.models.lumberjack_sizes import PAPER_TREES

        # trees = 0 (automatic) is at most the paper's 30.
        n = (config.trees or PAPER_TREES) * config.max_frontier * 2**config.stage_height
        return n, "trees × max-frontier × 2^stage-height nodes per stage"
    if method == "dp_gam" and config.interactions:
        c = config.interaction_candidates
        return c * (c - 1) // 2 * config.interaction_bins**2, (
            "C(interaction-candidates, 2) × interaction-bins² pair cells"
        )
    return None


def check_model_size(method: str, config: Any, *, spell=kebab) -> None:
    """Refuse settings whose product (e.g. rounds × 2^depth) passes :data:`MAX_MODEL_ENTRIES`."""
    found = model_entries(method, config)
    if found is not None and found[0] > MAX_MODEL_ENTRIES:
        n, what = found
        raise SettingError(
            f"{what} must be at most {MAX_MODEL_ENTRIES:,} (2^23, what fits in memory); got "
            f"{n:,}: lower one of them"
        )


def check_supported_budget(epsilon: float, delta: float | None) -> None:
    """ε and δ inside what a run's calibration can certify: ε in (0, :data:`EPSILON_MAX`]
    or inf, and for a private run δ in (:data:`DELTA_MIN`, :data:`DELTA_MAX`].

    A run's own boundary (:class:`RunSettings`): an estimator used as a library
    keeps the wider mathematical ranges (a forest certifies ε = 1e6 through RDP).
    """
    if math.isinf(epsilon):
        return
    if not 0.0 < epsilon <= EPSILON_MAX:
        raise SettingError(
            f"epsilon must lie in (0, {EPSILON_MAX:g}] or inf (inf: the non-private reference); "
            f"got {epsilon!r}: a larger ε cannot be calibrated (the noise's PLD would pass "
            "its size bound) and protects nothing"
        )
    if delta is not None and not DELTA_MIN < delta <= DELTA_MAX:
        raise SettingError(
            f"delta must lie in ({DELTA_MIN:g}, {DELTA_MAX:g}]; got {delta!r}: a PLD puts up to "
            f"{DELTA_MIN:g} of its mass at infinite loss per composition (no smaller δ can be "
            f"certified), and δ above {DELTA_MAX:g} is no guarantee"
        )


def parse_override(item: str) -> tuple[str, Any]:
    """One ``--set key=value``: the value as TOML (``2``, ``1e-5``, ``true``, ``"x"``), else
    the bare text; an empty value is refused.

    ``""`` means "the default" in ``pyproject.toml``'s run config, where every key
    is listed; a user's ``--set epsilon=`` is an unset shell variable (or a typo),
    not a request for the default (leave the key out for that).

    Raises
    ------
    SettingError
        ``--set expects key=value``; ``--set epsilon= has an empty value ...``.
    """
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise SettingError(f"--set expects key=value; got {item!r}")
    try:
        value: Any = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw  # a bare string
    if isinstance(value, str) and not value.strip():
        raise SettingError(
            f"--set {key}= has an empty value (an unset shell variable?); give a value, or "
            f"leave {key} out for its default"
        )
    return key, value


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--set`` items as a run-config mapping (:func:`parse_override` each; a key given
    twice keeps its last value)."""
    return dict(parse_override(item) for item in items)
