"""A fedpriv strategy as a Flower ``flwr.serverapp.strategy.Strategy``.

Flower users expect strategies to be Flower strategies
(docs/explanation/architecture.md §4): someone with their own ServerApp calls
``strategy.start(grid=..., ...)`` and gets a Flower ``Result``.
:class:`FlowerStrategy` is a thin adapter over the transport-agnostic core
(``strategies/``) and the shared round engine
(:class:`fedpriv.federation.engine.RoundEngine`, over Flower messages by
:class:`fedpriv.server.grid_runtime.GridRuntime`), so a run started this way sends the
same messages and releases the same model as ``python -m fedpriv.server.simulate``:

* ``configure_train`` of round 1 first runs the run's key exchange (keys, pinned key book), then
  every round returns the ``query.fedpriv`` messages of the core's next query
  (none if fewer than two clients are asked: the round is aborted);
* ``aggregate_train`` unmasks the sum (the round's unmask exchange with the
  survivors), lets the core add the noise and release, and returns
  the released model as an ``ArrayRecord`` plus a ``MetricRecord`` with the
  replies (and, about every tenth round, an upper bound on ε spent);
* evaluation on the clients is not part of these methods (it would release
  un-noised statistics): ``configure_evaluate`` sends nothing. Pass
  ``evaluate_fn`` to ``start`` for server-side evaluation on public data.

The core never imports Flower; this module is the only place the two meet.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO
from pathlib import Path

import numpy as np
from fedpriv.server.grid_runtime import GridRuntime, PlannedRound
from fedpriv.server.run_progress import append_progress
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy as _FlowerStrategy

from fedpriv.federation.protocol import Strategy
from fedpriv.federation.settings import RunSettings
from fedpriv.privacy.ledger import PrivacyLedger
from fedpriv.privacy.randomness import SecretKey, key_from_environment


class FlowerStrategy(_FlowerStrategy):
    """Adapter: drive a fedpriv :class:`~fedpriv.federation.protocol.Strategy` from Flower.

    Parameters
    ----------
    strategy : fedpriv Strategy
        The server half of a method, e.g. :class:`fedpriv.strategies.boosting.DPBoostingStrategy`.
        Its model must offer ``to_arrays()``.
    settings : RunSettings
        Clients, seed, participation, timeouts (``settings.rounds`` must equal
        the core's number of rounds and the ``num_rounds`` given to ``start``:
        DP-SGD's automatic rounds resolved, :meth:`RunSettings.for_records`).
    n_features : int
        Width of the encoded feature matrix (public, from the schema).
    max_records : int
        Public bound on records per client (sets the fixed-point range).
    ledger : PrivacyLedger or None
        The run's ledger (``None`` only for a non-private reference run).
    secret_key : SecretKey, optional
        The server's private randomness (noise, participation coins). Default:
        injected through ``$FEDPRIV_SECRET_KEY`` (to reproduce a run), else a
        fresh key from OS entropy. Never logged, saved or sent.
    progress_file : Path, optional
        Where to append one line per round (:mod:`fedpriv.server.run_progress`).
    """

    def __init__(
        self,
        strategy: Strategy,
        *,
        settings: RunSettings,
        n_features: int,
        max_records: int,
        ledger: PrivacyLedger | None,
        secret_key: SecretKey | None = None,
        progress_file: Path | None = None,
    ) -> None:
        self.core = strategy
        self.progress_file = progress_file
        self.secret_key = secret_key if secret_key is not None else key_from_environment()
        self.settings = settings
        self.n_features = n_features
        self.max_records = max_records
        self.ledger = ledger
        self.runtime: GridRuntime | None = None
        self._planned: PlannedRound | None = None

    # -- set-up ---------------------------------------------------------------
    def connect(self, grid: Grid) -> GridRuntime:
        """Start the core, wait for the nodes and run the key exchange (once per run).

        The core starts first: its plan, reserved in the ledger, travels with the key
        exchange's first message, so a node whose own budget refuses it stops the run
        before it reads a row (:mod:`fedpriv.privacy.node_budget`).
        """
        if self.runtime is None:
            runtime = GridRuntime(grid, self.settings, max_records=self.max_records)
            runtime.begin(
                self.core,
                n_features=self.n_features,
                ledger=self.ledger,
                secret_key=self.secret_key,
            )
            runtime.connect()
            self.runtime = runtime
        elif self.runtime.grid is not grid:
            raise RuntimeError("this strategy is already running on another grid")
        return self.runtime

    # -- Flower Strategy ------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        runtime = self.connect(grid)
        if self._planned is not None:
            raise RuntimeError(f"round {self._planned.query.round + 1} was never aggregated")
        query = self.core.next_query()
        if query is None or query.round != server_round - 1:
            raise RuntimeError(
                f"Flower asked for round {server_round}, but the strategy has "
                f"{self.settings.rounds} rounds (next: "
                f"{'none' if query is None else query.round + 1}); start(num_rounds=...) "
                "must equal the run config's rounds"
            )
        self._planned, msgs = runtime.plan_round(query)
        return msgs

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        planned, runtime = self._planned, self.runtime
        if planned is None or runtime is None or planned.query.round != server_round - 1:
            raise RuntimeError(f"aggregate_train({server_round}) without its configure_train")
        self._planned = None
        aggregate = runtime.finish_round(planned, replies)
        released = runtime.engine.deliver(self.core, planned.query, aggregate)
        bound = runtime.log_round(planned, self.ledger)
        metrics = {
            "replies": planned.replies,
            "asked": len(planned.asked),
            "aborted": int(not released),
        }
        if bound is not None:  # about every tenth round: a PLD is not free
            metrics["epsilon_upper_bound"] = bound
        if self.progress_file is not None:
            append_progress(
                self.progress_file,
                {
                    "round": server_round, "rounds": self.settings.rounds,
                    "asked": [int(p) for p in planned.asked], "replied": list(planned.senders),
                    "aborted": not released, "epsilon_upper_bound": bound,
                },
            )  # fmt: skip
        return self.model_arrays(), MetricRecord(metrics)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # client-side metrics would be un-noised releases

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        s = self.settings
        log(
            INFO,
            "\t├── fedpriv %s over %d clients, %d rounds, ε=%s, δ=%g, participation %g",
            getattr(self.core, "method", type(self.core).__name__),
            s.num_clients,
            s.rounds,
            s.epsilon if s.private else "inf",
            s.delta,
            s.participation,
        )
        log(INFO, "\t└── secure aggregation: double masking, t-of-n Shamir, pinned keys")

    # -- result ---------------------------------------------------------------
    def model_arrays(self) -> ArrayRecord:
        """The released model so far as an ``ArrayRecord``."""
        model = self.core.model()
        if model is None:  # nothing released yet (e.g. a forest still growing)
            return ArrayRecord()
        arrays = model.to_arrays()
        return ArrayRecord({k: Array(np.asarray(v, order="C")) for k, v in arrays.items()})
