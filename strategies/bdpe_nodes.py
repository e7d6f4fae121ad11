"""bdpe's stages as the nodes enforce them (mixed into :class:`strategies.bdpe.BDPEStrategy`)."""

from __future__ import annotations

from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.models.bdpe import CALIBRATION_BINS
from fedpriv.models.forest_sensitivity import level_sum_sensitivity
from fedpriv.privacy.randomness import rounding_margin

METHOD = "bdpe"


class BDPENodeStages:
    """:meth:`node_stages` (needs the strategy's plan: its ε shares and mechanisms)."""

    def node_stages(self) -> list[NodeStage]:
        """The stages the nodes enforce (after :meth:`begin`; none without privacy):
        ``split`` (levels 0..D−2 of every tree: one ε_level-bounded-range selection
        each), ``leaves`` (each tree's last level: its selection and the Laplace
        leaves from the same sums, one pure (ε_level + ε_pred)-DP event, the basic
        composition the plan certifies at δ = 0) and ``calibration`` (Laplace counts).
        The level stages' unit is the level reply's L1 sensitivity, 1 + G, that the
        scores' sensitivity Δ_α(m) and the leaves' L1 of 1 assume (weights in [0, 1])."""
        if self._budget is None:
            return []
        cfg, G = self.config, self.n_candidates
        unit = level_sum_sensitivity(G)[0]
        kinds = [("leaves", StageMechanism.PURE, cfg.depth - 1, cfg.trees,
                  self.epsilon_level_ + self.epsilon_pred_)]  # fmt: skip
        if cfg.depth > 1:
            split = ("split", StageMechanism.BOUNDED_RANGE, cfg.depth - 2,
                     cfg.trees * (cfg.depth - 1), self.epsilon_level_)  # fmt: skip
            kinds.insert(0, split)
        stages = [
            NodeStage(
                name=name, method=METHOD, mechanism=mechanism, rounds=rounds,
                sampling_rate=1.0, reply_length=2 * (1 << deepest) * (G + 1),
                record_bound=1.0, config={**self._level_config(), "level": deepest},
                noise=eps, unit=unit,
            )
            for name, mechanism, deepest, rounds, eps in kinds
        ]  # fmt: skip
        if cfg.calibrate_share > 0:
            d = 2 * CALIBRATION_BINS
            mech = self._counts
            stages.append(
                NodeStage(
                    name="calibration", method=METHOD, mechanism=StageMechanism.LAPLACE,
                    rounds=1, sampling_rate=1.0, reply_length=d, record_bound=1.0,
                    config={"phase": "calibrate"},
                    noise=(mech.l1_sensitivity + rounding_margin(d, "l1")) / mech.epsilon,
                )
            )  # fmt: skip
        return stages
