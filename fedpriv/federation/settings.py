"""Run settings: one federated run, as the launchers, the ServerApp and the ClientApp read it.

A run config is flat (``[tool.flwr.app.config]`` of the Flower App the
launchers generate, and ``--set key=value`` / ``--run-config``): the run's own keys
(:class:`RunSettings`) plus the chosen method's, which are the fields of its
configuration dataclass in the registry (:mod:`fedpriv.methods`). Keys are
kebab-case there, snake_case here. The value ``""`` means "the default": the
defaults live once, in these dataclasses, and the generated App lists every
key with ``""`` (:meth:`RunSettings.all_keys`) so that Flower accepts it as an
override. A user's own empty
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

import dataclasses
import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from fedpriv.federation.constraints import Interval, Text, setting
from fedpriv.federation.limits import (  # noqa: F401 (parse_override(s): re-exported)
    DELTA_MAX,
    DELTA_MIN,
    EPSILON_MAX,
    MIN_CLIENTS,
    RUN_SIZE_LIMITS,
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
from fedpriv.federation.secagg_common import MAX_SEED_BATCH, RUN_SEED_BATCH
from fedpriv.federation.setting_values import (  # noqa: F401 (re-exported)
    UNSET,
    _hints,
    check_budget,
    check_values,
    config_from_values,
    method_defaults,
    respell,
    typed_value,
)
from fedpriv.federation.status import DEFAULT_MAX_ABORTED_SHARE
from fedpriv.methods import Method, get_method, methods
from fedpriv.options import NoiseMode

#: Values of ``participation-accounting`` (:mod:`fedpriv.privacy.participation`;
#: "paper" is not a valid guarantee, comparison only).
PARTICIPATION_ACCOUNTINGS = ("valid", "tight", "paper")


#: A run's waits, in seconds.
_SECONDS = Interval(0, 86_400, closed="right", unit="seconds")


def _sized(key: str, note: str = "") -> Interval:
    """A run size setting's range (:data:`fedpriv.federation.limits.RUN_SIZE_LIMITS`)."""
    lo, hi, _ = RUN_SIZE_LIMITS[key]
    return Interval(lo, hi, kind=int, note=note)


def check_run_values(values: Mapping[str, Any]) -> None:
    """Strict types and ranges of the run's own settings in ``values`` (snake_case)."""
    check_values(RunSettings, values)


