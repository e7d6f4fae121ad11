"""Run settings: one federated run, as the launchers, the ServerApp and the ClientApp read it.

A run config is flat (``[tool.flwr.app.config]`` in ``pyproject.toml``, and
``--set key=value`` / ``--run-config``): the run's own keys
(:class:`RunSettings`) plus the chosen method's, which are the fields of its
configuration dataclass in the registry (:mod:`fedpriv.methods`). Keys are
kebab-case there, snake_case here. The value ``""`` means "the default": the
defaults live once, in these dataclasses, and ``pyproject.toml`` lists every
key with ``""`` so that Flower accepts it as an override. A user's own empty
``--set key=`` is not that default but an error (:func:`parse_overrides`).

Parsing is strict, before any process starts: an integer key refuses 2.7 and
``true``, a boolean refuses ``"false"``, a float refuses NaN (and ∞, except
ε = ∞, the non-private reference), a choice refuses anything outside its
Enum, a key of another method is refused, and the number of clients is
checked against the dataset's public client counts. Sizes are held to what fits in
memory and (ε, δ) to what the calibration certifies (:mod:`fedpriv.federation.limits`).
Each error is one line naming the key, the value and the allowed range.
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from enum import Enum
from numbers import Integral, Real
from typing import Any

import numpy as np

from fedpriv.federation.limits import (  # noqa: F401 (parse_override(s): re-exported)
    MIN_CLIENTS,
    SettingError,
    check_model_size,
    check_run_sizes,
    check_sizes,
    check_supported_budget,
    kebab,
    parse_override,
    parse_overrides,
    run_size_range,
)
from fedpriv.federation.status import DEFAULT_MAX_ABORTED_SHARE
from fedpriv.methods import Method, get_method, methods
from fedpriv.options import NoiseMode
from fedpriv.validation import check_count, check_delta, check_probability

#: Values of ``participation-accounting`` (:mod:`fedpriv.privacy.participation`;
#: "paper" is not a valid guarantee, comparison only).
PARTICIPATION_ACCOUNTINGS = ("valid", "tight", "paper")
#: The run-config spelling of "use the default".
UNSET = ""


def typed_value(key: str, annotation: Any, value: Any, *, allowed: str = "") -> Any:
    """``value`` checked against ``annotation`` without any lossy cast.

    ``int`` takes integers only (not 2.7, not ``True``); ``float`` takes finite
    reals (an integer is widened); ``bool`` takes booleans only; an Enum takes
    one of its values; ``str`` takes strings. ``allowed``: the key's range as
    ``--help`` states it (e.g. ``[1, 10000]``), named in a number's error.
    """
    in_ = f" in {allowed}" if allowed[:1] in ("[", "(") else ""
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        parse = getattr(annotation, "parse", None)
        try:
            return parse(value) if parse else annotation(value)
        except ValueError:
            allowed = [m.value for m in annotation]
            raise SettingError(f"{key} must be one of {allowed}; got {value!r}") from None
    boolean = isinstance(value, bool | np.bool_)
    if annotation is bool:
        if not boolean:
            raise SettingError(f"{key} must be true or false; got {value!r}")
        return bool(value)
    if annotation is int:
        if boolean or not isinstance(value, Integral):
            raise SettingError(f"{key} must be an integer{in_}; got {value!r}")
        return int(value)
    if annotation is float:
        if boolean or not isinstance(value, Real):
            raise SettingError(f"{key} must be a number{in_}; got {value!r}")
        x = float(value)
        if key == "epsilon" and not x > 0:
            raise SettingError(f"epsilon must lie in (0, inf] (inf = non-private); got {value!r}")
        if math.isnan(x) or (math.isinf(x) and key != "epsilon"):
            raise SettingError(f"{key} must be a finite number{in_}; got {value!r}")
        return x
    if annotation is str:
        if not isinstance(value, str):
            raise SettingError(f"{key} must be a string; got {value!r}")
        return value
    raise TypeError(f"{key}: unsupported setting type {annotation!r}")


def _hints(cls: type) -> dict[str, Any]:
    """Each field's type, ``X | None`` read as ``X`` (``None`` is spelled ``""``)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        tp = hints[f.name]
        if typing.get_origin(tp) in (typing.Union, types.UnionType):
            (tp,) = [a for a in typing.get_args(tp) if a is not type(None)]
        out[f.name] = tp
    return out


