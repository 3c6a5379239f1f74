"""The sequences the 1 % draft leak really needs on the tiny model, the draft's law known (the
``certify engine`` modes): measured for our family's directional e-values, the likelihood-ratio
e-value and the Neyman–Pearson test, beside the information bound of ``leak_limit.py``.

The planted leak (as ``leak_limit.py``): the server samples from m = (1 − λ)·p + λ·q, λ = 0.01,
p the tiny model's float32 law at T = 1, q its bfloat16 copy with the logits divided by 1.5 (the
transformers assistant of ``certify engine``, whose law the modes give the family: the draft-leak
e-value runs).  Sequences of 16 tokens after the engine modes' prompt (``certify.engine.modes.
DEFAULT_PROMPT``).

Simulation (``--pool``): a pool of sequences drawn from m with the model run for every token (a
batch shares the prompt's prefill); at each token the exact laws p_t, q_t and p_{t−1} over the whole
vocabulary (float64) give each test's per-token factor, summed per sequence:

- our draft-leak e-value: Σ_t log(1 − λ' + λ'·q_t(x)/p_t(x)) − log(1 + 2λ'η) for each λ' of
  ``sequence_records.LAMBDAS``; position shift: the same with p_{t−1} (t ≥ 1); temperature:
  θ·g(x) − K_t(θ) − log(1 + η·a_t(θ)) for each θ of ``THETAS`` (g = max(log p, LOG_FLOOR), K the
  cumulant generating function, a_t the factor's range: ``sequence_scores``' tolerance);
- the likelihood ratio Λ = Σ_t log m_t(x)/p_t(x).

Also, per sequence, each column's sum of its exact conditional means under m given the token's
prefix (the sum over the whole vocabulary at every position), and Σ_t E_{p_t}[log m_t/p_t].

Power at N (``powers``): a run's statistics are sums over N i.i.d. sequences, taken as normal with N
times the per-sequence mean and covariance (the central limit theorem over N sequences; N is in the
thousands here).  The means are the pool's averages of the exact conditional means (Rao–Blackwell:
unbiased, and far less noisy than the sampled sums at a drift of ~0.005 nats a sequence against a
standard deviation ~10× larger), the covariance the sampled sums'.  From those, exactly as
``sequence_scores`` computes them: the family (α, η = 10^-3 as ``certify engine``, 4 directional tests
at 3α/16 each) rejects when any of the three simulated directional e-values (mean over its grid of
exp of its sums) reaches 3α/16's reciprocal; the LR e-value when Λ ≥ log(1/α); the Neyman–Pearson
test when Λ exceeds its null law's 1 − α quantile at N (null mean Σ_t E_p[log m_t/p_t] and variance
from the pool reweighted to the null by e^{−Λ}, exact in expectation).  Not simulated: the truncation
e-value (it fires on fewer tokens outside the nuclei than p gives; the leak of the flatter q gives
more) and the omnibus KS rows (the leak moves a token's PIT CDF by at most its TV, 0.01·TV(p_t, q_t);
the rows' detectable deviation at the N found is stated beside it).  The bound of ``leak_limit.py``:
N·D ≥ d(1 − β ‖ α), D = E_m[Λ] per sequence (from the same conditional means).  The pool's own
uncertainty: every N recomputed on bootstrap resamples of the pool (95 % interval).

Run: ``python benchmarks/leak_need.py --pool 2048 [--batch 128] [--seed S]`` (appends the pool's
per-sequence sums to benchmarks/raw/leak_need_pool.npz after every batch; about 1 s a sequence on one
busy core) and ``--analyse`` (reads the pool, writes raw/leak_need_alpha<α>_power<1 − β>.json and
prints it: the numbers of docs/guarantees.md and benchmarks/DEPLOYMENT.md).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from spectr_gbv.oracle.sequence_records import LAMBDAS, LOG_FLOOR, THETAS

HERE = Path(__file__).resolve().parent
POOL = HERE / "raw" / "leak_need_pool.npz"
WEIGHT = 0.01
FLATTEN = 1.5
N_NEW = 16
TOLERANCE = 1e-3
G, NL = len(THETAS), len(LAMBDAS)
# per-sequence columns: temperature (G), leak (NL), shift (NL), Λ; then the same columns' sums of
# their exact conditional means under m given each token's prefix (Rao–Blackwell), then Σ_t E_p[Λ_t]
COLS = G + 2 * NL + 1


def simulate(n_seq: int, batch: int, seed: int, save=None) -> np.ndarray:
    import torch

    from spectr_gbv.certify.engine.modes import DEFAULT_PROMPT
    from spectr_gbv.gpu_backend.models.weights import load_causal_lm

    torch.manual_seed(seed)
    target, tok = load_causal_lm("tiny", dtype="float32")
    draft = load_causal_lm("tiny", dtype="bfloat16")[0]
    prompt = torch.tensor([tok(DEFAULT_PROMPT).input_ids])
    th = torch.tensor(THETAS, dtype=torch.float64)
    lam = torch.tensor(LAMBDAS, dtype=torch.float64)
    eta = TOLERANCE
    out = []
    with torch.inference_mode():
        pre_t = target(prompt, use_cache=True)
        pre_d = draft(prompt, use_cache=True)
        for start in range(0, n_seq, batch):
            B = min(batch, n_seq - start)
            t0 = time.time()
            cache_t = _repeat(pre_t.past_key_values, B)
            cache_d = _repeat(pre_d.past_key_values, B)
            lt = pre_t.logits[:, -1].double().expand(B, -1)
            ld = pre_d.logits[:, -1].double().expand(B, -1)
            stats = torch.zeros(B, 2 * COLS + 1, dtype=torch.float64)
            logp_prev = None
            for t in range(N_NEW):
                logp = torch.log_softmax(lt, -1)
                logq = torch.log_softmax(ld / FLATTEN, -1)
                logm = torch.logsumexp(torch.stack([logp + math.log1p(-WEIGHT), logq + math.log(WEIGHT)]), 0)
                x = torch.multinomial(logm.exp(), 1)  # [B, 1]
                lpx = logp.gather(1, x)[:, 0]
                # temperature e-value factor, with the tolerance's penalty
                g = logp.clamp_min(LOG_FLOOR)
                K = torch.stack([torch.logsumexp(logp + a * g, -1) for a in THETAS], 1)  # [B, G]
                gmin, gmax = g.min(-1).values[:, None], g.max(-1).values[:, None]
                hi = torch.exp(torch.maximum(th * gmin, th * gmax) - K)
                lo = torch.exp(torch.minimum(th * gmin, th * gmax) - K)
                m = logm.exp()
                tpen = torch.log1p(eta * (hi - lo))
                stats[:, :G] += th * g.gather(1, x) - K - tpen
                stats[:, COLS:COLS + G] += th * (m * g).sum(-1, keepdim=True) - K - tpen
                pen = torch.log1p(2 * lam * eta)
                ratio = torch.exp(logq - logp)
                r = ratio.gather(1, x)[:, 0]
                stats[:, G:G + NL] += torch.log((1 - lam) + lam * r[:, None]) - pen
                for j, a in enumerate(LAMBDAS):
                    stats[:, COLS + G + j] += (m * torch.log((1 - a) + a * ratio)).sum(-1) - pen[j]
                if logp_prev is not None:
                    ratio = torch.exp(logp_prev - logp)
                    rs = ratio.gather(1, x)[:, 0]
                    stats[:, G + NL:G + 2 * NL] += torch.log((1 - lam) + lam * rs[:, None]) - pen
                    for j, a in enumerate(LAMBDAS):
                        stats[:, COLS + G + NL + j] += (m * torch.log((1 - a) + a * ratio)).sum(-1) - pen[j]
                llr = logm - logp
                stats[:, COLS - 1] += llr.gather(1, x)[:, 0]
                stats[:, 2 * COLS - 1] += (m * llr).sum(-1)
                stats[:, 2 * COLS] += (logp.exp() * llr).sum(-1)
                logp_prev = logp
                lt = target(x, past_key_values=cache_t, use_cache=True).logits[:, -1].double()
                ld = draft(x, past_key_values=cache_d, use_cache=True).logits[:, -1].double()
            out.append(stats.numpy())
            if save is not None:
                save(out[-1])
            print(f"{time.strftime('%H:%M:%S')} {start + B}/{n_seq} sequences ({time.time() - t0:.0f} s a batch)",
                  flush=True)
    return np.concatenate(out)


def _repeat(cache, B: int):
    import copy

    c = copy.deepcopy(cache)
    c.batch_repeat_interleave(B)
    return c


def logmeanexp(x: np.ndarray, axis: int = -1) -> np.ndarray:
    top = x.max(axis=axis, keepdims=True)
    return (top + np.log(np.exp(x - top).mean(axis=axis, keepdims=True))).squeeze(axis)


def estimates(pool: np.ndarray) -> dict:
    """Per-sequence moments from the pool (module doc): the mean of every column from its exact
    conditional means (Rao–Blackwell: E[Σ_t f(x_t)] = E[Σ_t E_m[f | prefix_t]], far less noisy than
    the sampled sums), the covariance of the sampled sums, and Λ's null mean and variance by the
    importance weights e^{−Λ}."""
    S, RB = pool[:, :COLS], pool[:, COLS:2 * COLS]
    w = np.exp(-(S[:, -1] - S[:, -1].max()))
    w /= w.sum()
    mu0 = float((w * pool[:, 2 * COLS]).sum())
    var0 = float((w * (S[:, -1] - (w * S[:, -1]).sum()) ** 2).sum())
    return {"mu": RB.mean(axis=0), "cov": np.cov(S, rowvar=False) + 1e-12 * np.eye(COLS), "mu0": mu0,
            "var0": var0}


def powers(est: dict, N: float, alpha: float, z: np.ndarray) -> dict:
    """Power at N sequences: the sums over N i.i.d. sequences are normal with N times the
    per-sequence mean and covariance (central limit theorem over N sequences; ``z``: standard
    normal draws [R, COLS], the same at every N)."""
    from scipy.stats import norm

    a_dir = alpha * 0.75 / 4
    mu, cov = est["mu"], est["cov"]
    L = np.linalg.cholesky(cov)
    S = N * mu + math.sqrt(N) * z @ L.T
    rej = {"temperature": logmeanexp(S[:, :G]) >= math.log(1 / a_dir),
           "draft leak": logmeanexp(S[:, G:G + NL]) >= math.log(1 / a_dir),
           "position shift": logmeanexp(S[:, G + NL:G + 2 * NL]) >= math.log(1 / a_dir)}
    out = {k: float(v.mean()) for k, v in rej.items()}
    out["family (directional)"] = float((rej["temperature"] | rej["draft leak"] | rej["position shift"]).mean())
    sd1, sd0 = math.sqrt(cov[-1, -1]), math.sqrt(est["var0"])
    out["LR e-value"] = float(norm.sf((math.log(1 / alpha) - N * mu[-1]) / (math.sqrt(N) * sd1)))
    crit = N * est["mu0"] + norm.isf(alpha) * math.sqrt(N) * sd0
    out["oracle"] = float(norm.sf((crit - N * mu[-1]) / (math.sqrt(N) * sd1)))
    return out


def boot_powers(pool: np.ndarray, est: dict, N: int, alpha: float, runs: int, null_runs: int, rng,
                oracle: bool = True) -> dict:
    """Power at N by drawing N sequences of the pool with replacement (its empirical law, heavy tail
    included), each column shifted so that its mean is the exact conditional means' (``estimates``);
    the Neyman–Pearson critical value from ``null_runs`` sums of N sequences drawn with the
    importance weights e^{−Λ}, Λ's mean shifted to the null mean."""
    a_dir = alpha * 0.75 / 4
    S = pool[:, :COLS] - pool[:, :COLS].mean(axis=0) + est["mu"]
    lam = pool[:, COLS - 1]
    w = np.exp(-(lam - lam.max()))
    w /= w.sum()
    lam0 = lam - (w * lam).sum() + est["mu0"]
    cdf = np.cumsum(w)
    null = np.empty(null_runs if oracle else 1)
    step = max(1, 4_000_000 // N)
    for i in range(0, null.size if oracle else 0, step):
        k = min(step, null_runs - i)
        idx = np.minimum(np.searchsorted(cdf, rng.random((k, N)) * cdf[-1]), lam0.size - 1)
        null[i:i + k] = lam0[idx].sum(axis=1)
    crit = float(np.quantile(null, 1 - alpha)) if oracle else math.inf
    hits = {"temperature": 0, "draft leak": 0, "position shift": 0, "family (directional)": 0, "LR e-value": 0,
            "oracle": 0}
    step = max(1, 4_000_000 // (N * 4))
    for i in range(0, runs, step):
        k = min(step, runs - i)
        T = np.zeros((k, COLS))
        for j in range(N):  # N draws a run, summed column by column (memory: k × COLS)
            T += S[rng.integers(S.shape[0], size=k)]
        rej = {"temperature": logmeanexp(T[:, :G]) >= math.log(1 / a_dir),
               "draft leak": logmeanexp(T[:, G:G + NL]) >= math.log(1 / a_dir),
               "position shift": logmeanexp(T[:, G + NL:G + 2 * NL]) >= math.log(1 / a_dir)}
        rej["family (directional)"] = rej["temperature"] | rej["draft leak"] | rej["position shift"]
        rej["LR e-value"] = T[:, -1] >= math.log(1 / alpha)
        rej["oracle"] = T[:, -1] > crit
        for key, v in rej.items():
            hits[key] += int(v.sum())
    return {k: v / runs for k, v in hits.items()}


def needed_boot(pool: np.ndarray, est: dict, alpha: float, power: float, runs: int, null_runs: int, rng,
                start: dict) -> dict:
    """The N (to 2 %) at which each test's bootstrap power (``boot_powers``) reaches ``power``,
    searched around ``start`` (the normal approximation's N)."""
    out = {}
    for key in ("family (directional)", "LR e-value", "oracle"):
        if not start.get(key):
            out[key] = None
            continue
        lo, hi = start[key] / 2, start[key] * 1.3
        def pw(n):
            return boot_powers(pool, est, int(n), alpha, runs, null_runs, rng, key == "oracle")[key]

        while pw(hi) < power:
            lo, hi = hi, hi * 1.5
        while hi / lo > 1.02:
            mid = math.sqrt(lo * hi)
            if pw(mid) >= power:
                hi = mid
            else:
                lo = mid
        out[key] = float(hi)
    return out


def needed(est: dict, alpha: float, power: float, z: np.ndarray) -> dict:
    """The smallest N (on a grid of ratio 1.01) at which each test's power reaches ``power``."""
    grid = np.exp(np.arange(math.log(50), math.log(200_000), math.log(1.01)))
    out = {}
    for key in ("family (directional)", "draft leak", "temperature", "position shift", "LR e-value", "oracle"):
        lo, hi = 0, len(grid) - 1
        if powers(est, grid[hi], alpha, z)[key] < power:
            out[key] = None
            continue
        while lo < hi:  # power is increasing in N for these tests (common draws z)
            mid = (lo + hi) // 2
            if powers(est, grid[mid], alpha, z)[key] >= power:
                hi = mid
            else:
                lo = mid + 1
        out[key] = float(grid[lo])
    return out


def analyse(alpha: float, power: float, draws: int, boots: int, seed: int, chain: int = 0,
            boot_runs: int = 0) -> dict:
    from scipy.special import rel_entr

    from spectr_gbv.oracle.sequence_test import detectable_deviation

    def binary_kl(a: float, b: float) -> float:  # d(a ‖ b), as leak_limit.py
        return float(rel_entr(a, b) + rel_entr(1 - a, 1 - b))

    pool = np.load(POOL)["stats"] if chain == 0 else chain_pool(chain, seed)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((draws, COLS))
    est = estimates(pool)
    need_d = binary_kl(power, alpha)
    res = {"pool": int(pool.shape[0]), "alpha": alpha, "power": power, "draws": draws,
           "D": float(est["mu"][-1]), "D_sampled": float(pool[:, COLS - 1].mean()),
           "D_se_sampled": float(pool[:, COLS - 1].std(ddof=1) / math.sqrt(pool.shape[0])),
           "null_mean": est["mu0"], "sd_alt": math.sqrt(est["cov"][-1, -1]), "sd_null": math.sqrt(est["var0"]),
           "mean_per_column": est["mu"].tolist(), "sd_per_column": np.sqrt(np.diag(est["cov"])).tolist()}
    res["bound"] = need_d / res["D"]
    res["needed"] = needed(est, alpha, power, z)
    boot = []
    for _ in range(boots):  # the pool's own uncertainty
        idx = rng.integers(pool.shape[0], size=pool.shape[0])
        e = estimates(pool[idx])
        n = needed(e, alpha, power, z[: max(2000, draws // 5)])
        n["bound"] = need_d / float(e["mu"][-1])
        boot.append(n)
    res["interval95"] = {k: [float(np.nanpercentile([b[k] or np.nan for b in boot], q)) for q in (2.5, 97.5)]
                         for k in boot[0]} if boot else {}
    if boot_runs:
        res["needed_bootstrap"] = needed_boot(pool, est, alpha, power, boot_runs, 20_000, rng, res["needed"])
        res["bootstrap_runs"] = boot_runs
    n_fam = res["needed"]["family (directional)"]
    if n_fam:
        res["omnibus_detectable_d"] = detectable_deviation(int(n_fam * N_NEW), alpha / 16)
    return res


def chain_pool(n_seq: int, seed: int) -> np.ndarray:
    """A pool in the layout of ``simulate`` for the Markov chain's 1 % leak of
    benchmarks/sequence_power.py (V = 512, its draft, prompt token 0, whole laws, η = 0): the leak
    e-value's and Λ's columns (the temperature and shift columns constant, never rejecting), to
    check ``powers`` against that script's direct simulation (``--chain-check``)."""
    from spectr_gbv.oracle.sequence_simulation import MarkovChain, sample_many

    chain = MarkovChain(512, seed=0)
    draft = chain.draft(noise=3.0)
    P, Q = chain.probs, draft.probs
    M = (1 - WEIGHT) * P + WEIGHT * Q
    lam = np.asarray(LAMBDAS)
    F = np.log((1 - lam) + lam * (Q / P)[:, :, None])  # [V, V, Λ]
    llr = np.log(M / P)
    rng = np.random.default_rng(seed)
    first = np.zeros(n_seq, dtype=np.int64)
    X = sample_many(chain, first, N_NEW, rng, ("leak", WEIGHT), draft)
    prev = np.concatenate([first[:, None], X[:, :-1]], axis=1)
    pool = np.full((n_seq, 2 * COLS + 1), -1e3)
    pool[:, G:G + NL] = F[prev, X].sum(axis=1)
    pool[:, COLS - 1] = llr[prev, X].sum(axis=1)
    pool[:, COLS + G:COLS + G + NL] = np.einsum("vx,vxl->vl", M, F)[prev].sum(axis=1)
    pool[:, 2 * COLS - 1] = (M * llr).sum(axis=1)[prev].sum(axis=1)
    pool[:, 2 * COLS] = (P * llr).sum(axis=1)[prev].sum(axis=1)
    return pool


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pool", type=int, default=0, help="sequences to add to the pool")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--analyse", action="store_true")
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--power", type=float, default=0.99)
    ap.add_argument("--draws", type=int, default=20000, help="normal draws for the e-values' power")
    ap.add_argument("--boots", type=int, default=100, help="bootstrap resamples of the pool (its uncertainty)")
    ap.add_argument("--boot-runs", type=int, default=2000,
                    help="runs a point of the direct bootstrap (boot_powers); 0: the normal approximation only")
    ap.add_argument("--chain-check", type=int, default=0,
                    help="analyse a pool of this many sequences of sequence_power.py's chain leak instead (chain_pool)")
    args = ap.parse_args()
    if args.pool:
        import torch

        torch.set_num_threads(1)
        def save(stats):  # after every batch: an interrupted run keeps what it drew
            if POOL.exists():
                old = np.load(POOL)
                stats = np.concatenate([old["stats"], stats])
                seeds = sorted(set(old["seeds"].tolist()) | {args.seed})
            else:
                seeds = [args.seed]
            POOL.parent.mkdir(exist_ok=True)
            np.savez(POOL, stats=stats, seeds=np.array(seeds))
            print(f"pool: {stats.shape[0]} sequences", flush=True)

        simulate(args.pool, args.batch, args.seed, save)
    if args.analyse or args.chain_check:
        res = analyse(args.alpha, args.power, args.draws, args.boots, args.seed, args.chain_check, args.boot_runs)
        print(json.dumps(res, indent=1))
        name = "leak_need_chain" if args.chain_check else "leak_need"
        (HERE / "raw" / f"{name}_alpha{args.alpha:g}_power{args.power:g}.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
