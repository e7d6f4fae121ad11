"""Do a DP-EBM model's term importances rank the columns as a non-private EBM does?

``python -m fedpriv.experiments.explain_check MODEL [--dataset adult] [--top 3]``

Loads a released dp_gam model file, fits interpret's ExplainableBoostingClassifier
(main effects only, no interactions; ``pip install interpret-core``) on the same
training rows of the bundled corpus (the run's split), and prints each column's
importance under both models: the DP model's mean absolute centred contribution
over the corpus's public test rows (:func:`fedpriv.models.explain.term_importance`,
what ``fedpriv report`` shows), EBM's the same over the same public rows, and
EBM's own ``term_importances()`` (over its training rows: fine for a non-private
reference). It ends with the top-``k`` columns of each and whether they agree.
A study of public benchmark data: nothing here is part of a run.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def raw_frame(X: np.ndarray, schema):
    """Encoded rows back to one column per schema column: numeric values in raw units
    (:func:`fedpriv.models.explain.raw_values`), a categorical column's level name,
    a binary column's 0/1."""
    import pandas as pd

    from fedpriv.data.schema import CategoricalColumn, NumericColumn
    from fedpriv.models.explain import raw_values

    cols, j = {}, 0
    for spec in schema.columns:
        block = X[:, j : j + spec.width]
        if isinstance(spec, NumericColumn):
            cols[spec.name] = raw_values(spec, block[:, 0])
        elif isinstance(spec, CategoricalColumn):
            names = [n.split("=", 1)[1] for n in spec.feature_names()]
            cols[spec.name] = np.asarray(names, dtype=object)[block.argmax(axis=1)]
        else:
            cols[spec.name] = block[:, 0].astype(int).astype(str)
        j += spec.width
    return pd.DataFrame(cols)


def ebm_importances(train, y_train, test, *, seed: int = 0):
    """A main-effects EBM on ``train``; (its importance over ``test`` rows by the
    DP model's definition, its own ``term_importances()``), by column."""
    from interpret.glassbox import ExplainableBoostingClassifier

    ebm = ExplainableBoostingClassifier(interactions=0, random_state=seed)
    ebm.fit(train, y_train)
    c = ebm.eval_terms(test)  # (n, terms) local contributions
    on_test = np.abs(c - c.mean(axis=0)).mean(axis=0)
    names = list(ebm.term_names_)
    return dict(zip(names, on_test, strict=True)), dict(
        zip(names, ebm.term_importances(), strict=True)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a dp_gam model file (model.fedpriv.npz)")
    parser.add_argument("--dataset", default="adult")
    parser.add_argument("--num-clients", type=int, default=5)
    parser.add_argument("--split-seed", type=int, default=0)
    parser.add_argument("--top", type=int, default=3)
    args = parser.parse_args(argv)

    from fedpriv.artefact import load_model
    from fedpriv.data import load_for_run
    from fedpriv.models.explain import term_importance

    art = load_model(args.model)
    data = load_for_run(args.dataset, num_clients=args.num_clients, split_seed=args.split_seed)
    X_tr, y_tr = data.xy("train")
    X_te, _ = data.xy("test")
    names = list(art.schema.column_names)
    dp = dict(zip(names, term_importance(art.model, X_te), strict=True))
    ebm_test, ebm_own = ebm_importances(
        raw_frame(X_tr, art.schema), y_tr, raw_frame(X_te, art.schema), seed=args.split_seed
    )
    rank = lambda d: sorted(d, key=lambda k: -d[k])  # noqa: E731
    print(f"{'column':<16} {'DP-EBM':>8} {'EBM test':>9} {'EBM own':>8}")
    for name in rank(dp):
        print(f"{name:<16} {dp[name]:8.4f} {ebm_test[name]:9.4f} {ebm_own[name]:8.4f}")
    k = args.top
    tops = {"DP-EBM (public test rows)": rank(dp)[:k], "EBM (same public rows)": rank(ebm_test)[:k],
            "EBM term_importances()": rank(ebm_own)[:k]}  # fmt: skip
    for what, top in tops.items():
        print(f"top {k} {what}: {', '.join(top)}")
    same = set(tops["DP-EBM (public test rows)"]) == set(tops["EBM (same public rows)"])
    print(f"same top {k} set: {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