def config_from_values(method: Method, values: Mapping[str, Any], *, spell=kebab) -> Any:
    """``method``'s configuration from snake_case ``values`` (strictly typed; errors
    name each key as ``spell`` writes it: kebab-case for a run config)."""
    from fedpriv.federation.ranges import method_range

    hints = _hints(method.config_class)
    kwargs = {
        k: typed_value(spell(k), hints[k], v, allowed=method_range(method.name, kebab(k)))
        for k, v in values.items()
        if v != UNSET
    }
    check_sizes(method.name, kwargs, spell=spell)
    try:
        config = method.make_config(**kwargs)
    except (TypeError, ValueError) as exc:
        raise SettingError(str(exc)) from None
    check_model_size(method.name, config, spell=spell)
    return config


def method_defaults(method: Method) -> dict[str, Any]:
    """The method's settings and their defaults (the paper's), snake_case."""
    out = {}
    for f in fields(method.config_class):
        default = f.default if f.default is not MISSING else f.default_factory()  # type: ignore[misc]
        out[f.name] = default.value if isinstance(default, Enum) else default
    return out


def check_budget(epsilon: Any, delta: Any) -> None:
    """ε in (0, ∞] (∞: the non-private reference) and, for a private run, δ in (0, 1)."""
    eps = typed_value("epsilon", float, epsilon)
    if math.isfinite(eps):
        check_delta("delta", typed_value("delta", float, delta))
        if delta == 0:
            raise SettingError(f"delta must lie in (0, 1); got {delta!r}")


