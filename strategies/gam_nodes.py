"""DP-EBM's round 0 release and its stages as the nodes enforce them (mixed into
:class:`fedpriv.strategies.gam.DPGAMStrategy`; the normalised replies:
:mod:`fedpriv.models.gam_sensitivity`)."""

from __future__ import annotations

import math

import numpy as np

from fedpriv.federation.node_stage import NodeStage
from fedpriv.models.gam import FINE_GRID, INTERCEPT_GRAD_BOUND
from fedpriv.models.gam_sensitivity import (
    INTERCEPT_STAGE,
    TERM_STAGE,
    head_sensitivity,
    intercept_blocks,
)
from fedpriv.privacy.mechanisms import GaussianMechanism
from fedpriv.privacy.randomness import rounding_margin
from fedpriv.privacy.range_guard import sum_bound
from fedpriv.privacy.release_stage import ReleaseStage

METHOD = "dp_gam"


class NodeStages:
    """Round 0's blocks and the declared stages (needs the strategy's state)."""

    def _head_multiplier(self) -> float:
        """Round 0's multiplier as the node accounts it: its B releases at z, one per
        block of sensitivity 1, compose to one release at z/√B of the whole reply."""
        return self.noise_multiplier_ / math.sqrt(intercept_blocks(int(self._sketch)))

    def _release_head(self, stats: np.ndarray) -> list[np.ndarray]:
        """Round 0's normalised blocks (intercept sums; fine histograms with the sketch),
        each released as one ``GaussianDpEvent(z)`` of the plan and scaled back.

        Each block's std is at least the declared one, z/√B·(m√B + γ√d) for the whole
        reply of d values, and at least z·(m + γ√d_b) for its own d_b: the block's
        mechanism states that much sensitivity (≥ its true m, one unit of m records;
        1 at record level), so both the plan's events and the node's one event at z/√B
        hold."""
        C = self.n_classes
        head = C + 1 if self.multiclass else 2
        grad_bound = 1.0 if self.multiclass else INTERCEPT_GRAD_BOUND
        blocks = [(stats[:head], head_sensitivity(C), grad_bound, "round 0: intercept (Σg, Σh)")]
        if self._sketch:
            label = "round 0: numeric columns' fine histograms"
            blocks.append((stats[head:], math.sqrt(self._n_numeric), 1.0, label))
        noise, out, m = self._noise, [], self.unit_records
        for part, sens, bound, label in blocks:
            if noise is not None:
                z = self.noise_multiplier_
                std = self._head_multiplier() * (
                    m * math.sqrt(len(blocks)) + rounding_margin(stats.size, "l2")
                )
                unit = max(float(m), std / z - rounding_margin(part.size, "l2"))
                mech = GaussianMechanism(l2_sensitivity=unit, noise_multiplier=z)
                stage = ReleaseStage(
                    ledger=noise.ledger,
                    mechanism=mech,
                    rng=noise.rng,
                    bound=sum_bound(bound / sens, self.n_records, sampling_rate=1.0),
                    event=noise.event,
                )
                part = stage.release(part, label=label)
            out.append(part * sens)
        return out

    def node_stages(self) -> list[NodeStage]:
        """The stages the nodes enforce (after :meth:`begin`; none without privacy):
        ``intercept`` (round 0, multiplier z/√B) and ``term`` (every later round: a
        column, the binary group, the pair selection or a pair, each reply normalised
        to one column's sensitivity, multiplier z), at each stage's longest reply."""
        noise = self._noise
        if noise is None:
            return []
        cfg, C, width = self.config, self.n_classes, self._width()
        grid = FINE_GRID if self._sketch else 0
        head = C + 1 if self.multiclass else 2
        longest = [width * max(self.terms.max_bins, cfg.bins + 1), 2 * self._group.size]
        if cfg.interactions and self.terms.m >= 2:
            top = min(cfg.interaction_candidates, self.terms.m)
            longest.append(width * (top * (top - 1) // 2) * cfg.interaction_bins**2)
        return [
            noise.node_stage(
                name=INTERCEPT_STAGE, method=METHOD, reply_length=head + grid * self._n_numeric,
                record_bound=1.0, config={"phase": "intercept", "grid": grid, "n_classes": C},
                rounds=1, l2_sensitivity=self.unit_records * math.sqrt(intercept_blocks(grid)),
                noise_multiplier=self._head_multiplier(),
            ),
            noise.node_stage(
                name=TERM_STAGE, method=METHOD, reply_length=max(longest), record_bound=1.0,
                config={"phase": "term", "n_classes": C}, rounds=cfg.rounds - 1,
            ),
        ]  # fmt: skip
