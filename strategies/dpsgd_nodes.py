"""DP-SGD's stages as the nodes enforce them, and the sensitivity-setting config of
each stage's queries (mixed into :class:`fedpriv.strategies.dpsgd.DPSGDStrategy`).

Kept apart, as :mod:`fedpriv.strategies.lumberjack_nodes` is for Lumberjack, so the
strategy module holds its planning and rounds only.
"""

from __future__ import annotations

from fedpriv.federation.node_stage import NodeStage
from fedpriv.models.sgd_sums import CENTRE, STEP


class DPSGDNodeStages:
    """:meth:`node_stages` and the stages' query configs (need the strategy's plan:
    ``_noise``, ``_centre_noise``, ``_recal_rounds``, ``row_bound``, ``sensitivity``,
    ``bias_bound``, ``spec``, ``config``, ``method`` and ``n_classes``)."""

    def node_stages(self) -> list[NodeStage]:
        """The plan a node enforces (after :meth:`begin`; ``[]`` in a non-private run):
        the centring round, the steps and the recalibration rounds, each with the
        sensitivity-setting config its queries carry."""
        if self._noise is None:
            return []
        parts = [
            (self._centre_noise, self._map.n_features, self.row_bound, self._centre_config),
            (self._noise, self.spec.n_params, self.sensitivity, self._step_config),
        ]
        if (last := self._recal_rounds) is not None:
            parts.append((last.noise, last.reply_length, last.sensitivity, self._recal_config))
        stages = []
        for noise, length, bound, settings in parts:
            if noise is not None:  # no centring: no centring stage
                config = settings()
                stage = noise.node_stage(
                    name=config["stage"],
                    method=self.method,
                    reply_length=length,
                    record_bound=bound,
                    config=config,
                )
                stages.append(stage)
        return stages

    # The sensitivity-setting config of each stage's queries (fedpriv.clients.dpsgd reads it).
    def _centre_config(self) -> dict:
        return {"stage": CENTRE, "clip_norm": self.row_bound}

    def _step_config(self) -> dict:
        cfg = self.config
        return {"stage": STEP, "clip_norm": cfg.clip_norm, "bias_bound": self.bias_bound}

    def _recal_config(self) -> dict:
        return {"stage": self._recal_rounds.stage, "n_classes": self.n_classes}