def check_run_values(values: Mapping[str, Any]) -> None:
    """Strict types and ranges of the run's own settings in ``values`` (snake_case)."""
    hints = _hints(RunSettings)
    for key, value in values.items():
        if value is not None:
            typed_value(key, hints[key], value)
    if "epsilon" in values:
        check_budget(values["epsilon"], values.get("delta"))
    check_run_sizes(values)  # num-clients, max-records, ping-rounds: what fits in memory
    for key in ("seed", "split_seed"):
        if key in values:
            check_count(key, values[key], minimum=0)
    dropouts = values.get("tolerated_dropouts")
    if dropouts is not None and dropouts < 0:
        # Checked whatever the noise mode: a value that only distributed noise reads
        # is still refused where it is wrong, not when the mode changes.
        raise SettingError(
            "tolerated-dropouts must be an integer in [0, num-clients − 2] (read by "
            f"distributed noise; unused under central noise); got {dropouts!r}"
        )
    if "participation" in values:
        check_probability("participation", values["participation"])
    if not 0.0 < (poll := values.get("poll_interval", 0.1)) <= 10.0:
        raise ValueError(f"poll_interval must lie in (0, 10] seconds; got {poll}")
    if "max_aborted_share" in values and not 0.0 <= values["max_aborted_share"] <= 1.0:
        raise ValueError(f"max_aborted_share must lie in [0, 1]; got {values['max_aborted_share']}")
    for key in ("round_timeout", "setup_timeout", "node_wait_timeout"):
        if key in values and not 0.0 < values[key] <= 86_400.0:
            raise ValueError(f"{key} must lie in (0, 86400] seconds; got {values[key]}")
    if not 0.0 <= values.get("secagg_threshold", 0.5) < 1.0:
        raise ValueError(f"secagg_threshold must lie in [0, 1); got {values['secagg_threshold']}")


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One federated run: the run's own settings plus the method's configuration.

    ``epsilon = inf`` is the non-private reference (no noise, no ledger).
    ``delta`` defaults to the method's paper δ. ``config`` is the method's
    configuration dataclass (default: its paper settings).
    """

    method: str = "boosting"
    dataset: str = "diabetes130"
    #: The public schema the nodes read their rows with: a bundled schema name (adult,
    #: heart, diabetes130, brfss) or a schema TOML path; "" = the ``dataset``'s.
    schema: str = ""
    #: Simulation on one CSV (split by the schema's client column, else IID): its path.
    csv: str = ""
    #: Declared public bound on records per client (never counted from the data): the
    #: codec's range and the public total n = num_clients × max_records. Unset: the
    #: bundled corpus's largest client (public); required for your own files.
    max_records: int | None = None
    #: A public file (same schema) the server may hold and scores the model on;
    #: "" = a bundled corpus's public test split, or no evaluation.
    eval_path: str = ""
    #: The DP federated evaluation's share of ε (0: none). After training, the nodes
    #: score their held-out rows and the run releases their score histograms once,
    #: through the same ledger (:mod:`fedpriv.server.dp_evaluation`); training then
    #: calibrates to the rest, (ε − eval-epsilon, δ − δ·eval-epsilon/ε).
    eval_epsilon: float = 0.0
    num_clients: int = 5
    epsilon: float = 2.0
    delta: float | None = None
    participation: float = 1.0
    seed: int = 0
    split_seed: int = 0
    out_dir: str = ""
    secure_aggregation: bool = True
    #: Where the Gaussian noise is added: "central" (the server, to the exact sum) or
    #: "distributed" (each client's integer share inside secure aggregation).
    noise: NoiseMode = NoiseMode.CENTRAL
    #: Distributed noise: clients of a round that may drop out with the sum still
    #: carrying the target noise (shares are sized for n − f survivors; fewer: abort).
    tolerated_dropouts: int = 1
    #: Shamir t = max(2, ⌊secagg_threshold·n⌋ + 1) of a round's n participants.
    secagg_threshold: float = 0.5
    #: Seconds the server waits for a round's replies (each of its two exchanges). A
    #: round of in-memory work takes ~0.3 s in simulation (the README job) and a few
    #: seconds in a deployment (a ClientApp process per message); a node that died
    #: stalls its rounds for this long, until Flower declares it offline.
    round_timeout: float = 30.0
    #: Seconds the server waits for the key exchange, where each node first loads its
    #: rows and compiles its kernels (one-off work, far slower than a round).
    setup_timeout: float = 300.0
    node_wait_timeout: float = 300.0
    #: Largest share of the rounds that may release nothing before the run counts as
    #: failed (:mod:`fedpriv.federation.status`; in [0, 1]).
    max_aborted_share: float = DEFAULT_MAX_ABORTED_SHARE
    #: Empty rounds timed before training (a same-run baseline).
    ping_rounds: int = 0
    #: Seconds between the server's pulls for replies.
    poll_interval: float = 0.1
    #: Write per-round wall times (communication.json) and the run time (log). They
    #: track the clients' work on their rows, a release no mechanism accounts for,
    #: so the privacy report then says ``certified: false``. For benchmarks only.
    timings: bool = False
    config: Any = field(default=None)

    def __post_init__(self) -> None:
        m = get_method(self.method)
        if self.config is None:
            object.__setattr__(self, "config", m.make_config())
        elif not isinstance(self.config, m.config_class):
            raise SettingError(
                f"config must be a {m.config_class.__name__} for method {self.method!r}; "
                f"got {type(self.config).__name__}"
            )
        if self.delta is None:
            object.__setattr__(self, "delta", m.delta)
        try:
            self._check()
        except (TypeError, ValueError) as exc:
            raise SettingError(str(exc)) from None

    def _check(self) -> None:
        from fedpriv.data.corpora import check_client_count

        check_run_values(
            {f.name: getattr(self, f.name) for f in fields(self) if f.name != "config"}
        )
        check_supported_budget(self.epsilon, self.delta)
        if self.eval_epsilon and not (self.private and 0.0 < self.eval_epsilon < self.epsilon):
            raise SettingError(
                f"eval-epsilon must lie in [0, epsilon) = [0, {self.epsilon:g}) and needs a "
                f"private run (finite epsilon); got {self.eval_epsilon!r}"
            )
        if self.eval_epsilon and not self.csv and self.schema in (UNSET, self.dataset):
            from fedpriv.data.corpora import DERIVED  # the bundled multiclass corpora

            if self.dataset in DERIVED and DERIVED[self.dataset][1].multiclass:
                raise SettingError(
                    f"eval-epsilon: the DP federated evaluation scores two classes; dataset "
                    f"{self.dataset!r} has more (set eval-epsilon = 0); got {self.eval_epsilon!r}"
                )
        if self.noise is NoiseMode.DISTRIBUTED:
            self.distributed_noise  # noqa: B018 — validates tolerated-dropouts against K
            why = None
            if not self.private:
                why = "a private run (finite epsilon)"
            elif not self.secure_aggregation:
                why = "secure-aggregation = true"
            elif self.eval_epsilon:
                why = "eval-epsilon = 0"
            elif not self.method_record.distributed_noise:
                ok = sorted(m.name for m in methods() if m.distributed_noise)
                why = f"one of the methods {ok}"
            elif (leaf := getattr(self.config, "leaf_mechanism", "gaussian")) != "gaussian":
                # Clients' integer shares sum to Gaussian noise: counts, not a label drawn
                # by the exponential mechanism (nor Laplace counts).
                why = f"leaf-mechanism = 'gaussian' (noisy counts), not {str(leaf)!r}"
            if why:
                raise SettingError(f"noise = 'distributed' needs {why}; got method "
                                   f"{self.method!r}, epsilon {self.epsilon:g}")  # fmt: skip
        if self.csv and self.max_records is None:
            raise SettingError(
                f"max-records must be declared (an integer in {run_size_range('max_records')}: "
                "the public bound on "
                f"records per client) for a run on csv {self.csv!r}; got unset"
            )
        if not self.csv and self.schema in (UNSET, self.dataset):
            # The bundled corpus's public client counts; a user's files set their own K.
            check_client_count(self.dataset, self.num_clients)

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    @property
    def distributed_noise(self):
        """The :class:`~fedpriv.privacy.distributed.DistributedNoise` setting, or ``None``."""
        if self.noise is not NoiseMode.DISTRIBUTED:
            return None
        from fedpriv.privacy.distributed import DistributedNoise

        try:
            return DistributedNoise(dropouts=self.tolerated_dropouts, max_parties=self.num_clients)
        except ValueError as exc:
            raise SettingError(str(exc)) from None

    @property
    def method_record(self) -> Method:
        return get_method(self.method)

    @property
    def rounds(self) -> int:
        """Federated rounds the method's strategy asks for (derived, never set twice)."""
        return self.config.rounds

    @classmethod
    def run_keys(cls) -> tuple[str, ...]:
        """The run's own keys (snake_case), without the method's."""
        return tuple(f.name for f in fields(cls) if f.name != "config")

    @classmethod
    def all_keys(cls) -> tuple[str, ...]:
        """Every run-config key (snake_case): the run's, then each method's."""
        keys = list(cls.run_keys())
        for m in methods():
            keys += [k for k in m.config_fields if k not in keys]
        return tuple(keys)

    @classmethod
    def from_run_config(cls, config: Mapping[str, Any]) -> RunSettings:
        """Parse a run config (kebab-case keys; ``""`` = default) strictly."""
        values = {k.replace("-", "_"): v for k, v in config.items()}
        known = set(cls.all_keys())
        for key in values:
            if key not in known:
                raise SettingError(
                    f"unknown run-config key {kebab(key)!r}; known: {sorted(map(kebab, known))}"
                )
        from fedpriv.federation.ranges import run_range

        method = values.get("method", UNSET)
        if method == UNSET:
            method = cls.method
        try:
            m = get_method(typed_value("method", str, method))
        except ValueError as exc:
            raise SettingError(str(exc)) from None
        mine = set(m.config_fields)
        hints = _hints(cls)
        run = {}
        for key in cls.run_keys():
            value = values.get(key, UNSET)
            if value == UNSET and key != "method":
                continue
            if key == "method":
                run[key] = m.name
                continue
            run[key] = typed_value(kebab(key), hints[key], value, allowed=run_range(kebab(key)))
        other = sorted(
            k for k, v in values.items() if v != UNSET and k not in run and k not in mine
        )
        if other:
            raise SettingError(
                f"run-config key {kebab(other[0])!r} does not apply to method {m.name!r}; "
                f"{m.name} takes: {sorted(map(kebab, mine))}"
            )
        mvals = {k: values[k] for k in mine if k in values}
        return cls(**run, config=config_from_values(m, mvals))

    def to_run_config(self) -> dict[str, Any]:
        """The resolved run config, every default filled in (kebab-case keys)."""
        out: dict[str, Any] = {}
        for name in self.run_keys():
            value = getattr(self, name)
            out[kebab(name)] = UNSET if value is None else value  # "" = unset, as Flower takes it
        for f in fields(self.config):
            v = getattr(self.config, f.name)
            out[kebab(f.name)] = v.value if isinstance(v, Enum) else v
        return out