#: SecAgg+'s fractions of the run's K clients (γ colluding, δ dropping out).
_FRACTION = Interval(0, 1, closed="left", note="sizes SecAgg+'s graph")
#: SecAgg+'s failure exponents: 2^-σ security, 2^-η correctness.
_EXPONENT = Interval(0, 1000, closed="neither", note="sizes SecAgg+'s graph")


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """One federated run: the run's own settings plus the method's configuration.

    ``epsilon = inf`` is the non-private reference (no noise, no ledger).
    ``delta`` defaults to the method's paper δ. ``config`` is the method's
    configuration dataclass (default: its paper settings).
    """

    #: The one default method of every entry point (a preset may name another:
    #: :mod:`fedpriv.federation.presets`).
    method: str = "boosting"
    dataset: str = "diabetes130"
    #: The public schema the nodes read their rows with: a bundled schema name (adult,
    #: heart, diabetes130, brfss) or a schema TOML path; "" = the ``dataset``'s.
    schema: str = setting("", Text("a bundled schema name or a schema TOML path"))
    #: SHA-256 (hex) of the schema file's bytes. A node holding its own copy of the
    #: public schema (node-config ``schema-path``) reads its rows with its copy and
    #: refuses a run whose digest differs (``fedpriv coordinator submit`` sets it).
    schema_sha256: str = setting("", Text("64 hex digits"))
    #: Simulation on one CSV (split by the schema's client column, else IID): its path.
    csv: str = setting("", Text("a CSV path"))
    #: Declared public bound on records per client (never counted from the data): the
    #: codec's range and the public total n = num_clients × max_records. Unset: the
    #: bundled corpus's largest client (public); on your own files a Flower run needs
    #: it declared (the launchers refuse it unset, and so do the nodes), an in-process
    #: fit releases a record count instead (:mod:`fedpriv.server.resolve`).
    max_records: int | None = setting(
        None, _sized("max_records", "and max-records × num-clients × a record's bound < 2^31")
    )
    #: A public file (same schema) the server may hold and scores the model on;
    #: "" = a bundled corpus's public test split, or no evaluation.
    eval_path: str = setting("", Text("a CSV path"))
    #: The DP federated evaluation's share of ε (0: none). After training, the nodes
    #: score their held-out rows and the run releases their score histograms once,
    #: through the same ledger (:mod:`fedpriv.server.dp_evaluation`); training then
    #: calibrates to the rest, (ε − eval-epsilon, δ − δ·eval-epsilon/ε).
    eval_epsilon: float = setting(
        0.0,
        Interval(
            0, None, closed="left", shown="[0, epsilon)", zero="0: none", note="a private run"
        ),
    )
    num_clients: int = setting(5, _sized("num_clients"))
    epsilon: float = setting(
        2.0,
        Interval(0, EPSILON_MAX, closed="right", inf=True, note="inf: the non-private reference"),
    )
    delta: float | None = setting(
        None, Interval(DELTA_MIN, DELTA_MAX, closed="right", note="a private run")
    )
    participation: float = setting(1.0, Interval(0, 1, closed="right"))
    seed: int = setting(0, Interval(0, None, kind=int))
    split_seed: int = setting(0, Interval(0, None, kind=int))
    out_dir: str = setting("", Text("a directory"))
    secure_aggregation: bool = True
    #: Where the Gaussian noise is added: "central" (the server, to the exact sum) or
    #: "distributed" (each client's integer share inside secure aggregation).
    noise: NoiseMode = NoiseMode.CENTRAL
    #: Distributed noise: clients of a round that may drop out with the sum still
    #: carrying the target noise (shares are sized for n − f survivors; fewer: abort).
    tolerated_dropouts: int = setting(
        1,
        Interval(
            0,
            None,
            kind=int,
            shown="[0, num-clients − 2]",
            note="read by distributed noise; unused under central noise",
        ),
    )
    #: Shamir t = max(2, ⌊secagg_threshold·n⌋ + 1) of a round's n participants (of a
    #: neighbourhood's k under SecAgg+'s graph: fedpriv.federation.secagg_topology).
    secagg_threshold: float = setting(0.5, Interval(0, 1, closed="left"))
    #: SecAgg+ (participation 1): the sparse graph's degree k and threshold t are the
    #: smallest meeting security failure ≤ 2^-sigma and correctness failure ≤ 2^-eta
    #: for ⌊collusion·K⌋ clients colluding with the server and ⌊dropout·K⌋ dropping out.
    secagg_collusion: float = setting(0.1, _FRACTION)
    secagg_dropout: float = setting(0.1, _FRACTION)
    secagg_sigma: float = setting(40.0, _EXPONENT)
    secagg_eta: float = setting(20.0, _EXPONENT)
    #: Rounds whose self-mask seeds a client shares at once, one sealed message per
    #: holder (fedpriv.federation.secagg_seeds); 1 below participation 1.
    secagg_seed_batch: int = setting(RUN_SEED_BATCH, Interval(1, MAX_SEED_BATCH, kind=int))
    #: Seconds the server waits for a round's replies (each of its two exchanges). A
    #: round of in-memory work takes ~0.3 s in simulation (the README job) and a few
    #: seconds in a deployment (a ClientApp process per message); a node that died
    #: stalls its rounds for this long, until Flower declares it offline.
    round_timeout: float = setting(30.0, _SECONDS)
    #: Seconds the server waits for the key exchange, where each node first loads its
    #: rows and compiles its kernels (one-off work, far slower than a round).
    setup_timeout: float = setting(300.0, _SECONDS)
    node_wait_timeout: float = setting(300.0, _SECONDS)
    #: Largest share of the rounds that may release nothing before the run counts as
    #: failed (:mod:`fedpriv.federation.status`; in [0, 1]).
    max_aborted_share: float = setting(DEFAULT_MAX_ABORTED_SHARE, Interval(0, 1))
    #: Empty rounds timed before training (a same-run baseline).
    ping_rounds: int = setting(0, _sized("ping_rounds"))
    #: Seconds between the server's pulls for replies.
    poll_interval: float = setting(0.1, Interval(0, 10, closed="right", unit="seconds"))
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

        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "config"}
        # A run's (ε, δ) range first: the one its calibration certifies, narrower than the
        # mathematical one an estimator keeps (check_budget), so a run names one range.
        check_supported_budget(
            typed_value("epsilon", float, self.epsilon), typed_value("delta", float, self.delta)
        )
        check_run_values(values)
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
        """Federated rounds the method's strategy asks for (derived, never set twice).

        A method whose rounds follow the public record bound (DP-SGD's automatic
        schedule, ``rounds = 0``) has them once :meth:`for_records` resolved them;
        before, asking is an error rather than a 0 that would reach Flower."""
        if getattr(self.config, "automatic", False) and self.config.rounds == 0:
            raise SettingError(
                f"rounds of method {self.method!r} is automatic (0): it follows the public "
                "record bound n = num-clients × max-records (RunSettings.for_records)"
            )
        return self.config.rounds

    def for_records(self, n_records: int) -> RunSettings:
        """These settings with the method's automatic settings resolved from the public
        record bound ``n_records`` and training's budget
        (:meth:`fedpriv.methods.Method.resolve_config`: DP-SGD's schedule, Lumberjack's
        sizes), as its strategy resolves them; explicit values and other methods unchanged."""
        eps, dlt = self.training_budget
        config = self.method_record.resolve_config(
            self.config, epsilon=eps, delta=dlt, n_records=n_records
        )
        return self if config is self.config else dataclasses.replace(self, config=config)

    @property
    def training_budget(self) -> tuple[float | None, float | None]:
        """Training's (ε, δ): the run's, less the DP evaluation's share (``eval-epsilon``,
        with δ split in proportion); ``(None, None)`` for the non-private reference."""
        if not self.private:
            return None, None
        delta = self.delta if self.delta is not None else self.method_record.delta
        if not self.eval_epsilon:
            return self.epsilon, delta
        share = self.eval_epsilon / self.epsilon
        return self.epsilon - self.eval_epsilon, delta * (1.0 - share)

    @property
    def public_records(self) -> int | None:
        """n = num-clients × max-records when max-records is declared (the launchers set
        a bundled corpus's), the ServerApp's public bound; ``None`` when it is not."""
        return None if self.max_records is None else self.num_clients * self.max_records

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
        """Parse a run config (kebab-case keys; ``""`` = default) strictly; every error
        names its keys in kebab-case, as the run config writes them."""
        try:
            return cls._from_run_config(config)
        except SettingError as exc:
            raise SettingError(respell(str(exc), cls.all_keys())) from None

    @classmethod
    def _from_run_config(cls, config: Mapping[str, Any]) -> RunSettings:
        values = {k.replace("-", "_"): v for k, v in config.items()}
        known = set(cls.all_keys())
        for key in values:
            if key not in known:
                close = difflib.get_close_matches(kebab(key), sorted(map(kebab, known)), n=3)
                hint = f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""
                raise SettingError(
                    f"unknown run-config key {kebab(key)!r}{hint}; allowed: the run's keys "
                    f"{sorted(map(kebab, cls.run_keys()))} and the method's own (fedpriv run "
                    "--help lists each method's)"
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
