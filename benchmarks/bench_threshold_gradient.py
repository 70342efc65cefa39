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
a family here (on the dynamic route δ*(t) depends on it).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import dmft
from dmft import families as fam
from dmft.stationary import Warmup
from spectral.threshold_gradient import threshold_gradient

NAME = "threshold_gradient"
H = 1e-4
REL_TOL = 1e-3


def link(z, e):
    return z[0] + z[1] ** 2 - 1.0


TEACHER = dmft.Teacher(link=link, k=2, noise_dim=0)
A = (1.0, 0.5)


def _problem(activation, width, ridge):
    return dmft.Problem(teacher=TEACHER, student=dmft.TwoLayer(activation=activation, width=2, second_layer=jnp.asarray(A)),
                        loss=fam.PseudoHuber(width), ridge=ridge, init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))))


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
]


def _as_params(d):
    return {k: jnp.asarray(v, float) for k, v in d.items()}


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    quick = mode == "quick"
    S = dict(paths=512 if quick else 1024, warmup=dict(lr=0.5, steps=80, paths=512 if quick else 1024),
             keys=[3] if quick else [3, 4], families=[f["name"] for f in (FAMILIES[:1] if quick else FAMILIES)],
             vary={f["name"]: list(f["vary"][:1] if quick else f["vary"]) for f in FAMILIES},
             h=H, rel_tol=REL_TOL, level="edge (separation)", target="y = z1 + z2^2 - 1 (z2 hard)",
             student="m=2, a=(1, 1/2) frozen, Q0=I, M0=0", loss="pseudo-Huber", newton_tol=1e-10,
             agreement="|implicit - FD| <= rel_tol |FD|")
    acc, perf, diag = [], [], {}
    for f in FAMILIES:
        if f["name"] not in S["families"]:
            continue
        base = _as_params(f["params"])
        for kk in S["keys"]:
            key = jax.random.key(kk)
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
                        pv[i] += s * H
                        p = dict(base, **{name: jnp.asarray(pv.reshape(np.shape(base[name])))})
                        t0 = time.perf_counter()
                        roots.append(threshold_gradient(f["family"], p, delta0=g.delta_nn, start=g.state,
                                                        **kw).delta_nn)
                        t_fd += time.perf_counter() - t0
                        n_fd += 1
                    fd = (roots[0] - roots[1]) / (2 * H)
                    imp = float(np.atleast_1d(np.asarray(g.gradient[name]))[i])
                    label = name if flat.size == 1 else f"{name}[{i}]"
                    rows.append(dict(param=label, implicit=imp, fd=fd, rel=abs(imp - fd) / max(abs(fd), 1e-300)))
                    acc.append(dict(quantity=f"dδ_NN/d{label} ({f['name']}, key {kk}): implicit (theory) vs central FD",
                                    theory=imp, simulation=fd, sim_stderr=None, d="inf (DMFT, per key)", seeds=1,
                                    tolerance=REL_TOL * abs(fd), agree=bool(abs(imp - fd) <= REL_TOL * abs(fd))))
            diag[f"{f['name']} key {kk}"] = dict(delta_nn=g.delta_nn, cut=g.cut, edge=g.edge, margin_delta=g.margin_delta,
                                                 gradient=rows, newton=g.diagnostics["newton"],
                                                 eigen_gap=g.diagnostics["eigen_gap"], params=f["params"],
                                                 wall_first_s=t_first, wall_grad_warm_s=t_grad, wall_fd_s=t_fd, fd_roots=n_fd)
            perf.append(dict(what=f"{f['name']} key {kk}: δ_NN + gradient ({sum(np.size(base[n]) for n in S['vary'][f['name']])} "
                                  f"params) implicit, warm", value=t_grad, unit="s",
                             ratio=t_fd / t_grad if t_grad > 0 else None,
                             note=f"ratio = central FD ({n_fd} root solves, warm) / implicit; first call incl. compile {t_first:.0f} s"))
    # one figure: implicit vs FD for every entry
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    imps = np.array([r["theory"] for r in acc])
    fds = np.array([r["simulation"] for r in acc])
    axes[0].plot(fds, imps, "o")
    lim = [min(fds.min(), imps.min()) - 0.05, max(fds.max(), imps.max()) + 0.05]
    axes[0].plot(lim, lim, "k-", lw=0.5)
    axes[0].set_xlabel("central finite difference of δ_NN")
    axes[0].set_ylabel("implicit derivative")
    axes[0].set_title("dδ_NN/dθ (per key)")
    rel = np.abs(imps - fds) / np.abs(fds)
    axes[1].semilogy(range(len(rel)), rel, "s")
    axes[1].axhline(REL_TOL, color="r", lw=0.8, label="acceptance 1e-3")
    axes[1].set_xticks(range(len(rel)))
    axes[1].set_xticklabels([r["quantity"].split(" (")[0].replace("dδ_NN/d", "") for r in acc], rotation=60, fontsize=7)
    axes[1].set_ylabel("|implicit − FD| / |FD|")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(pathlib.Path(outdir) / f"{NAME}.png", dpi=100)
    return dict(setting=S, accuracy=acc, performance=perf, diagnostics=diag, figure=f"{NAME}.png")
