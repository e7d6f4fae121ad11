"""The CPU floor of secure aggregation in one process: the cryptography it cannot skip.

A run of K clients on the sparse graph of degree k (SecAgg+, Bell et al. CCS 2020; the
complete graph, k = K − 1 and a round's t, below the K where the graph applies), with
every party in one process as :class:`~fedpriv.federation.runtime.InProcessRuntime` holds
them, must at least compute (Bonawitz et al. 2017, §4, as wired in
:mod:`fedpriv.federation.secagg`):

* set-up: K·k X25519 agreements (each client with each neighbour; the two ends of an
  edge are two parties, each computes its own);
* per round: K·k pair-mask keystreams (each end of each edge), K·k share encryptions
  and K·k decryptions (ChaCha20-Poly1305, one per directed edge) per batch of seeds
  (:mod:`fedpriv.federation.secagg_seeds`: a run of R rounds seals ⌈R/B⌉ batches of
  min(B, R) shares, B = ``secagg-seed-batch``), K self-mask keystreams on each side
  (client and server, one key derivation each), K Ed25519 signatures on
  the survivor list (the consistency round) and the verifications of the distinct
  signatures the parties need (each once: the in-process memo): all K under the sparse
  graph (every client counts t of its neighbours'), t under the complete graph.

Each primitive is timed here (CPU seconds, best of three batches) and multiplied by its
count. Nothing else a round does (Shamir sharing, checks, numpy sums) is counted, so a
fit cannot cost less than plain + set-up floor + rounds × round floor.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from fedpriv.federation import shamir
from fedpriv.federation.secagg_common import RUN_SEED_BATCH, SecAggConfig, self_mask_key


def _cpu(fn, n: int, repeats: int = 3) -> float:
    """CPU seconds per call of ``fn`` (best of ``repeats`` batches of ``n``)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - t0)
    return best / n


@dataclass(frozen=True, kw_only=True)
class Costs:
    """CPU seconds of one call of each primitive (reply of ``words`` uint64 words)."""

    x25519: float
    keystream: float  # ChaCha20-Poly1305 over 8·words zero bytes (a pair mask)
    seal: float  # ChaCha20-Poly1305 encryption of a batch's shares (40 bytes each), 34 B AD
    open: float  # its decryption
    hkdf: float  # a self-mask key (secagg_common.self_mask_key: HKDF-SHA256 of 40 bytes)
    sign: float  # Ed25519 on a survivor list of K ids
    verify: float


def measure(words: int, clients: int, batch: int = 1) -> Costs:
    sk, pk = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    aead = ChaCha20Poly1305(os.urandom(32))
    nonce, zeros, ad = b"\0" * 12, bytes(8 * words), os.urandom(34)
    share = os.urandom(40 * batch)
    sealed = aead.encrypt(nonce, share, ad)
    signer = Ed25519PrivateKey.generate()
    message = os.urandom(8 * (clients + 2) + 44)  # tag, digest, r, |S|, S, |D|
    signature, vk = signer.sign(message), signer.public_key()
    seed = shamir.draw_seed()

    def hkdf() -> bytes:
        return self_mask_key(seed)

    return Costs(
        x25519=_cpu(lambda: sk.exchange(pk), 2000),
        keystream=_cpu(lambda: aead.encrypt(nonce, zeros, None), 20000),
        seal=_cpu(lambda: aead.encrypt(nonce, share, ad), 20000),
        open=_cpu(lambda: aead.decrypt(nonce, sealed, ad), 20000),
        hkdf=_cpu(hkdf, 5000),
        sign=_cpu(lambda: signer.sign(message), 2000),
        verify=_cpu(lambda: vk.verify(signature, message), 1000),
    )


def floor(
    clients: int,
    words: int,
    costs: Costs | None = None,
    *,
    rounds: int = RUN_SEED_BATCH,
    batch: int = RUN_SEED_BATCH,
) -> dict:
    """Set-up and per-round floors (CPU seconds) at K = ``clients``, a reply of ``words``,
    in a run of ``rounds`` rounds sharing seeds ``batch`` rounds at a time (per round: the
    batches' sealing and opening spread over the rounds)."""
    params = SecAggConfig().graph_parameters(clients)
    if params is None:  # the complete graph: k = K − 1, a strict majority
        k, t, verified = clients - 1, SecAggConfig().effective_threshold(clients), None
    else:
        k, t, verified = params.degree, params.threshold, clients
    verified = t if verified is None else verified
    size = min(batch, rounds)
    c = costs or measure(words, clients, size)
    edges = clients * k  # directed: each end of each edge
    per_round = -(-rounds // size) / rounds  # batches sealed per round of the run
    parts = {
        "pair masks": edges * c.keystream,
        "seal shares": edges * c.seal * per_round,
        "open shares": edges * c.open * per_round,
        "self masks": 2 * clients * (c.keystream + c.hkdf),
        "signatures": clients * c.sign,
        "verifications": verified * c.verify,
    }
    return {
        "clients": clients, "degree": k, "threshold": t, "words": words,
        "setup_floor": edges * c.x25519, "round_floor": sum(parts.values()),
        "round_parts": parts, "costs": c,
    }  # fmt: skip


def report(cases: tuple[tuple[str, int, int], ...] | None = None) -> str:
    """The floors of the cost study's cases: (name, K, reply words)."""
    cases = cases or (("a", 100, 32), ("b", 1000, 32), ("c/d", 5, 16))
    lines = [
        "case      K     k    t  words  set-up floor s  round floor ms  (largest parts, ms)",
    ]
    for name, clients, words in cases:
        f = floor(clients, words)
        top = sorted(f["round_parts"].items(), key=lambda kv: -kv[1])[:3]
        parts = ", ".join(f"{k} {v * 1e3:.2f}" for k, v in top)
        lines.append(
            f"{name:<6}{clients:>5}{f['degree']:>6}{f['threshold']:>5}{words:>7}"
            f"{f['setup_floor']:>16.3f}{f['round_floor'] * 1e3:>16.3f}  ({parts})"
        )
    c = measure(32, 100)
    lines.append(
        "per call, µs: "
        + ", ".join(f"{k} {v * 1e6:.2f}" for k, v in c.__dict__.items())
        + f"  (load {open('/proc/loadavg').read().split()[0]})"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
