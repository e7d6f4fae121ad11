"""Secret keys and private generators: hidden, unpicklable, reproducible, on the grid."""

import copy
import logging
import pickle

import numpy as np
import pytest
from fedpriv.clients.boosting import BoostingClient
from fedpriv.server.estimators import DPBoostingClassifier
from fedpriv.strategies.boosting import BoostingConfig, DPBoostingStrategy
from scipy import stats
from sklearn.base import clone

from fedpriv.data import iid, load_heart
from fedpriv.federation.protocol import make_clients
from fedpriv.federation.runtime import InProcessRuntime
from fedpriv.privacy import PrivacyBudget, PrivacyLedger, ks_noise_test
from fedpriv.privacy.randomness import (
    GRID,
    SecretKey,
    check_private,
    gaussian_on_grid,
    is_private,
    laplace_on_grid,
)
from tests.keys import key_for, key_hex, private_rng

N = 60_000
ALPHA = 1e-3


def _raw(i):
    """The key bytes of test key ``i``."""
    return bytes.fromhex(key_hex(i))


@pytest.fixture(scope="module")
def heart():
    return load_heart()


def _fit(data, **kw):
    args = {"rounds": 3, "depth": 2, "epsilon": 2.0, "seed": 0, **kw}
    return DPBoostingClassifier(**args).fit(data)


# --- the key never leaves the process ------------------------------------------------
def test_the_key_never_appears_in_repr_or_str(caplog):
    key, raw = key_for(0), _raw(0)
    with caplog.at_level(logging.INFO):
        logging.getLogger("fedpriv.test").info("key %s, %r", key, key)
    texts = (repr(key), str(key), f"{key}", repr([key]), repr({"k": key}), caplog.text)
    for text in texts:
        assert raw.hex() not in text and raw.hex().upper() not in text
        assert text.startswith("SecretKey(<") or "SecretKey(<hidden>)" in text
    assert repr(key) == "SecretKey(<hidden>)"
    assert repr(key.derive("client", 1)) == "SecretKey(<hidden>)"
    estimator = DPBoostingClassifier(secret_key=key)
    assert raw.hex() not in repr(estimator.get_params())
    # A malformed injected key is refused without echoing it.
    with pytest.raises(ValueError) as err:
        SecretKey.from_hex(key_hex(0)[:-1] + "z")
    assert key_hex(0)[:-1] not in str(err.value)
    with pytest.raises(TypeError, match="an int seed is public"):
        SecretKey.coerce(7)


def test_a_pickled_key_is_redacted_and_refuses_to_generate():
    key = key_for(0)
    blob = pickle.dumps(key)
    assert _raw(0) not in blob
    loaded = pickle.loads(blob)
    assert repr(loaded) == "SecretKey(<redacted>)" and loaded != key
    for use in (lambda: loaded.generator("noise"), lambda: loaded.streams("poisson")):
        with pytest.raises(RuntimeError, match="redacted when its owner was pickled"):
            use()
    # A debug key keeps its reason through pickling: the run stays uncertified.
    assert not pickle.loads(pickle.dumps(SecretKey.from_public_seed(3))).certified


@pytest.mark.parametrize("as_bytes", [False, True], ids=["SecretKey", "bytes"])
def test_a_pickled_estimator_holds_neither_the_key_nor_a_private_generator(heart, as_bytes):
    raw = _raw(4)
    est = DPBoostingClassifier(
        rounds=3, depth=2, epsilon=2.0, secret_key=raw if as_bytes else key_for(4)
    )
    assert raw not in pickle.dumps(est)
    blob = pickle.dumps(est.fit(heart))
    assert raw not in blob
    assert b"ChaCha" not in blob and b"randomgen" not in blob  # no generator state either
    # The unpickled estimator still predicts; refitting it would need a new key.
    loaded = pickle.loads(blob)
    X, _ = heart.xy("test")
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    with pytest.raises(RuntimeError, match="redacted"):
        loaded.fit(heart)


def test_deepcopy_and_clone_keep_the_key_usable(heart):
    key = key_for(5)
    np.testing.assert_array_equal(
        copy.deepcopy(key).generator("a").random(4), key.generator("a").random(4)
    )
    est = DPBoostingClassifier(rounds=3, depth=2, epsilon=2.0, secret_key=key)
    twin = clone(est)
    assert twin.secret_key == key
    reference = np.array(est.fit(heart).model_.leaf_values)
    for other in (twin, copy.deepcopy(est)):
        np.testing.assert_array_equal(np.array(other.fit(heart).model_.leaf_values), reference)


