"""bdpe's stages as the nodes enforce them.

Mixed into :class:`fedpriv.strategies.bdpe.BDPEStrategy`.
"""

from __future__ import annotations

from fedpriv.federation.node_stage import NodeStage, StageMechanism, StageRelease
from fedpriv.models.bdpe import CALIBRATION_BINS
from fedpriv.models.forest_sensitivity import LEAF_MASSES, level_sum_sensitivity
from fedpriv.privacy.randomness import rounding_margin

METHOD = "bdpe"


class BDPENodeStages:
    """:meth:`node_stages` (needs the strategy's plan: its ε shares and mechanisms)."""

    def node_stages(self) -> list[NodeStage]:
        """The stages the nodes enforce (after :meth:`begin`; none without privacy):
        ``split`` (levels 0..D−2 of every tree: one ε_level-bounded-range selection
        each) and ``leaves`` (each tree's last level: its ε_level selection, and the
        Laplace leaves released from the same sums' leaf masses, an extra release of
        that part of the reply), both with the level reply's L1 sensitivity 1 + G as
        the unit that the scores' sensitivity Δ_α(m) assumes (weights in [0, 1]); and
        ``calibration`` (Laplace counts)."""
        if self._budget is None:
            return []
        cfg, G = self.config, self.n_candidates
        unit = self.unit_records * level_sum_sensitivity(G)[0]  # one unit's: m records
        last = cfg.depth - 1
        masses = 4 * (1 << last)  # (w¹, w⁰) of both children of every last-level node
        leaves = StageRelease(
            mechanism=StageMechanism.LAPLACE, part=LEAF_MASSES, length=masses,
            noise=(self._leaves.l1_sensitivity + rounding_margin(masses, "l1"))
            / self._leaves.epsilon,
        )  # fmt: skip
        kinds = [("leaves", last, cfg.trees, (leaves,))]
        if cfg.depth > 1:
            kinds.insert(0, ("split", last - 1, cfg.trees * last, ()))
        stages = [
            NodeStage(
                name=name, method=METHOD, mechanism=StageMechanism.BOUNDED_RANGE,
                rounds=rounds, sampling_rate=1.0, reply_length=2 * (1 << deepest) * (G + 1),
                record_bound=1.0, config={**self._level_config(), "level": deepest},
                noise=self.epsilon_level_, unit=unit, extra=extra,
            )
            for name, deepest, rounds, extra in kinds
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
