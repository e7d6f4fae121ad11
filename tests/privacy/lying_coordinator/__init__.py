"""A lying coordinator (and a hostile client) against the real node code, row by row.

The review's attacks, each refused, aborted, discarded or marked uncertified, each
with a twin that restores the old trust and lets it through:

1. a plan whose stages carry less noise than its declared events: ``test_plan_and_queries``;
2. a query at q = 1 or a larger clip than admitted: ``test_plan_and_queries``;
3. claimed dropouts, a threshold forced low: ``test_plan_and_queries`` (the
   secure-aggregation client; the equivocating server: ``tests/federation/
   test_secagg_consistency.py`` and ``tests/server/test_lying_server_flower.py``);
4. rounds beyond what the node accounts, a stage without a mechanism:
   ``test_plan_and_queries``;
5. the reproduction key under distributed noise: ``test_reproduction_keys``;
6. the exact row count as a membership test: ``test_exact_count``;
7. a forged sum from a hostile client: ``test_forged_sum``;
8. SecAgg+'s graph: a forged neighbourhood or threshold, targets below a node's own
   floors, a victim's neighbours shown different survivor lists, survivors not
   connected or a neighbourhood below t: ``test_sparse_graph`` (and
   ``tests/federation/test_secagg_plus.py``).
"""
