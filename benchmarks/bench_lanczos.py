"""Lanczos (spectral.lanczos_extreme) on real network Hessians: accuracy against dense eigh
and scipy eigsh, time per HVP against one gradient, total time against eigsh (same CPU)."""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "lanczos"


def _runs(f, reps):
    """Wall times and results of ``reps`` calls ``f(rep)`` (``f`` blocks on its result)."""
    times, outs = [], []
    for rep in range(reps):
        t0 = time.perf_counter()
        outs.append(f(rep))
        times.append(time.perf_counter() - t0)
    return times, outs


def _timeit(f, reps=5):
    """Median wall time of ``reps`` calls after one warm-up call."""
    f()
    return float(np.median(_runs(lambda _: f(), reps)[0]))


def _network(d, m, n, key=0):
    import dmft

    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    prob = dmft.Problem(pr, dmft.TwoLayer(activation=jax.nn.gelu, width=m, second_layer=jnp.ones(m) / m))
    X, y = dmft.sample_data(prob, jax.random.key(key), d, n)
    W = dmft.init_weights(prob, jax.random.key(key + 1), d)
    return prob, X, y, prob.student.second_layer, W


def run(mode: str, outdir: pathlib.Path) -> dict:
    quick = mode != "full"  # quick and standard share the CPU sizes here
    import scipy.sparse.linalg as sla
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import spectral

    outdir = pathlib.Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    acc, perf = [], []
    k = 4
    # ---- accuracy against dense eigh (small d) ------------------------------------------
    d0, m0, n0 = (100, 4, 300) if quick else (250, 4, 750)
    prob, X, y, a, W = _network(d0, m0, n0)
    H = np.asarray(spectral.dense_hessian(prob, X, y, a, W))
    ev = np.linalg.eigvalsh(H)
    hvp = spectral.hessian_vector_product(prob, X, y, a, W, method="blocks")
    res = spectral.lanczos_extreme(hvp, W.shape, 2 * k, jax.random.key(0), tol=1e-12)
    want = np.concatenate([ev[:k], ev[-k:]])
    err = float(np.max(np.abs(np.asarray(res.eigenvalues) - want)))
    acc.append(dict(quantity=f"max |Lanczos - eigh| over {k} smallest + {k} largest (d={d0}, m={m0}, n={n0})",
                    theory=0.0, simulation=err, sim_stderr=None, d=d0, seeds=1, tolerance=1e-8, agree=err < 1e-8))
    acc.append(dict(quantity="ghost (duplicated converged) Ritz values", theory=0.0, simulation=float(res.ghosts),
                    sim_stderr=None, d=d0, seeds=1, tolerance=0.0, agree=int(res.ghosts) == 0))
    # ---- speed: network Hessian ---------------------------------------------------------
    d, m, n = (1000, 8, 4000) if quick else (4000, 8, 16000)
    prob, X, y, a, W = _network(d, m, n, key=3)
    V = jax.random.normal(jax.random.key(9), W.shape)
    g_ = jax.jit(lambda X_, y_, W_: spectral.risk_gradient(prob, X_, y_, a)(W_))
    grad = lambda W_: g_(X, y, W_)
    h_ = jax.jit(lambda X_, y_, W_, V_: spectral.hessian_vector_product(prob, X_, y_, a, W_, method="autodiff")(V_))
    hv_ad = lambda V_: h_(X, y, W, V_)
    D = jax.jit(lambda X_, y_, W_: spectral.finite_blocks(prob, X_, y_, a, W_))(X, y, W)  # prob closed over: its activation is a pytree leaf (a function)
    bm = jax.jit(lambda X_, D_, V_: spectral.block_matvec(X_, D_, prob.ridge)(V_))
    hv_bl = lambda V_: bm(X, D, V_)
    t_grad = _timeit(lambda: grad(W).block_until_ready())
    t_ad = _timeit(lambda: hv_ad(V).block_until_ready())
    t_bl = _timeit(lambda: hv_bl(V).block_until_ready())
    perf += [dict(what=f"gradient (d={d}, m={m}, n={n})", value=t_grad * 1e3, unit="ms", ratio=None, note="floor"),
             dict(what="HVP autodiff jvp(grad)", value=t_ad * 1e3, unit="ms", ratio=t_ad / t_grad,
                  note="ratio = time / gradient"),
             dict(what="HVP blocks (D_i by autodiff once)", value=t_bl * 1e3, unit="ms", ratio=t_bl / t_grad,
                  note="ratio = time / gradient")]
    # X, D as jit arguments (closed-over arrays would be constant-folded by XLA)
    lz = jax.jit(lambda X_, D_, key: spectral.lanczos_extreme(spectral.block_matvec(X_, D_, prob.ridge), W.shape, k,
                                                            key, which="smallest", tol=1e-8, throw=False))
    r = lz(X, D, jax.random.key(1))
    r.eigenvalues.block_until_ready()
    ts_lz, _ = _runs(lambda rep: lz(X, D, jax.random.key(2 + rep)).eigenvalues.block_until_ready(), 3)  # start vectors vary
    t_lz = float(np.median(ts_lz))
    nmv = [0]

    def mv(x):
        nmv[0] += 1
        return np.asarray(hv_bl(jnp.asarray(x.reshape(W.shape)))).ravel()

    op = sla.LinearOperator((d * m, d * m), matvec=mv, dtype=np.float64)

    def eigsh_run(rep):
        nmv[0] = 0
        return np.sort(sla.eigsh(op, k=k, which="SA", tol=1e-8, v0=np.random.default_rng(rep).normal(size=d * m))[0])

    ts_e, evs = _runs(eigsh_run, 3)
    ev_ref = evs[0]
    t_eigsh = float(np.median(ts_e))
    err2 = float(np.max(np.abs(np.asarray(r.eigenvalues) - ev_ref)))
    acc.append(dict(quantity=f"max |Lanczos - eigsh| over {k} smallest (d={d}, m={m}, n={n})", theory=0.0,
                    simulation=err2, sim_stderr=None, d=d, seeds=1, tolerance=1e-6, agree=err2 < 1e-6))
    perf += [dict(what=f"lanczos_extreme, {k} smallest, tol 1e-8 (jit, after compile)", value=t_lz, unit="s",
                  ratio=t_eigsh / t_lz, note=f"ratio = eigsh time / ours (medians of 3); {int(r.iterations)} HVPs; runs {[round(x, 3) for x in ts_lz]}"),
             dict(what=f"scipy eigsh which='SA' k={k} tol=1e-8 (same jitted HVP)", value=t_eigsh, unit="s",
                  ratio=None, note=f"{nmv[0]} HVPs (ARPACK implicit restarts, host round trip per HVP); runs {[round(x, 3) for x in ts_e]}")]
    # matfree (optional: pip install matfree): its Lanczos tridiagonalization with full
    # re-orthogonalization at the Krylov depth ours stopped at (matfree has no stopping rule),
    # then the k smallest Ritz values of the small tridiagonal
    try:
        from matfree import decomp

        depth = int(r.iterations)
        tri = decomp.tridiag_sym(depth, reortho="full", materialize=True)

        def mf(X_, D_, v0):
            mvf = lambda v, X__, D__: spectral.block_matvec(X__, D__, prob.ridge)(v.reshape(W.shape)).reshape(-1)
            out = tri(mvf, v0, X_, D_)
            return jnp.linalg.eigvalsh(out[1])[:k]

        mf = jax.jit(mf)
        v0 = jax.random.normal(jax.random.key(5), (d * m,))
        mf(X, D, v0).block_until_ready()
        ts_mf, evs_mf = _runs(lambda rep: mf(X, D, v0 + 1e-3 * (rep + 1)).block_until_ready(), 3)
        t_mf = float(np.median(ts_mf))
        ev_mf = evs_mf[0]
        err_mf = float(np.max(np.abs(np.asarray(ev_mf) - ev_ref)))
        from importlib.metadata import version

        perf.append(dict(what=f"matfree {version('matfree')} tridiag_sym (full reortho) at the same depth + eigvalsh",
                         value=t_mf, unit="s", ratio=t_mf / t_lz,
                         note=f"ratio = matfree time / ours (medians of 3); {depth} HVPs, no stopping rule; max |matfree - eigsh| over {k} smallest {err_mf:.1e}; runs {[round(x, 3) for x in ts_mf]}"))
    except ImportError:
        perf.append(dict(what="matfree comparison", value=None, unit="", ratio=None, note="matfree not installed (pip install matfree)"))
    # SLQ density figure
    slq = spectral.stochastic_lanczos_quadrature(hv_bl, W.shape, jax.random.key(4), probes=4, order=60)
    lo, hi = float(slq.nodes.min()), float(slq.nodes.max())
    grid = jnp.linspace(lo - 0.1 * (hi - lo), hi + 0.1 * (hi - lo), 400)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.semilogy(np.asarray(grid), np.asarray(slq.density(grid, 0.01 * (hi - lo))) + 1e-6)
    for e in ev_ref:
        ax.axvline(e, color="r", lw=0.5)
    ax.set_xlabel("eigenvalue")
    ax.set_title(f"SLQ density, GeLU net d={d} m={m} n={n}; red: eigsh bottom {k}", fontsize=8)
    fig.tight_layout()
    fig.savefig(outdir / "lanczos.png", dpi=120)
    plt.close(fig)
    return dict(setting=dict(quick=quick, accuracy_net=dict(d=d0, m=m0, n=n0), speed_net=dict(d=d, m=m, n=n),
                             teacher="y = z^2", student="GeLU committee, a = 1/m", loss="square", k=k,
                             note=("quick mode measures at d=1000, n=4000 on the 2-core CPU; full size "
                                   "d=4000, m=8, n=16000 is for the GPU run")),
                accuracy=acc, performance=perf, figure="lanczos.png")
