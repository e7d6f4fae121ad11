"""The built-in learners' records: the one place each is described.

:mod:`fedpriv.methods` registers them on import (unchecked there: every part's
import is deferred, so the Flower ClientApp never imports a server half; a test
checks every part of every record with the registry's own checker,
:mod:`fedpriv.method_check`). A plugin's records live in its own package and
reach the registry through the ``fedpriv.methods`` entry-point group.
"""

from fedpriv.methods import Method

BUILT_INS = (
    Method(
        name="boosting",
        summary="DP federated gradient boosting with random trees",
        config="fedpriv.strategies.boosting:BoostingConfig",
        strategy="fedpriv.strategies.boosting:build",
        client="fedpriv.clients.boosting:BoostingClient",
        model="fedpriv.models.trees:TreeEnsemble",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.estimators:DPBoostingClassifier",
        maths="fedpriv.models.trees",
        multiclass=True,
    ),
    Method(
        name="logistic",
        summary="DP-SGD logistic regression",
        config="fedpriv.strategies.dpsgd_config:LogisticConfig",
        strategy="fedpriv.strategies.dpsgd:build",
        client="fedpriv.clients.dpsgd:DPSGDClient",
        model="fedpriv.models.networks:NetworkModel",
        kernels="fedpriv.models._sgd_kernels",
        estimator="fedpriv.server.estimators:DPLogisticClassifier",
        maths="fedpriv.models.networks",
        multiclass=True,
    ),
    Method(
        name="mlp",
        summary="DP-SGD one-hidden-layer MLP",
        config="fedpriv.strategies.dpsgd_config:MLPConfig",
        strategy="fedpriv.strategies.dpsgd:build",
        client="fedpriv.clients.dpsgd:DPSGDClient",
        model="fedpriv.models.networks:NetworkModel",
        kernels="fedpriv.models._sgd_kernels",
        estimator="fedpriv.server.estimators:DPMLPClassifier",
        maths="fedpriv.models.networks",
        multiclass=True,
    ),
    Method(
        name="lumberjack",
        summary="Lumberjack: DP random forests grown by sparse-threshold heavy hitters",
        config="fedpriv.strategies.lumberjack:LumberjackConfig",
        strategy="fedpriv.strategies.lumberjack:build",
        client="fedpriv.clients.lumberjack:LumberjackClient",
        model="fedpriv.models.heavy_hitters:ForestModel",
        kernels="fedpriv.models._forest_kernels",
        estimator="fedpriv.server.forest_estimators:LumberjackClassifier",
        maths="fedpriv.models.lumberjack",
        delta=1e-6,
        multiclass=True,
        family="forest",
    ),
    Method(
        name="random_forest",
        summary="DP random forest of complete random trees (noisy leaf counts)",
        config="fedpriv.strategies.random_forest:RandomForestConfig",
        strategy="fedpriv.strategies.random_forest:build",
        client="fedpriv.clients.random_forest:RandomForestClient",
        model="fedpriv.models.random_forest:RandomForestModel",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.forest_estimators:DPRandomForestClassifier",
        maths="fedpriv.models.heavy_hitters",
        delta=1e-6,
        multiclass=True,
        distributed=True,  # its Gaussian leaf counts (leaf-mechanism = "gaussian")
        family="forest",
    ),
    Method(
        name="dp_gam",
        summary="DP histogram boosting of one-column trees (DP-EBM)",
        config="fedpriv.strategies.gam:GAMConfig",
        strategy="fedpriv.strategies.gam:build",
        client="fedpriv.clients.gam:GAMClient",
        model="fedpriv.models.gam:GAMModel",
        kernels="fedpriv.models.gam",
        estimator="fedpriv.server.estimators:DPGAMClassifier",
        maths="fedpriv.models.gam",
        multiclass=True,
        family="histogram",
    ),
    Method(
        name="bdpe",
        summary="bdpe_α: boosted DP greedy trees, M_α loss, exponential-mechanism splits",
        config="fedpriv.strategies.bdpe:BDPEConfig",
        strategy="fedpriv.strategies.bdpe:build",
        client="fedpriv.clients.bdpe:BDPEClient",
        model="fedpriv.models.bdpe_model:BDPEModel",
        kernels="fedpriv.models._kernels",
        estimator="fedpriv.server.estimators:BDPEClassifier",
        maths="fedpriv.models.bdpe",
        family="pure",
    ),
)
