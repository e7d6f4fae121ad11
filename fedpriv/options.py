"""The named choices of the learners' settings, one Enum per concept.

Each is a ``StrEnum``: run configs, TOML files and estimator parameters
spell them as plain strings, and ``Choice.parse(value)`` turns a string into
the member or raises naming the setting, the value and the allowed ones.
"""

from __future__ import annotations

from enum import StrEnum


class Choice(StrEnum):
    """A setting's allowed values; ``key`` is the setting's name in errors."""

    @classmethod
    def key(cls) -> str:
        return cls.__name__

    @classmethod
    def parse(cls, value: object):
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            allowed = [m.value for m in cls]
            raise ValueError(f"{cls.key()} must be one of {allowed}; got {value!r}") from None


class SplitFeatures(Choice):
    """How a random split picks its feature: each schema column equally likely
    (shared among its one-hot levels), or each encoded feature equally likely."""

    COLUMNS = "columns"
    UNIFORM = "uniform"

    @classmethod
    def key(cls) -> str:
        return "split_features"


class LeafMechanism(Choice):
    """How a forest releases its leaves: Gaussian class counts, or one label per
    leaf by the exponential mechanism (the Lumberjack paper's)."""

    GAUSSIAN = "gaussian"
    EXPONENTIAL = "exponential"

    @classmethod
    def key(cls) -> str:
        return "leaf_mechanism"


class ForestLeafMechanism(Choice):
    """How the fully random forest releases its leaves: the two of
    :class:`LeafMechanism`, or Laplace class counts (pure ε-DP; the RF-L
    opponent of Nock & Henecka 2020, whose RF-E is ``"exponential"``).

    Its own Enum, not a third :class:`LeafMechanism`: Lumberjack shares that
    one, releases anything but ``"exponential"`` as Gaussian counts, and has
    no Laplace leaves, so it must keep refusing ``"laplace"``.
    """

    GAUSSIAN = "gaussian"
    EXPONENTIAL = "exponential"
    LAPLACE = "laplace"

    @classmethod
    def key(cls) -> str:
        return "leaf_mechanism"


class ForestMode(Choice):
    """A random forest's trees see all the data (sequential composition) or
    disjoint secret shares of it (parallel composition)."""

    ALL = "all"
    DISJOINT = "disjoint"

    @classmethod
    def key(cls) -> str:
        return "mode"


class Backend(Choice):
    """How DP-SGD clients compute per-example gradients: compiled closed forms
    (``fast``) or torch + Opacus (``opacus``); both give the same sums."""

    FAST = "fast"
    OPACUS = "opacus"

    @classmethod
    def key(cls) -> str:
        return "backend"


class Recalibration(Choice):
    """What a DP-SGD run's two recalibration rounds fix: ``bias``, the output bias,
    shifted to the released class rates; ``linear``, the Brier-optimal affine map
    of the probabilities, which also shrinks the spread noise adds; ``auto``,
    ``linear`` when the steps leave much noise in the weights, else ``bias``
    (the noise walk of the server's recalibration rounds)."""

    AUTO = "auto"
    BIAS = "bias"
    LINEAR = "linear"

    @classmethod
    def key(cls) -> str:
        return "recalibration"


class Objective(Choice):
    """bdpe_α's split criterion: the M_α loss at the fixed ``alpha``, or objective
    calibration (the paper's O.C.: α per depth and per tree, K-monotonic)."""

    FIXED = "fixed"
    CALIBRATED = "calibrated"

    @classmethod
    def key(cls) -> str:
        return "objective"


class NoiseMode(Choice):
    """Where a run's Gaussian noise is added: by the server to the exact sum it
    unmasks (``central``), or by every client, as integer shares inside secure
    aggregation, so the server only ever sees a noisy sum (``distributed``;
    :mod:`fedpriv.privacy.distributed`)."""

    CENTRAL = "central"
    DISTRIBUTED = "distributed"

    @classmethod
    def key(cls) -> str:
        return "noise"
