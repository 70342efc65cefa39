"""DMFT against finite-d GD (THEORY §1, §3), discretization and finite-size convergence, speed."""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft

from .bench_success_bounded import weighted_line

NAME = "dmft"

from dmft.activations import gelu  # noqa: E402


def tanh_problem():
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, eps: jnp.tanh(2 * z[0]) + 0.3 * eps[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.array([[0.5]]), overlap=jnp.array([[0.3]])),
    )


def easy_hard_problem():
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] + (z[1] ** 2 - 1) + 0.2 * e[0], k=2, noise_dim=1),
        student=dmft.TwoLayer(activation=gelu, width=2, second_layer=jnp.array([1.0, -0.5])),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))),
    )


def phase_retrieval_problem(act):
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=act, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(1), overlap=jnp.zeros((1, 1))),
    )


def _timed(fn, *a, **k):
    t0 = time.perf_counter()
    out = fn(*a, **k)
    jax.block_until_ready(jax.tree.leaves(out))
    return out, time.perf_counter() - t0


DMFT_KEYS = 8
TEST_SAMPLES = 160_000
QUANTITIES = ("train_error", "test_error", "overlap", "gram")


def _dmft_keys(problem, paths, keys=DMFT_KEYS, **kw):
    """``keys`` independent DMFT solves with ``paths // keys`` paths each (one compilation): per quantity the array
    (keys, T + 1, ...) of the keys' curves. The DMFT's error bar is their spread (session 55: 8 keys, was 4 — a
    4-key s.e. has 3 dof, so "3 s.e." covered 94 %, not 99.7 %; until session 19 two keys). The per-path s.e. is
    not used: the paths interact through the kernels (benchmarks/bench_dmft_cost.py). Measured (session 55, tanh
    m = 1, 16 keys each at 2 500 … 40 000 paths per key): no finite-path bias of M, train or test error at t = 40
    beyond the keys' spread. The test error on a test set of ``TEST_SAMPLES`` per key (docs/dmft.md, "Test error
    estimator": its variance ≈ 9× smaller at T = 25 in the m = 2 case, training side bit-identical)."""
    sols = [dmft.solve(problem, paths=paths // keys, key=jax.random.key(11 + i), test_samples=TEST_SAMPLES, **kw)
            for i in range(keys)]
    out = {q: np.stack([np.asarray(getattr(a, q)) for a in sols]) for q in QUANTITIES}
    out["_curv"] = np.max([np.asarray(a.max_step_curvature) for a in sols], axis=0)
    return out


def _seeds(sim) -> dict:
    """Per-seed curves (seeds, T + 1, ...) of a ``dmft.simulate`` result."""
    return {q: np.asarray(getattr(sim, q + "_seeds")) for q in QUANTITIES}


def _at(curves: dict, times) -> dict:
    """The stored form: each quantity at the report times, as lists (samples, len(times), ...)."""
    return {q: np.asarray(v)[:, list(times)].tolist() for q, v in curves.items() if not q.startswith("_")}


def _pairs(A, B, quantities, times):
    """(q, idx, t, a, b): the two samples (DMFT keys / GD seeds, or GD seeds at two d) of each quantity at each time,
    from the stored form {q: (samples, len(times), ...)}."""
    for q, idx in quantities:
        X, Y = np.asarray(A[q], float), np.asarray(B[q], float)
        for j, t in enumerate(times):
            yield q, idx, t, X[(slice(None), j) + tuple(idx)], Y[(slice(None), j) + tuple(idx)]


def curve_rows(label, times, keys, seeds, quantities, allowance, d) -> list:
    """DMFT against GD at the report ``times``: per (quantity, t) the DMFT keys' mean against the GD seeds' mean,
    tolerance = the issue's stated allowance for the quantity + Welch t (keys and seeds are independent samples;
    ``bench_first_phase.welch_row``). ``keys``/``seeds``: {q: (samples, len(times), ...)} (the stored form)."""
    from .bench_first_phase import welch_row
    return [dict(welch_row(f"{label}: {q}{list(idx) if idx else ''} at t={t}", a, b, d, allowance[q],
                           f"stated allowance {allowance[q]:g}"), note=f"DMFT: {a.size} keys")
            for q, idx, t, a, b in _pairs(keys, seeds, quantities, times)]


def every_step_row(label, keys, seeds, q, idx, allowance, d) -> dict:
    """The issue's "at every step" reading: over all steps t, the largest excess of |DMFT − GD| over the step's Welch
    tolerance; agrees when it does not exceed the stated allowance (a per-step 0.9973 coverage over T + 1 correlated
    steps: somewhat below that jointly — the note gives the largest |DMFT − GD| and where)."""
    from .bench_first_phase import welch_tolerance
    K, S = np.asarray(keys[q], float), np.asarray(seeds[q], float)
    K, S = K[(slice(None), slice(None)) + tuple(idx)], S[(slice(None), slice(None)) + tuple(idx)]
    diff = np.abs(K.mean(0) - S.mean(0))
    w = np.array([welch_tolerance(K[:, t], S[:, t])[0] for t in range(K.shape[1])])
    w = np.where(np.isfinite(w), w, 0.0)               # t = 0: both sides exactly the initial condition
    t_ex, t_max = int(np.argmax(diff - w)), int(np.argmax(diff))
    excess = max(float(np.max(diff - w)), 0.0)
    return dict(quantity=f"{label}: {q}{list(idx) if idx else ''} at every step t = 0…{K.shape[1] - 1}: max_t of |DMFT − GD| "
                         "beyond the step's Welch tolerance (0 when every step is within it)", theory=0.0, simulation=excess,
                sim_stderr=None, d=d, seeds=int(S.shape[0]), tolerance=float(allowance),
                tolerance_rule="≤ the stated allowance", agree=bool(excess <= allowance),
                note=f"largest |DMFT − GD| {diff[t_max]:.2g} at t = {t_max} (Welch tolerance there {w[t_max]:.2g}); largest "
                     f"|DMFT − GD| − tolerance {float(np.max(diff - w)):.2g} at t = {t_ex}; DMFT {K.shape[0]} keys, GD "
                     f"{S.shape[0]} seeds")


def finite_size_rows(label, times, big, small, quantities, allowance, d_big, d_small) -> list:
    """The stated allowance against a measured finite-size shift: GD at d (theory column) against GD at d/2
    (simulation column), independent seeds; their difference is the O(1/d) bias left at d if the bias is c/d.
    Agrees when it is within the allowance + Welch t (``bench_first_phase.welch_row``): the allowance covers what
    the data resolve."""
    from .bench_first_phase import welch_row
    return [dict(welch_row(f"{label}: finite-size shift of GD {q}{list(idx) if idx else ''} at t={t}: GD at d={d_big} (theory "
                           f"column) vs d={d_small} (simulation; the difference is the 1/d bias left at d={d_big}), within "
                           "the stated allowance", a, b, f"{d_small} vs {d_big}", allowance[q],
                           f"stated allowance {allowance[q]:g}"), reference="finite d")
            for q, idx, t, a, b in _pairs(big, small, quantities, times)]


# the issue's / THEORY §1's stated agreement: tanh "3 decimals (errors) and 0.01 (overlap)"; GeLU m = 2 "a stated
# finite-size allowance" (THEORY's prototype saw 0.007 / 0.009 / 0.02 / 0.09); phase retrieval: first phase
ALLOW_A = dict(train_error=1e-3, test_error=1e-3, overlap=0.01)
ALLOW_B = dict(train_error=0.01, test_error=0.01, overlap=0.02, gram=0.05)
ALLOW_C = dict(train_error=0.02, test_error=0.02, gram=0.05)   # gram: session 55 (stored since; as ALLOW_B's)
QA = [("train_error", ()), ("test_error", ()), ("overlap", (0, 0))]
QC = [("train_error", ()), ("test_error", ()), ("gram", (0, 0))]
QB = [("train_error", ()), ("test_error", ()), ("overlap", (0, 0)), ("overlap", (0, 1)), ("gram", (0, 0)), ("gram", (1, 1)),
      ("gram", (0, 1))]


def tanh_rows(sA, dat) -> list:
    """Section A's rows from its stored per-key and per-seed curves (every step stored)."""
    at = {k: {q: np.asarray(v)[:, sA["times"]] for q, v in dat[k].items()} for k in ("dmft_keys", "gd_seeds")}
    rows = curve_rows("tanh m=1", sA["times"], at["dmft_keys"], at["gd_seeds"], QA, ALLOW_A, sA["d"])
    return rows + [every_step_row("tanh m=1", dat["dmft_keys"], dat["gd_seeds"], q, idx, ALLOW_A[q], sA["d"]) for q, idx in QA]


def gelu_rows(sB, dat) -> list:
    """Section B's rows from its stored per-key and per-seed values at the report times."""
    rows = curve_rows("GeLU m=2 easy+hard", sB["times"], dat["dmft_keys"], dat["gd_seeds"], QB, ALLOW_B, sB["d"])
    rows.append(dict(quantity="GeLU m=2: max_t |hard overlap| (DMFT must be exactly 0)", theory=dat["dmft_max_hard_overlap"],
                     simulation=dat["gd_max_hard_overlap"], sim_stderr=None, d=sB["d"], seeds=sB["seeds"], tolerance=0.0,
                     agree=dat["dmft_max_hard_overlap"] == 0.0))
    return rows + finite_size_rows("GeLU m=2 easy+hard", sB["times"], dat["gd_seeds"], dat["gd_seeds_small"], QB, ALLOW_B,
                                   sB["d"], sB["d_small"])


def key_consistency_row(label, keys, quantities) -> dict:
    """Are the DMFT keys one i.i.d. Monte Carlo sample? Per key, quantity and stored time, the leave-one-out
    prediction t = (x_k − mean of the others)/(sd of the others·√(1 + 1/(K − 1))), Student t with K − 2 dof for
    normal keys; flagged beyond the two-sided 0.9973 quantile with a Bonferroni correction over all the tests (keys ×
    quantities × times; conservative, the tests are correlated). Session 55: in the phase-retrieval quadratic case
    one key of eight (25 000 paths) departs collectively from t ≈ 55 (train error 0.64 at t = 100 against
    0.18–0.20), which the spread-based s.e. absorbs (test error 3.5 ± 1.3) instead of flagging."""
    from scipy import stats

    worst, where, n = 0.0, "", 0
    for q, idx in quantities:
        X = np.asarray(keys[q], float)
        X = X[(slice(None), slice(None)) + tuple(idx)]
        K = X.shape[0]
        for k in range(K):
            o = np.delete(X, k, axis=0)
            sd = o.std(axis=0, ddof=1) * np.sqrt(1 + 1 / (K - 1))
            t = np.abs(X[k] - o.mean(0)) / np.where(sd > 0, sd, np.inf)
            n += t.size
            j = int(np.argmax(t))
            if t[j] > worst:
                worst, where = float(t[j]), f"key {k} (seeded key(11 + {k})), {q}{list(idx) if idx else ''}, time index {j} of the stored times"
    K = np.asarray(keys[quantities[0][0]]).shape[0]
    crit = float(stats.t.ppf(1 - (1 - 0.9973) / (2 * n), K - 2))
    return dict(quantity=f"{label}: DMFT key consistency, max leave-one-out |t| over {n} key × quantity × time tests "
                         f"(i.i.d. Monte Carlo keys)", theory=0.0, simulation=worst, sim_stderr=None, d=None, seeds=K,
                tolerance=crit, tolerance_rule=f"Bonferroni two-sided 0.9973 over {n} tests, Student t with {K - 2} dof",
                agree=bool(worst <= crit), reference="self-consistency (Monte Carlo keys)", note=f"largest at {where}")


def curve_section_rows(setting, data) -> list:
    """Every DMFT-vs-GD curve row (sections A–C) from the stored per-key and per-seed values (``reanalyze``, tests)."""
    rows = tanh_rows(setting["tanh_m1"], data["tanh_m1"])
    rows.append(key_consistency_row("tanh m=1", data["tanh_m1"]["dmft_keys"], QA))
    rows += gelu_rows(setting["gelu_m2_easy_hard"], data["gelu_m2_easy_hard"])
    rows.append(key_consistency_row("GeLU m=2 easy+hard", data["gelu_m2_easy_hard"]["dmft_keys"], QB))
    sC = setting["phase_retrieval"]
    for nm in ("quadratic", "GeLU"):
        dat = data[f"phase_retrieval_{nm}"]
        rows += curve_rows(f"phase retrieval {nm}", sC["times"], dat["dmft_keys"], dat["gd_seeds"], QC, ALLOW_C, sC["d"])
        rows.append(key_consistency_row(f"phase retrieval {nm}", dat["dmft_keys"], QC))
        rows.append(dict(quantity=f"phase retrieval {nm}: max_t η·λ_max(D)/δ over DMFT paths (stable < 2)",
                         theory=dat["max_step_curvature"], simulation=None, sim_stderr=None, d=None, seeds=None, tolerance=2.0,
                         agree=bool(dat["max_step_curvature"] < 2)))
    return rows


RESOLVED_SE = 2.0   # a discrepancy counts as measured when |M_GD − M_DMFT| > RESOLVED_SE s.e.


def fss_exponent_row(ds, disc, discse, seeds) -> dict:
    """The finite-size exponent of |M_GD(d) − M_DMFT|: a fit of log|disc| against log d weighted by the
    relative s.e. (δ log|x| = se/|x|), with its s.e., compared with −1 at 3 s.e. — only when at least three d
    resolve the discrepancy (|disc| > ``RESOLVED_SE`` s.e.); otherwise "noise-dominated, not assessed"
    (agree None). Session 51 referee audit: the unweighted fit over signed discrepancies within 1.2 s.e. of 0
    at three of four d (−1.36, tolerance 0.6) passed in 51 % of simulated runs with *no* finite-size bias."""
    ds, disc, discse = (np.asarray(v, float) for v in (ds, disc, discse))
    ok = np.abs(disc) > RESOLVED_SE * discse
    base = dict(quantity="finite size: exponent of |M_GD(d) − M_DMFT| vs d", theory=-1.0, d=int(ds[-1]), seeds=seeds)
    if ok.sum() < 3:
        slope = float(np.polyfit(np.log(ds), np.log(np.abs(disc)), 1)[0])
        return dict(base, quantity=base["quantity"] + f" (noise-dominated: {int(ok.sum())} of {ds.size} d resolve the "
                    f"discrepancy at {RESOLVED_SE:g} s.e.; unweighted slope, not assessed)", simulation=slope,
                    sim_stderr=None, tolerance=None, agree=None)
    (_, slope), cov, _ = weighted_line(np.log(ds[ok]), np.log(np.abs(disc[ok])), discse[ok] / np.abs(disc[ok]))
    slope, se = float(slope), float(np.sqrt(cov[1, 1]))
    return dict(base, quantity=base["quantity"] + f" (weighted fit over the {int(ok.sum())} resolved d)", simulation=slope,
                sim_stderr=se, tolerance="3 s.e.", agree=bool(abs(slope + 1) < 3 * se))


LIMIT_QUANTITY = "finite size: d → ∞ limit of M_GD(d) (weighted fit a + c/d over d) vs M_DMFT"


def fss_limit_row(ds, disc, gd_se, ref_se, seeds) -> dict:
    """DMFT as the d → ∞ limit of GD, assessed: a weighted fit disc(d) = b + c/d of the discrepancies with their GD
    s.e. (independent over d); b is compared with 0 at 3 s.e., where its s.e. adds the reference's own Monte Carlo
    s.e. ``ref_se`` (common to every d, so it shifts b as a whole and is not part of the fit). The fitted 1/d
    coefficient c ± s.e. is recorded: it bounds the finite-size correction when the exponent cannot be resolved."""
    ds, disc, gd_se = (np.asarray(v, float) for v in (ds, disc, gd_se))
    (b, c), cov, chi2 = weighted_line(1 / ds, disc, gd_se)
    se = float(np.hypot(np.sqrt(cov[0, 0]), ref_se))
    return dict(quantity=LIMIT_QUANTITY, theory=0.0, simulation=float(b), sim_stderr=se, d=f"{int(ds[0])}…{int(ds[-1])} → inf",
                seeds=seeds, tolerance=3 * se, agree=bool(abs(b) <= 3 * se), coefficient_c=float(c),
                coefficient_c_stderr=float(np.sqrt(cov[1, 1])), chi2=chi2, dof=int(ds.size - 2))


def reanalyze(res: dict) -> dict:
    """The finite-size exponent and limit rows again from the stored per-d discrepancy rows (``fss_exponent_row``,
    ``fss_limit_row``), and the curve rows of sections A–C from the stored per-key and per-seed values
    (``curve_section_rows``); every other row is kept (no DMFT or GD is rerun)."""
    per = [r for r in res["accuracy"] if r["quantity"].startswith("finite size: M_GD − M_DMFT at t=40, d=")]
    seeds = next(r["seeds"] for r in res["accuracy"] if r["quantity"].startswith("finite size: exponent"))
    args = [r["d"] for r in per], [r["simulation"] for r in per]
    new = {"finite size: exponent": fss_exponent_row(*args, [r["sim_stderr"] for r in per], seeds=seeds)}
    if all("gd_stderr" in r for r in per):      # runs before session 52 stored the combined s.e. only
        new[LIMIT_QUANTITY] = fss_limit_row(*args, [r["gd_stderr"] for r in per],
                                            res["setting"]["finite_size"]["dmft_M_stderr"], seeds=seeds)
    acc = [next((v for k, v in new.items() if r["quantity"].startswith(k)), r) for r in res["accuracy"]]
    if "tanh_m1" in res.get("data", {}):        # runs since session 55 store the per-key and per-seed values
        first = next(i for i, r in enumerate(acc) if r["quantity"].startswith("η→0"))   # sections D, E follow A–C
        acc = curve_section_rows(res["setting"], res["data"]) + acc[first:]
    return dict(res, accuracy=acc)


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"  # standard/quick share CPU sizes; quick trims further
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    acc, perf, setting, data = [], [], {}, {}
    keys = 4 if tiny else DMFT_KEYS
    setting["dmft_error_bar"] = dict(keys=keys, paths_per_key="paths // keys", keys_seeded="key(11 + i)",
                                     stderr="sd over keys (ddof 1) / sqrt(keys)",
                                     tolerance="Welch t between the DMFT keys and the GD seeds + the stated allowance",
                                     test_samples=TEST_SAMPLES)
    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))

    # ---- A. tanh, m = 1, warm start (THEORY §1 prototype) --------------------------
    # session 55: 8 DMFT keys, 64 GD seeds (were 4 and 4), Welch-t tolerances, every step assessed
    sA = dict(delta=2.0, lr=0.2, steps=40, paths=400_000 if quick else 800_000, d=2000, seeds=64 if quick else 128,
              times=[1, 10, 20, 40])
    if tiny:
        sA.update(paths=20_000, d=1000, seeds=8)
    setting["tanh_m1"] = dict(sA, problem="y=tanh(2z)+0.3eps, sigma=tanh, m=1, a=1 frozen, q0=0.5, M0=0.3, square loss",
                              allowance=ALLOW_A)
    P = tanh_problem()
    dm = _dmft_keys(P, sA["paths"], keys=keys, delta=sA["delta"], lr=sA["lr"], steps=sA["steps"])
    sim = dmft.simulate(P, d=sA["d"], delta=sA["delta"], lr=sA["lr"], steps=sA["steps"], seeds=sA["seeds"],
                        key=jax.random.key(1), test_samples=2**17)
    data["tanh_m1"] = dict(dmft_keys=_at(dm, range(sA["steps"] + 1)), gd_seeds=_at(_seeds(sim), range(sA["steps"] + 1)))
    ax = axes[0, 0]
    ts = np.arange(sA["steps"] + 1)
    for q, c in (("train_error", "C0"), ("test_error", "C1")):
        ax.plot(ts, dm[q].mean(0), c + "-", label=f"{q} DMFT")
        ax.errorbar(ts, np.asarray(getattr(sim, q)), np.asarray(getattr(sim, q + "_stderr")), fmt=c + "o", ms=2, label=f"{q} GD")
    ax.set_title(f"tanh m=1, δ=2, d={sA['d']}, {sA['seeds']} seeds")
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    ax.plot(ts, dm["overlap"].mean(0)[:, 0, 0], "C2-", label="M DMFT")
    ax.errorbar(ts, np.asarray(sim.overlap[:, 0, 0]), np.asarray(sim.overlap_stderr[:, 0, 0]), fmt="C2o", ms=2, label="M GD")
    ax.set_title("overlap")
    ax.legend(fontsize=7)

    # ---- B. m = 2 GeLU, easy + hard direction ---------------------------------------
    # session 55: 8 keys × 25 000 paths (were 4 × 10 000), GD also at d/2 (the allowance against a measured shift)
    sB = dict(delta=3.0, lr=0.1, steps=60, paths=200_000 if quick else 400_000, d=4000, seeds=12 if quick else 24,
              times=[10, 30, 60], d_small=2000)
    if tiny:
        sB.update(paths=20_000, d=1000, seeds=4, d_small=500)
    setting["gelu_m2_easy_hard"] = dict(sB, problem="y=z1+(z2^2-1)+0.2eps, erf-GeLU m=2, a=(1,-0.5) frozen, Q0=I, M0=0",
                                        allowance=ALLOW_B)
    P = easy_hard_problem()
    dm = _dmft_keys(P, sB["paths"], keys=keys, delta=sB["delta"], lr=sB["lr"], steps=sB["steps"])
    simB, t_simB = _timed(dmft.simulate, P, d=sB["d"], delta=sB["delta"], lr=sB["lr"], steps=sB["steps"],
                          seeds=sB["seeds"], key=jax.random.key(2), test_samples=2**16)
    simB2 = dmft.simulate(P, d=sB["d_small"], delta=sB["delta"], lr=sB["lr"], steps=sB["steps"], seeds=sB["seeds"],
                          key=jax.random.key(12), test_samples=2**16)
    hard = float(np.max(np.abs(dm["overlap"][:, :, 1, :])))
    data["gelu_m2_easy_hard"] = dict(dmft_keys=_at(dm, sB["times"]), gd_seeds=_at(_seeds(simB), sB["times"]),
                                     gd_seeds_small=_at(_seeds(simB2), sB["times"]), dmft_max_hard_overlap=hard,
                                     gd_max_hard_overlap=float(np.max(np.abs(np.asarray(simB.overlap[:, 1, :])))))
    ax = axes[0, 2]
    ts = np.arange(sB["steps"] + 1)
    for (i, j), c in (((0, 0), "C0"), ((0, 1), "C1"), ((1, 0), "C2"), ((1, 1), "C3")):
        ax.plot(ts, dm["overlap"].mean(0)[:, i, j], c + "-", label=f"M[{i},{j}] DMFT")
        ax.errorbar(ts, np.asarray(simB.overlap[:, i, j]), np.asarray(simB.overlap_stderr[:, i, j]), fmt=c + "o", ms=2)
    ax.set_title(f"GeLU m=2 easy+hard, d={sB['d']}, {sB['seeds']} seeds")
    ax.legend(fontsize=7)

    # ---- C. phase retrieval, quadratic and GeLU students (first phase) --------------
    sC = dict(delta=2.0, lr=0.02, steps=100, paths=200_000 if quick else 400_000, d=2000, seeds=16 if quick else 32)
    if tiny:
        sC.update(paths=10_000, d=1000, steps=60, seeds=4)
    sC["times"] = [10, sC["steps"] // 2, sC["steps"]]
    setting["phase_retrieval"] = dict(sC, problem="y=z^2, m=1, a=1 frozen, Q0=1, M0=0, square loss; students x^2 and erf-GeLU",
                                      allowance=ALLOW_C)
    ax = axes[1, 0]
    for act, nm, c in ((lambda x: x**2, "quadratic", "C0"), (gelu, "GeLU", "C1")):
        P = phase_retrieval_problem(act)
        dm = _dmft_keys(P, sC["paths"], keys=keys, delta=sC["delta"], lr=sC["lr"], steps=sC["steps"])
        simC = dmft.simulate(P, d=sC["d"], delta=sC["delta"], lr=sC["lr"], steps=sC["steps"], seeds=sC["seeds"],
                             key=jax.random.key(3), test_samples=2**16)
        data[f"phase_retrieval_{nm}"] = dict(dmft_keys=_at(dm, sC["times"]), gd_seeds=_at(_seeds(simC), sC["times"]),
                                             max_step_curvature=float(np.max(dm["_curv"])))
        ts = np.arange(sC["steps"] + 1)
        ax.plot(ts, dm["train_error"].mean(0), c + "-", label=f"{nm} train DMFT")
        ax.errorbar(ts, np.asarray(simC.train_error), np.asarray(simC.train_error_stderr), fmt=c + "o", ms=2, label=f"{nm} train GD")
        ax.plot(ts, dm["test_error"].mean(0), c + "--", label=f"{nm} test DMFT")
    ax.set_title(f"phase retrieval, δ={sC['delta']}, d={sC['d']}")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    acc += curve_section_rows(setting, data)

    # ---- D. η → 0 at fixed physical time t·η ----------------------------------------
    etas = [0.4, 0.2, 0.1, 0.05] if quick else [0.4, 0.2, 0.1, 0.05, 0.025]
    if tiny:
        etas = [0.4, 0.2, 0.1]
    horizon = 4.0
    P = tanh_problem()
    curves = {}
    for eta in etas:
        steps = int(round(horizon / eta))
        tr = dmft.solve(P, delta=2.0, lr=eta, steps=steps, paths=20_000, key=jax.random.key(5))
        curves[eta] = (np.arange(steps + 1) * eta, np.asarray(tr.overlap[:, 0, 0]), np.asarray(tr.train_error))
    ax = axes[1, 1]
    Mend = []
    for eta in etas:
        tt, M, _ = curves[eta]
        Mend.append(float(M[-1]))
        ax.plot(tt, M, label=f"η={eta}")
    ax.set_xlabel("t·η")
    ax.set_title("DMFT overlap, η → 0 at fixed t·η")
    ax.legend(fontsize=7)
    # successive differences |M(η) − M(η/2)| ∝ η^p for a method of order p (GD = explicit Euler: p = 1)
    diffs = [abs(Mend[i] - Mend[i + 1]) for i in range(len(etas) - 1)]
    orders = [float(np.log2(diffs[i] / diffs[i + 1])) for i in range(len(diffs) - 1)]
    order = orders[-1]
    richardson = 2 * Mend[-1] - Mend[-2]
    setting["eta_to_zero"] = dict(etas=etas, horizon=horizon, paths=20_000, note="common random numbers; successive differences")
    acc.append(dict(quantity="η→0: order p from |M(η)−M(η/2)| at t·η=4 (GD = Euler: 1)", theory=1.0, simulation=order,
                    sim_stderr=None, d=None, seeds=None, tolerance=0.25, agree=bool(abs(order - 1) < 0.25)))
    perf.append(dict(what="η→0: M(t·η = 4) per η and successive-difference orders", value=Mend[-1], unit="M at η_min",
                     ratio=None, note="; ".join(f"η={e}: M={v:.5f}" for e, v in zip(etas, Mend))
                     + f"; orders {[round(o, 3) for o in orders]}; Richardson η→0 limit {richardson:.5f}"))

    # ---- E. finite-size scaling of the discrepancy ----------------------------------
    # small d and many seeds: the O(1/d) bias must stand out of the seed noise at ≥ 3 d for the exponent to be
    # measured (session 51: at d = 250…2000 with 8–16 seeds only d = 250 resolved it, the row could not be assessed)
    # (session 52, same sizes: no d from 25 to 800 resolves it — |M_GD − M_DMFT| < 0.004 throughout — so the
    # assessed row is the d → ∞ limit, fss_limit_row, with the fitted 1/d coefficient as a bound)
    ds = [25, 50, 100, 200, 400, 800] if quick else [25, 50, 100, 200, 400, 800, 1600, 3200]
    n_seeds = {25: 1024, 50: 1024, 100: 512, 200: 256, 400: 256, 800: 128, 1600: 64, 3200: 32}
    if tiny:
        ds, n_seeds = [25, 50, 100, 200], {25: 256, 50: 256, 100: 128, 200: 64}
    P = tanh_problem()
    ref_keys = 4
    ref_paths = 10_000 if tiny else 200_000     # per key
    # reference M from independent keys: its s.e. enters every discrepancy (common to all d)
    Mrefs = [float(dmft.solve(P, delta=2.0, lr=0.2, steps=40, paths=ref_paths, key=jax.random.key(21 + i)).overlap[-1, 0, 0])
             for i in range(ref_keys)]
    Mref, Mref_se = float(np.mean(Mrefs)), float(np.std(Mrefs, ddof=1) / np.sqrt(ref_keys))
    disc, discse, gdse = [], [], []
    for d in ds:
        s = dmft.simulate(P, d=d, delta=2.0, lr=0.2, steps=40, seeds=n_seeds[d], key=jax.random.key(30 + d))
        disc.append(float(s.overlap[-1, 0, 0]) - Mref)
        gdse.append(float(s.overlap_stderr[-1, 0, 0]))
        discse.append(float(np.hypot(gdse[-1], Mref_se)))
    setting["finite_size"] = dict(ds=ds, quantity="M at t=40 (tanh m=1 case)", dmft_paths=ref_paths * ref_keys, dmft_paths_per_key=ref_paths,
                                  dmft_keys=ref_keys, dmft_M=Mref, dmft_M_stderr=Mref_se, seeds=[n_seeds[d] for d in ds],
                                  stderr="hypot(GD seed s.e., DMFT key s.e.)")
    acc.append(fss_exponent_row(ds, disc, discse, seeds=min(n_seeds[d] for d in ds)))
    slope = acc[-1]["simulation"]
    acc.append(fss_limit_row(ds, disc, gdse, Mref_se, seeds=min(n_seeds[d] for d in ds)))
    for d, v, se, g in zip(ds, disc, discse, gdse):
        acc.append(dict(quantity=f"finite size: M_GD − M_DMFT at t=40, d={d}", theory=0.0, simulation=v, sim_stderr=se,
                        gd_stderr=g, d=d, seeds=n_seeds[d], tolerance=None, agree=None))
    ax = axes[1, 2]
    ax.errorbar(ds, np.abs(disc), discse, fmt="o-")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("d")
    ax.set_title(f"|M_GD − M_DMFT| at t=40, slope {slope:.2f}")

    # ---- performance ------------------------------------------------------------------
    P = easy_hard_problem()
    _, t_first = _timed(dmft.solve, P, delta=3.0, lr=0.1, steps=60, paths=20_000, key=jax.random.key(40))
    runs = [_timed(dmft.solve, P, delta=3.0, lr=0.1, steps=60, paths=20_000, key=jax.random.key(41 + i))[1]
            for i in range(1 if tiny else 2)]
    perf.append(dict(what="DMFT m=2, T=60, 2e4 paths: run time (after compile)", value=float(np.median(runs)), unit="s",
                     ratio=500.0 / float(np.median(runs)), note=f"ratio = 500 s pure-Python prototype / ours; first call incl. compile {t_first:.1f} s; runs {[round(r, 2) for r in runs]}"))

    # δ sweep: vmapped vs loop (16 values)
    P = phase_retrieval_problem(lambda x: x**2)
    deltas = jnp.linspace(1.0, 6.0, 16)
    kw = dict(lr=0.05, steps=30, paths=4096, key=jax.random.key(50))
    _, t_sw_first = _timed(dmft.solve_sweep, P, deltas, **kw)
    _, t_sw = _timed(dmft.solve_sweep, P, deltas, **kw)
    dmft.solve(P, delta=1.0, **kw)
    t0 = time.perf_counter()
    for dv in np.asarray(deltas):
        jax.block_until_ready(dmft.solve(P, delta=float(dv), **kw).train_error)
    t_loop = time.perf_counter() - t0
    perf.append(dict(what="16-point δ sweep (T=30, 4096 paths): loop / vmapped", value=t_sw, unit="s (vmapped)",
                     ratio=t_loop / t_sw, note=f"loop {t_loop:.2f} s (one compile, reused); vmapped first call {t_sw_first:.2f} s"))

    # GPU against CPU for the same sweep (only when an accelerator is present)
    if jax.default_backend() != "cpu":
        try:
            cpu = jax.devices("cpu")[0]
            with jax.default_device(cpu):
                _timed(dmft.solve_sweep, P, deltas, **dict(kw, key=jax.random.key(50)))
                _, t_cpu = _timed(dmft.solve_sweep, P, deltas, **dict(kw, key=jax.random.key(50)))
            perf.append(dict(what="16-point δ sweep (T=30, 4096 paths): host CPU / GPU, same run", value=t_sw, unit="s (GPU)",
                             ratio=t_cpu / t_sw, note=f"CPU {t_cpu:.2f} s on {__import__('os').cpu_count()} cores"))
        except Exception as exc:  # pragma: no cover
            perf.append(dict(what="GPU vs CPU sweep", value=None, unit="", ratio=None, note=f"failed: {exc}"))

    # DMFT against GD at equal error bars: benchmarks/bench_dmft_cost.py (as a function of T and d)

    fig.tight_layout()
    figname = "dmft.png"
    fig.savefig(pathlib.Path(outdir) / figname, dpi=110)
    return dict(setting=setting, accuracy=acc, performance=perf, figure=figname, data=data)
