"""Lumberjack's stages as the nodes enforce them (mixed into
:class:`fedpriv.strategies.lumberjack.LumberjackStrategy`)."""

from __future__ import annotations

from fedpriv.federation.node_stage import NodeStage, StageMechanism
from fedpriv.models import recalibration
from fedpriv.models.forest_sensitivity import leaf_count_sensitivity, stage_count_sensitivity

METHOD = "lumberjack"


class LumberjackNodeStages:
    """:meth:`node_stages` (needs the strategy's plan: ``_events``, ``caps_``, ``_recal``,
    and ``unit_records``: every sensitivity declared is one unit's, m records')."""

    def node_stages(self) -> list[NodeStage]:
        """The stages the nodes enforce (after :meth:`begin`; none without privacy):
        ``structure`` (every stage round: the sparse threshold, one (ε₁, δ₁) event for
        the whole forest, Theorem 6), ``leaves`` (the leaf round: η per tree, or the
        Gaussian counts) and, with ``recalibrate_share`` > 0, ``recalibration``."""
        if self._budget is None:
            return []
        cfg, caps = self.config, self.caps_
        k, C = cfg.trees, self.n_classes
        height = max(cfg.heights)
        structure = self._events[0][0]
        stages = [
            NodeStage(
                name="structure", method=METHOD, mechanism=StageMechanism.APPROX,
                rounds=len(cfg.heights), sampling_rate=1.0,
                reply_length=max(caps.stage_reply(s) for s in range(len(cfg.heights))),
                record_bound=1.0,
                config={"kind": "stage", "height": height, "n_classes": C, "n_trees": k},
                noise=structure.epsilon, delta=structure.delta,
                unit=self.unit_records * stage_count_sensitivity(k, height)[0], uses=1,
            )
        ]  # fmt: skip
        d = caps.leaf_reply
        where = dict(
            name="leaves", method=METHOD, rounds=1, sampling_rate=1.0, reply_length=d,
            record_bound=1.0, config={"kind": "leaves", "n_classes": C, "n_trees": k},
        )  # fmt: skip
        l1 = self.unit_records * leaf_count_sensitivity(k, disjoint=False)[0]  # a unit's
        if cfg.leaf_mechanism == "exponential":
            stages.append(
                NodeStage(
                    mechanism=StageMechanism.BOUNDED_RANGE, noise=self.eta_, unit=l1, uses=k,
                    **where,
                )
            )  # fmt: skip
        else:
            stages.append(
                NodeStage(mechanism=StageMechanism.GAUSSIAN, noise=self.leaf_noise(d), **where)
            )
        if self._recal is not None:
            stages.append(
                self._recal.noise.node_stage(
                    name="recalibration", method=METHOD, reply_length=self._recal.reply_length,
                    record_bound=self._recal.record_bound,
                    config={"kind": recalibration.STAGE, "n_classes": C},
                )
            )  # fmt: skip
        return stages
