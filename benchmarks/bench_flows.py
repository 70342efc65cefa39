"""flows/ (THEORY §5): KKT points, time shifts, limiting trajectory rates, sparsity; speed."""
from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import flows

NAME = "flows"


def _acc(q, theory, sim, d, tol, seeds=1, stderr=None, agree=None):
    theory, sim = float(theory), float(sim)
    ok = abs(sim - theory) <= tol if agree is None else bool(agree)
    return dict(quantity=q, theory=theory, simulation=sim, sim_stderr=stderr, d=int(d), seeds=int(seeds),
                tolerance=float(tol), agree=bool(ok))


def _toy(d=5, n=20, seed=1):
    X = jax.random.normal(jax.random.PRNGKey(seed), (n, d))
    return X, X[:, 0] * X[:, 1] + 0.5 * X[:, 2] ** 2


def _hit_time(ts, norms, level):
    i = int(np.argmax(norms >= level))
    return float(np.interp(level, norms[i - 1:i + 1], ts[i - 1:i + 1]))


def _euler_steps_for(model, w0, X, y, delta, t1, target_err, ref, max_pow=18):
    """Smallest fixed-step Euler run (2^k steps) whose final-state error ≤ target_err."""
    lossf = flows.make_loss(model, X, y)
    from jax.flatten_util import ravel_pytree
    x0, unravel = ravel_pytree(w0)
    x0 = delta * x0 / jnp.linalg.norm(x0)
    g = jax.grad(lambda x: lossf(unravel(x)))

    @jax.jit
    def run(h, n):
        return jax.lax.fori_loop(0, n, lambda i, x: x - h * g(x), x0)
    for k in range(8, max_pow + 1):
        n = 2 ** k
        t0 = time.perf_counter()
        xf = run(t1 / n, n).block_until_ready()
        el = time.perf_counter() - t0
        err = float(jnp.linalg.norm(xf - ref))
        if err <= target_err:
            return n, err, el
    return None, err, el


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick, tiny = mode != "full", mode == "quick"  # standard/quick share CPU sizes; quick trims further
    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    acc, perf = [], []
    # ---- 1. KKT closed forms (square two-layer, single-neuron formula) ----
    X, y = _toy()
    m = flows.two_layer("square", width=4)
    kk = flows.kkt_points(m, X, y, starts=64, key=jax.random.PRNGKey(0))
    lam = np.linalg.eigvalsh(np.asarray((X.T * y) @ X))
    acc.append(_acc("KKT N(w*) square net (2λ1/(3√3))", 2 * lam[-1] / (3 * np.sqrt(3)), kk[0].value, 5, 1e-8))
    acc.append(_acc("KKT gap Δ square net (2(λ1−λ2)/√3)", 2 * (lam[-1] - lam[-2]) / np.sqrt(3), kk[0].gap, 5, 1e-6))
    acc.append(_acc("KKT active units (sparsity)", 1, int(kk[0].active_units[0].sum()), 5, 0))
    # ---- 2. L = 2 diagonal linear: closed-form escape time and rate ----
    Q, _ = np.linalg.qr(np.random.default_rng(0).normal(size=(8, 4)))
    c = np.array([2.0, 1.0, 0.5, -0.3])
    dm, X2, y2 = flows.diagonal_linear(), jnp.asarray(Q), jnp.asarray(Q @ c)
    e1 = jnp.zeros(4).at[0].set(1.0)
    for delta in (1e-3, 1e-6):
        # β1 = c/2 is hit at t = ln(2c/δ² − 1)/(2c) = T_δ + ln(2c)/(2c) + O(δ²)
        th = np.log(2 * c[0] / delta ** 2 - 1) / (2 * c[0])
        ts = np.linspace(th - 0.05, th + 0.05, 201)
        fr = flows.gradient_flow(dm, (e1, e1), X2, y2, t1=float(ts[-1]), ts=ts, delta=delta, save="params", rtol=1e-11)
        beta = np.asarray(fr.params[0][:, 0] * fr.params[1][:, 0])
        acc.append(_acc(f"L=2 escape time (β1 = c/2) δ={delta:g}", th, _hit_time(ts, beta, c[0] / 2), 4, 1e-6))
    w0 = dm.init(jax.random.PRNGKey(2), 4)
    r2 = flows.limiting_trajectory(dm, w0, X2, y2, deltas=(1e-2, 1e-3, 1e-4, 1e-5), ts=np.linspace(-1, 2, 13))
    acc.append(_acc("L=2 convergence exponent vs heuristic Δ/(LN)", r2.exponent_heuristic, r2.exponent, 4, 0.05))
    acc.append(_acc("L=2 convergence exponent ≥ theorem bound Δ/(Δ+8N)", r2.exponent_bound, r2.exponent, 4, 0.0,
                    agree=r2.exponent >= r2.exponent_bound))
    # ---- 3. L = 3 square net: limiting trajectory from a generic start ----
    w0 = m.init(jax.random.PRNGKey(3), 5)
    deltas3 = (1e-2, 1e-3, 1e-4) if quick else (1e-2, 1e-3, 1e-4, 1e-5)
    r3 = flows.limiting_trajectory(m, w0, X, y, deltas=deltas3, ts=np.linspace(-0.05, 0.05, 41), saddle=True)
    acc.append(_acc("L=3 support exponent vs Δ/(LN)", r3.exponent_heuristic, r3.exponent_support, 5, 0.1))
    acc.append(_acc("L=3 zero-set exponent (O(δ))", 1.0, r3.exponent_zero, 5, 0.1))
    acc.append(_acc("L=3 sup error exponent (total) vs min(1, Δ/(LN))", min(1.0, r3.exponent_heuristic), r3.exponent, 5, 0.3))
    sd = r3.saddle
    acc.append(_acc("L=3 first saddle: residual NCF of zero units > 0", 0.0, sd.residual_ncf, 5, 0.0, agree=sd.residual_ncf > 0))
    # escape scaling t_hit ∝ δ^{−(L−2)} for L = 3 and L = 7 (deep square net, 2 hidden layers)
    for mm, dd, name in ((m, (1e-2, 1e-3), "L=3 square 2-layer"), (flows.feedforward((3, 2), "square"), (1e-1, 5e-2), "L=7 square 3-layer")):
        L = flows.check_degree(mm, X)
        kd = flows.kkt_points(mm, X, y, starts=16, key=jax.random.PRNGKey(4))[0]
        hits = [flows.escape_time(mm, kd.direction, X, y, dl, L, kd.value, window=(0.5, 1.5), points=401, rtol=1e-11)
                for dl in dd]
        slope = np.log(hits[1] / hits[0]) / np.log(dd[1] / dd[0])
        acc.append(_acc(f"escape time exponent d ln t_hit / d ln δ, {name}", -(L - 2), slope, 5, 0.05))
    # ---- 4. sparsity ----
    zp = flows.zero_preserving_subset(m, r3.kkt.direction, X, y)
    mx, _ = flows.check_zero_preserved(m, w0, zp.mask, X, y, t1=30.0, delta=0.1)
    acc.append(_acc("zero-initialized zero-preserving weights max|w_Z|", 0.0, mx, 5, 0.0))
    t_sad = sd.time - float(flows.time_shift(3, r3.kkt.value, r3.eps))
    sc = flows.sparsity_scaling(m, w0, zp.mask, X, y, deltas=(1e-2, 1e-3, 1e-4), t_rel=t_sad, kkt=r3.kkt)
    acc.append(_acc("‖w_Z‖ up to first saddle: exponent in δ (L=3)", 1.0, sc.exponent, 5, 0.1))
    # ---- performance ----
    Xb = jax.random.normal(jax.random.PRNGKey(5), (40, 20))
    yb = Xb[:, 0] * Xb[:, 1] + 0.5 * Xb[:, 2] ** 2
    mb = flows.two_layer("square", width=10)
    flows.kkt_points(mb, Xb, yb, starts=1024, key=jax.random.PRNGKey(6), max_analyze=1)
    t0 = time.perf_counter()
    kb = flows.kkt_points(mb, Xb, yb, starts=1024, key=jax.random.PRNGKey(7), max_analyze=3)
    tk = time.perf_counter() - t0
    perf.append(dict(what="kkt_points 1024 starts (d=20, width 10, n=40), after compile", value=tk, unit="s",
                     ratio=None, note=f"iterations {kb.info['iterations']}, unique {kb.info['unique']}, converged {kb.info['converged']}"))
    d, width, n = (100, 50, 200)
    Xl = jax.random.normal(jax.random.PRNGKey(8), (n, d))
    yl = Xl[:, 0] * Xl[:, 1] + 0.5 * Xl[:, 2] ** 2
    ml = flows.two_layer("square", width=width)
    wl = ml.init(jax.random.PRNGKey(9), d)
    t0 = time.perf_counter()
    rl = flows.limiting_trajectory(ml, wl, Xl, yl, deltas=(1e-1, 3e-2, 1e-2, 3e-3), rtol=1e-8)
    tl = time.perf_counter() - t0
    perf.append(dict(what=f"limiting_trajectory 4 deltas, d={d}, width={width}, n={n} (incl. compile, KKT, p)",
                     value=tl, unit="s", ratio=None,
                     note=f"solver steps per δ {rl.n_steps.tolist()}, N={rl.kkt.value:.4g}, Δ={rl.kkt.gap:.4g} ({rl.kkt.method}), sup-err {np.round(rl.errors, 6).tolist()}"))
    # Euler at the same accuracy (δ = 1e-1, to shift + ts[-1])
    dl, t1 = 1e-1, float(rl.shifts[0] + rl.ts[-1])
    ref = flows.gradient_flow(ml, wl, Xl, yl, t1=t1, delta=dl, rtol=1e-12, n_save=2)
    ada = flows.gradient_flow(ml, wl, Xl, yl, t1=t1, delta=dl, rtol=1e-8, n_save=2)
    from jax.flatten_util import ravel_pytree
    xr, xa = ravel_pytree(ref.final)[0], ravel_pytree(ada.final)[0]
    err_a = float(jnp.linalg.norm(xa - xr))
    t0 = time.perf_counter()
    flows.gradient_flow(ml, wl, Xl, yl, t1=t1, delta=dl, rtol=1e-8, n_save=2)
    ta = time.perf_counter() - t0
    ne, err_e, te = _euler_steps_for(ml, wl, Xl, yl, dl, t1, err_a, xr, max_pow=14 if tiny else 16 if quick else 20)
    perf.append(dict(what="Tsit5 adaptive (rtol 1e-8) single flow δ=0.1, d=100 width 50", value=ta, unit="s",
                     ratio=None, note=f"{ada.n_steps} steps, final-state error {err_a:.2e} vs rtol 1e-12 reference"))
    perf.append(dict(what="fixed-step Euler, same accuracy", value=te, unit="s",
                     ratio=(ne / ada.n_steps) if ne else (2 ** (14 if tiny else 16 if quick else 20)) / ada.n_steps,
                     note=(f"{ne} steps (ratio = Euler steps / Tsit5 steps; Tsit5 uses 6 gradient evals/step), error {err_e:.2e}"
                           if ne else f"not reached with 2^{14 if tiny else 16 if quick else 20} steps (error {err_e:.2e}); ratio is a LOWER bound")))
    # ---- figure ----
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    for k, dl in enumerate(r3.deltas):
        ax[0].plot(r3.ts, r3.norms[k], label=f"δ={dl:g}")
    ax[0].plot(r3.ts, r3.p_norm, "k--", label="p(t) from εw*")
    ax[0].set(xlabel="t − T̃_δ", ylabel="‖w‖", title="L=3 shifted trajectories")
    ax[0].legend(fontsize=7)
    ax[1].loglog(r2.deltas, r2.errors, "o-", label=f"L=2 (slope {r2.exponent:.2f}, Δ/LN={r2.exponent_heuristic:.2f})")
    ax[1].loglog(r3.deltas[:-1], r3.diffs_support, "s-", label=f"L=3 support (slope {r3.exponent_support:.2f}, Δ/LN={r3.exponent_heuristic:.2f})")
    ax[1].loglog(r3.deltas[:-1], r3.diffs_zero, "^-", label=f"L=3 zero set (slope {r3.exponent_zero:.2f})")
    ax[1].set(xlabel="δ", ylabel="sup_t error", title="convergence to p(t)")
    ax[1].legend(fontsize=7)
    ax[2].loglog(sc.deltas, sc.max_zero, "o-", label=f"max ‖w_Z‖ to saddle (slope {sc.exponent:.2f})")
    ax[2].set(xlabel="δ", title="preserved sparsity")
    ax[2].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(outdir / "flows.png", dpi=110)
    plt.close(fig)
    return dict(setting=dict(quick=quick, toy=dict(d=5, n=20, width=4, activation="square", L=3,
                                                   teacher="y = x1 x2 + 0.5 x3^2", loss="square (sum)"),
                             diag=dict(d=4, n=8, c=c.tolist(), X="orthonormal columns"),
                             deltas_L3=list(deltas3), big=dict(d=d, width=width, n=n),
                             solver="Tsit5 + PIDController", x64=True),
                accuracy=acc, performance=perf, figure="flows.png")