# --- derivation and streams ----------------------------------------------------------
def test_derived_paths_are_reproducible_and_independent():
    key = key_for(0)
    assert key.derive("client", 1) == key_for(0).derive("client", 1)
    paths = [
        ("client", 1),
        ("client", 2),
        ("client", "1"),
        ("client1",),
        ("server",),
        (1, "client"),
    ]
    subkeys = [key.derive(*p) for p in paths]
    assert len(set(subkeys)) == len(paths)  # int vs str, and path boundaries, are kept apart
    assert key_for(1).derive("client", 1) != subkeys[0]
    draws = np.array([k.generator("noise").standard_normal(20_000) for k in subkeys])
    corr = np.corrcoef(draws)[np.triu_indices(len(paths), 1)]
    assert np.abs(corr).max() < 0.04  # ≈ 4.5 SE of 1/√20000
    with pytest.raises(TypeError, match="key path items must be int or str"):
        key.derive(True)


def test_substreams_are_reproducible_in_any_order_and_distinct():
    streams = key_for(0).streams("poisson")
    first = streams.at(3).random(5)
    streams.at(7).random(100)
    np.testing.assert_array_equal(streams.at(3).random(5), first)
    np.testing.assert_array_equal(key_for(0).streams("poisson").at(3).random(5), first)
    heads = np.array([streams.at(i).random(4) for i in range(200)])
    assert len({tuple(h) for h in heads}) == 200
    assert is_private(streams.at(0))
    with pytest.raises(ValueError, match=r"index must be an integer in \[0, 2\^64\)"):
        streams.at(-1)


# --- noise on the grid ---------------------------------------------------------------
@pytest.mark.parametrize("where", ["on-grid", "off-grid"])
def test_gaussian_on_grid_lies_on_the_grid_with_the_right_law(where):
    base = np.array([3.0, -1.0, 0.0]) if where == "on-grid" else np.array([0.1, -1 / 3, np.pi])
    x = np.tile(base, N // 3)
    assert bool((np.rint(x / GRID) * GRID == x).all()) == (where == "on-grid")
    out = gaussian_on_grid(x, 3.0, private_rng(20))
    ticks = out / GRID
    np.testing.assert_array_equal(ticks, np.rint(ticks))  # every value is an integer · 2^-32
    # The release is (rint(x/γ) + rint(σN/γ))·γ for the generator's own N: within γ of x + σN.
    normal = private_rng(20).standard_normal(x.shape)
    assert np.abs(out - (x + 3.0 * normal)).max() <= GRID
    noise = out - x
    assert ks_noise_test(noise, stats.norm(0.0, 3.0)) > ALPHA
    assert ks_noise_test(noise, stats.norm(0.0, 3.15)) < ALPHA  # power: 5 % too wide


def test_laplace_on_grid_lies_on_the_grid_with_the_right_law():
    x = np.full(N, 0.1)  # off the grid
    out = laplace_on_grid(x, 4.0, private_rng(21))
    np.testing.assert_array_equal(out / GRID, np.rint(out / GRID))
    assert ks_noise_test(out - x, stats.laplace(0.0, 4.0)) > ALPHA
    assert ks_noise_test(out - x, stats.laplace(0.0, 4.4)) < ALPHA


def test_only_chacha_generators_are_private():
    assert check_private("rng", key_for(0).generator("x")) is not None
    message = (
        r"rng must be a private generator \(SecretKey\.generator\(\.\.\.\), ChaCha20\); "
        r"got PCG64: noise and sampling coins must not be derivable from a seed"
    )
    for public in (np.random.default_rng(0), np.random.Generator(np.random.PCG64(1))):
        assert not is_private(public)
        with pytest.raises(TypeError, match=message):
            check_private("rng", public)
        with pytest.raises(TypeError, match=message):
            gaussian_on_grid([0.0], 1.0, public)
    assert not is_private(None) and not is_private(np.random)


# --- debug keys are reported -----------------------------------------------------------
def _boosting_run(key):
    rng = np.random.default_rng(0)
    X = rng.random((300, 4))
    y = (X[:, 0] > 0.5).astype(float)
    clients = make_clients(X, y, iid(300, n_clients=3, rng=np.random.default_rng(1)))
    ledger = PrivacyLedger(budget=PrivacyBudget(epsilon=2.0, delta=1e-5))
    rt = InProcessRuntime(clients=clients, handler=BoostingClient(), seed=0, secret_key=key)
    rt.run(DPBoostingStrategy(BoostingConfig(rounds=3, depth=2)), ledger=ledger)
    return ledger.report()


def test_a_debug_key_from_a_public_seed_makes_the_run_uncertified(heart):
    debug = SecretKey.from_public_seed(11)
    assert not debug.certified and not debug.derive("client", 0).certified
    assert repr(debug) == "SecretKey(<debug, public>)"
    report = _boosting_run(debug)
    assert report.epsilon <= 2.0  # the accounting is unchanged...
    assert not report.certified  # ...but the guarantee is void, and says why
    d = report.to_dict()
    assert d["certified"] is False
    assert d["caveat"] == "private randomness derived from public seed 11"
    fine = _boosting_run(key_for(0)).to_dict()
    assert fine["certified"] is True and fine["caveat"] == ""
    # The same through an estimator.
    est = _fit(heart, secret_key=SecretKey.from_public_seed(11))
    assert est.privacy_report_.to_dict()["certified"] is False
    assert "public seed 11" in est.privacy_report_.to_dict()["caveat"]
