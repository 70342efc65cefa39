"""dδ_NN/dθ by implicit differentiation against central finite differences (issue #7).

The threshold is the per-key root of the stationary route (stationary DMFT fixed point → law
of (ζ, D) → outlier margin at the bulk edge: the separation criterion, as in the two_route
benchmark where it agrees with the δ*(t) trend), in the staircase setting of bench_two_route
with the Huber loss replaced by the pseudo-Huber loss (C^∞: Huber's jump in ℓ'' makes the
Monte Carlo margin non-differentiable in its width). Parameter families:

    activation   SoftplusT(β) = softplus(βr)/β;   SiLUT(β) = r·sigmoid(βr);
                 Combination(c) = c_1 r + c_2 softplus(r) + c_3 tanh(r) + c_4 GeLU(r)  (at c = (0,1,0,0))
    loss         PseudoHuber(w)
    ridge        λ

Each gradient entry is compared with ``(δ_NN(θ + h e_i) − δ_NN(θ − h e_i)) / 2h`` (h = 1e-4, same
key, roots to 1e-10·δ): acceptance 1e-3 relative (issue #7). The initialization scale has zero
derivative on this route: the stationary point forgets the initialization (S1–S5), so it is not
a family here.

Standard mode adds the dynamic route: δ*(t) at t·η = 40 (η = 0.5, 80 steps) of the GeLU-T
staircase with ridge 0.2 under THEORY's negative criterion, differentiated through the DMFT's scan,
for (β, init scale, ridge, pseudo-Huber width); one key, 1024 paths, h = 1e-3 (its margin noise
floor is ~1e-9 with the Cholesky jitter 1e-8 used on that route).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

from dmft import families as fam
from dmft.stationary import Warmup
from spectral.threshold_gradient import threshold_gradient

NAME = "threshold_gradient"
H = 1e-4
REL_TOL = 1e-3


def _problem(activation, width, ridge):
    return fam.staircase_problem(activation, fam.PseudoHuber(width), ridge)


def softplus_family(p):
    return _problem(fam.SoftplusT(p["beta"]), p["width"], p["ridge"])


def silu_family(p):
    return _problem(fam.SiLUT(p["beta"]), p["width"], p["ridge"])


def combination_family(p):
    return _problem(fam.Combination(p["c"]), p["width"], p["ridge"])


FAMILIES = [
    dict(name="softplus-T", family=softplus_family, params=dict(beta=1.0, width=1.0, ridge=0.3), vary=("beta", "width", "ridge"),
         delta0=1.3),
    dict(name="silu-T", family=silu_family, params=dict(beta=1.0, width=1.0, ridge=0.3), vary=("beta",), delta0=1.5),
    dict(name="combination", family=combination_family, params=dict(c=[0.0, 1.0, 0.0, 0.0], width=1.0, ridge=0.3),
         vary=("c",), delta0=1.3),
    # δ*(t) of the dynamic DMFT (t·η = 40) under THEORY's negative criterion: GeLU, ridge 0.2 — the setting whose
    # GD success curves agree with δ*(t) (success_bounded.json, Huber there); the initialization scale matters here
    dict(name="gelu-T dynamic δ*(t)", family=fam.staircase_family("gelu-t"),
         params=dict(beta=1.0, init_scale=1.0, ridge=0.2, width=1.0), vary=("beta", "init_scale", "ridge", "width"),
         delta0=2.3, route=dict(route="dynamic", lr=0.5, steps=80), level="auto", h=1e-3),
]


def _as_params(d):
    return {k: jnp.asarray(v, float) for k, v in d.items()}


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quick = mode == "quick"
    S = dict(paths=512 if quick else 2048, warmup=dict(lr=0.5, steps=80, paths=512 if quick else 2048),
             keys=[3, 4] if quick else list(range(3, 11)), families=[f["name"] for f in (FAMILIES[:1] if quick else FAMILIES)],
             dynamic=dict(paths=1024, keys=[5], chol_jitter=1e-8,
                          note="dynamic route: forward mode through 80 DMFT steps (each JVP is a DMFT pass): one key, "
                               "h = 1e-3 (margin noise floor ~1e-9)"),
             vary={f["name"]: list(f["vary"][:1] if quick else f["vary"]) for f in FAMILIES},
             h=H, rel_tol=REL_TOL, level="edge (separation)", target="y = z1 + z2^2 - 1 (z2 hard)",
             student="m=2, a=(1, 1/2) frozen, Q0=I, M0=0", loss="pseudo-Huber", newton_tol=1e-10,
             agreement="every key: |implicit - FD| <= rel_tol |FD|; theory/simulation columns are key means, "
                       "sim_stderr the across-key s.e. (Monte Carlo uncertainty of the gradient of the δ_NN estimate)")
    acc, perf, diag = [], [], {}
    entries = []   # (family, key, label, implicit, fd)
    for f in FAMILIES:
        if f["name"] not in S["families"]:
            continue
        base = _as_params(f["params"])
        dyn = "route" in f
        h = f.get("h", H)
        for kk in (S["dynamic"]["keys"] if dyn else S["keys"]):
            key = jax.random.key(kk)
            if dyn:
                kw = dict(key=key, paths=S["dynamic"]["paths"], level=f["level"], **f["route"])
            else:
                kw = dict(key=key, paths=S["paths"], level="edge", warmup=Warmup(S["warmup"]["lr"], S["warmup"]["steps"],
                                                                                  S["warmup"]["paths"]))
            t0 = time.perf_counter()
            g = threshold_gradient(f["family"], base, delta0=f["delta0"], **kw)
            t_first = time.perf_counter() - t0
            t0 = time.perf_counter()
            g = threshold_gradient(f["family"], base, delta0=g.delta_nn, start=g.state, **kw)   # warm (compiled): timing
            t_grad = time.perf_counter() - t0
            rows, t_fd, n_fd = [], 0.0, 0
            for name in S["vary"][f["name"]]:
                flat = np.atleast_1d(np.asarray(base[name]))
                for i in range(flat.size):
                    roots = []
                    for s in (1, -1):
                        pv = flat.copy()
                        pv[i] += s * h
                        p = dict(base, **{name: jnp.asarray(pv.reshape(np.shape(base[name])))})
                        t0 = time.perf_counter()
                        roots.append(threshold_gradient(f["family"], p, delta0=g.delta_nn, start=g.state, **kw).delta_nn)
                        t_fd += time.perf_counter() - t0
                        n_fd += 1
                    fd = (roots[0] - roots[1]) / (2 * h)
                    imp = float(np.atleast_1d(np.asarray(g.gradient[name]))[i])
                    label = name if flat.size == 1 else f"{name}[{i}]"
                    rows.append(dict(param=label, implicit=imp, fd=fd, rel=abs(imp - fd) / max(abs(fd), 1e-300)))
                    entries.append((f["name"], kk, label, imp, fd))
            diag[f"{f['name']} key {kk}"] = dict(delta_nn=g.delta_nn, cut=g.cut, edge=g.edge, margin_delta=g.margin_delta,
                                                 gradient=rows, newton=g.diagnostics["newton"],
                                                 eigen_gap=g.diagnostics["eigen_gap"], params=f["params"],
                                                 wall_first_s=t_first, wall_grad_warm_s=t_grad, wall_fd_s=t_fd, fd_roots=n_fd)
            if kk == (S["dynamic"]["keys"] if dyn else S["keys"])[0]:
                perf.append(dict(what=f"{f['name']}: δ_NN + gradient ({sum(np.size(base[n]) for n in S['vary'][f['name']])} "
                                      f"params) implicit, warm (key {kk})", value=t_grad, unit="s",
                                 ratio=t_fd / t_grad if t_grad > 0 else None,
                                 note=f"ratio = central FD ({n_fd} root solves, warm) / implicit; first call incl. compile "
                                      f"{t_first:.0f} s"))
    # one accuracy row per (family, parameter): all keys must agree with FD
    for fname in S["families"]:
        labels = list(dict.fromkeys(e[2] for e in entries if e[0] == fname))
        for lab in labels:
            imp = np.array([e[3] for e in entries if e[0] == fname and e[2] == lab])
            fd = np.array([e[4] for e in entries if e[0] == fname and e[2] == lab])
            rel = np.abs(imp - fd) / np.abs(fd)
            se = (lambda v: float(v.std(ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None)
            acc.append(dict(quantity=f"d{'δ*(t)' if 'dynamic' in fname else 'δ_NN'}/d{lab} ({fname}): implicit (theory) vs "
                                     f"central FD, {len(imp)} keys",
                            theory=float(imp.mean()), theory_stderr=se(imp), simulation=float(fd.mean()), sim_stderr=se(fd),
                            d="inf (DMFT, per key)", seeds=len(imp), tolerance=REL_TOL, max_rel_err=float(rel.max()),
                            agree=bool(np.all(rel <= REL_TOL))))
    roots = {fn: [v["delta_nn"] for k, v in diag.items() if k.startswith(fn + " key")] for fn in S["families"]}
    diag["delta_nn_mean"] = {fn: dict(mean=float(np.mean(v)),
                                      stderr=float(np.std(v, ddof=1) / np.sqrt(len(v))) if len(v) > 1 else None, per_key=v)
                             for fn, v in roots.items()}
    # one figure: implicit vs FD for every entry, and relative differences
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    imps = np.array([e[3] for e in entries])
    fds = np.array([e[4] for e in entries])
    for fname in S["families"]:
        sel = np.array([e[0] == fname for e in entries])
        axes[0].plot(fds[sel], imps[sel], "o", label=fname)
    lim = [min(fds.min(), imps.min()) - 0.05, max(fds.max(), imps.max()) + 0.05]
    axes[0].plot(lim, lim, "k-", lw=0.5)
    axes[0].set_xlabel("central finite difference of δ_NN (per key)")
    axes[0].set_ylabel("implicit derivative")
    axes[0].legend(fontsize=8)
    rel = np.abs(imps - fds) / np.abs(fds)
    axes[1].semilogy(range(len(rel)), rel, "s")
    axes[1].axhline(REL_TOL, color="r", lw=0.8, label="acceptance 1e-3")
    axes[1].set_xlabel("entry (family × key × parameter)")
    axes[1].set_ylabel("|implicit − FD| / |FD|")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    return dict(setting=S, accuracy=acc, performance=perf, diagnostics=diag, figure=f"{NAME}.png")
