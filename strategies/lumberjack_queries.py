"""Lumberjack's queries: what the server sends each stage round and the leaf round
(mixed into :class:`fedpriv.strategies.lumberjack.LumberjackStrategy`).

Only public inputs (the feature space, the salts, the released Heavy bits and
structure) go into a query; kept apart from the strategy's planning and release
so each module stays readable.
"""

from __future__ import annotations

import numpy as np
from fedpriv.strategies.lumberjack_nodes import METHOD

from fedpriv.federation.protocol import Query
from fedpriv.models.lumberjack import expand


class LumberjackQueries:
    """:meth:`_stage_query` and :meth:`_leaf_query` (need ``config``, ``space``,
    ``n_classes``, ``_roots``, ``_salts``, ``_grow`` and ``_trees``)."""

    def _stage_query(self, t: int, height: int) -> Query:
        """Every node of the stage's complete subtrees (public), the released bottom bits."""
        cfg = self.config
        self._stages = [
            expand(roots, height, self.space, int(salt))
            for roots, salt in zip(self._roots, self._salts, strict=True)
        ]
        arrays = {
            "roots": np.array([st.n_roots for st in self._stages], dtype=np.int64),
            "feature": np.concatenate([f for st in self._stages for f in st.feature]),
            "threshold": np.concatenate([f for st in self._stages for f in st.threshold]),
        }
        if self._grow is not None:
            # The sparse threshold's released outcome for the last stage's bottom
            # nodes (Heavy and grown, or not): never why a node is not grown.
            arrays["grow"] = np.concatenate(self._grow).astype(np.uint8)
            arrays["grow_sizes"] = np.array([g.size for g in self._grow], dtype=np.int64)
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=1.0,  # every row, every round: no subsampling to account
            reply_length=sum(st.size for st in self._stages),  # public given released bits
            record_bound=1.0,  # one record adds 1 to one node per level per tree
            arrays=arrays,
            config={
                "kind": "stage",
                "height": height,
                "n_classes": self.n_classes,
                "n_trees": cfg.trees,
            },
        )

    def _leaf_query(self, t: int) -> Query:
        """The released structure; clients return the class counts of its leaves."""
        cfg, trees = self.config, self._trees
        cat = lambda f: np.concatenate([getattr(tr, f) for tr in trees])  # noqa: E731
        n_leaves = sum(int(tr.is_leaf.sum()) for tr in trees)
        return Query(
            round=t,
            method=METHOD,
            sampling_rate=1.0,
            reply_length=self.n_classes * n_leaves,
            record_bound=1.0,  # one record, one leaf per tree
            arrays={
                "tree_sizes": np.array([tr.left.size for tr in trees], dtype=np.int64),
                "feature": cat("feature"),
                "threshold": cat("threshold"),
                "left": cat("left"),
                "right": cat("right"),
            },
            config={"kind": "leaves", "n_classes": self.n_classes, "n_trees": cfg.trees},
        )
