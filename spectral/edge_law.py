"""The law of the finite-n edge over draws of the n samples, on an unbounded side (THEORY §2).

Why. The finite-n convention (:func:`spectral.truncate`) puts the edge of a law unbounded on ``side``
at the edge ``e(1)`` of the law truncated at its ``1 − 1/n`` tail quantile: one number. The edge of a
finite-d Hessian on that side is set by its most extreme samples: it varies from draw to draw (seed sd
0.06–0.09 for the phase-retrieval laws of ``benchmarks/bench_finite_n_edge.py``, as large as the
whole log n correction between d = 250 and 2000), and its median and mean are not ``e(1)``.

Notation. ``e(c)``: the edge of the law truncated at tail mass ``c/n`` (``c`` = 1 is the convention;
:func:`spectral.bulk_edge` at effective sample size ``n/c``). Order the n samples by their extreme
eigenvalue (smallest of ``D`` for "bottom"); the tail masses beyond the first two are ``Γ₁/n < Γ₂/n``
with ``Γ₁ = E₁``, ``Γ₂ = E₁ + E₂`` (``E_j`` standard exponential: the points of a unit Poisson
process, n → ∞).

Model "gumbel" (default). ``edge_n ≈ e(Γ₁)``: the law truncated at the most extreme sample's tail
mass. With ``e`` linear in ``ln(1/c)`` (``s = de/d ln n``, fitted over the levels) ``edge_n = e₁ + s·G``,
``G = −ln Γ₁`` standard Gumbel: median ``e(ln 2)`` (solved, not fitted), mean ``e₁ + γ s``
(γ = 0.5772…), sd ``π|s|/√6``, and the distribution :meth:`EdgeLaw.prob_beyond`. The convention's
``e(1)`` is the 63 % point: 63 % of draws lie beyond it.

Model "spike". The most extreme sample ``D₁`` (the law's sample at tail mass ``Γ₁/n``) as a rank-m
perturbation ``(1/n) x₁x₁ᵀ ⊗ D₁`` of the Hessian of the others, whose spectrum is the law truncated at
``Γ₂/n`` with real Stieltjes matrix ``S(λ)`` outside its support. By the leave-one-out step behind the
block equation (one sample's term is ``D (I + S D/δ)^{-1}``), ``D₁`` makes an eigenvalue beyond the bulk
where ``det(I + S(λ) D₁/δ) = 0``; the edge is the first such λ from far outside, else ``e(Γ₂)``. ``D₁``
is scaled by ``‖x₁‖²/d ~ χ²_d/d`` (``norm_fluctuation``, d = n/δ). The law is sampled (``configs``
draws of (Γ₁, Γ₂, D₁, ‖x₁‖²), numpy ``seed``) on tables of ``S(λ)`` per level (``grid`` points uniform
in ``√|e − λ|``), interpolated linearly in ``ln c`` between levels (extrapolated from the end segments
up to a factor 4, clipped beyond: ``clipped`` is the fraction of draws that needed either).

Which is right (dense eigendecompositions, session 38; docs/spectral.md has the tables): neither
exactly. m = 1, ``D = 1 − g²/2``, δ = 3: at d = 200 / 400 the spike model is within 0.003–0.015 of
the draws' median and mean and the Gumbel model 0.03–0.05 too extreme; at d = 1000 / 2000 the Gumbel
model is within 0.01–0.02 and the spike model 0.03 too mild at d = 1000. The phase-retrieval DMFT law
of ``finite_n_edge`` (m = 4, d = 250, iid blocks, 600 draws): Gumbel median / mean / sd −0.442 /
−0.454 / 0.075 against the draws' −0.440 / −0.452 ± 0.003 / 0.076; the spike model's −0.422 / −0.431 /
0.068 is too mild (its ‖x₁‖² factor leaves out the finite-d splitting of the m − 1 degenerate extreme
directions of a phase-retrieval block; a Wishart factor in its place overshoots to −0.464 / −0.471).
Hence the default. The convention's e(1) is off in every case (−0.417 there). Neither model includes
the bulk's own ``n^{−2/3}`` edge fluctuation.

Cost: one finite-n edge solve per level, one continuation of ``S(λ)`` over ``grid`` points per level
(a few per cent of an edge solve), and numpy for the draws. The level ``c`` keeps ``samples·c/n``
samples of the law beyond it: levels below 1 need proportionally more samples than the convention
(``tail_samples``; ``adequate`` is False below ``min_tail_samples``), and a draw whose ``Γ₁/n`` lies
beyond the law's most extreme sample uses that sample (``beyond_sample``: the fraction of such
draws)."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import SpectralError
from .law import BlockLaw, for_jit, tail_order, truncate
from .stieltjes import _real_point, bulk_edge, far_start

GUMBEL_MEAN = float(np.euler_gamma)           # E[G], G = −ln E, E standard exponential
GUMBEL_MEDIAN = -math.log(math.log(2.0))      # median of G
GUMBEL_SD = math.pi / math.sqrt(6.0)          # sd of G
LEVELS = (0.5, math.log(2.0), 1.0, 2.0, 4.0)  # tail masses c (units of 1/n); ln 2 and 1 are always added
MODELS = ("gumbel", "spike")


GUMBEL_LINEARITY = 0.05   # largest e(c) misfit of the Gumbel line, in units of its sd, accepted as linear
LINEARITY_MIN_TAIL = 100  # tail samples per level below which the misfit is Monte Carlo noise (not tested)


def gumbel_prob_beyond(x, slope, intercept):
    """P(edge_n beyond ``x``) under the Gumbel line ``e(c) = intercept + slope·ln(1/c)``:
    ``1 − exp(−c(x))``, ``ln(1/c(x)) = (x − intercept)/slope`` (the CDF on the bottom side)."""
    return 1.0 - np.exp(-np.exp(-(np.asarray(x, float) - intercept) / slope))


class EdgeLaw(eqx.Module):
    """Law of the finite-n edge on ``side`` (module docstring). ``levels``: tail masses ``c`` (units of
    1/n); ``edges``: ``e(c)``; ``probability``: ``1 − e^{−c}``; ``convention_edge = e(1)`` (the finite-n
    convention's edge, as :func:`spectral.bulk_edge` gives it). ``median``, ``mean``, ``sd``,
    :meth:`prob_beyond`, :meth:`quantile`: of ``model``'s law (``draws``: its sampled edges, sorted, for
    "spike"). Always reported, from the Gumbel line ``e(c) ≈ intercept + slope·ln(1/c)`` (least
    squares): ``slope`` (= de/d ln n), ``intercept``, ``fit_residual`` (largest misfit), ``gumbel_median``
    (= e(ln 2), solved), ``gumbel_mean``, ``gumbel_sd``. Diagnostics: ``tail_samples`` per level,
    ``adequate``, ``clipped``, ``beyond_sample``, ``converged`` (every solve converged)."""

    levels: tuple
    edges: tuple
    probability: tuple
    convention_edge: float
    model: str
    median: float
    mean: float
    sd: float
    draws: np.ndarray
    slope: float
    intercept: float
    fit_residual: float
    gumbel_median: float
    gumbel_mean: float
    gumbel_sd: float
    tail_samples: tuple
    adequate: bool
    clipped: float
    beyond_sample: float
    converged: bool
    side: str = eqx.field(static=True, default="bottom")
    setting: dict = eqx.field(static=True, default=None)
    gumbel_linear: bool = True   # fit_residual ≤ GUMBEL_LINEARITY · gumbel_sd (an exponential tail); notes in setting

    def prob_beyond(self, x):
        """P(a draw's finite-n edge lies beyond ``x`` on ``side``): for "bottom" the CDF ``P(edge_n ≤ x)``,
        for "top" ``P(edge_n ≥ x)``. "spike": the fraction of the sampled draws; "gumbel":
        ``1 − exp(−c(x))`` with ``ln(1/c(x)) = (x − intercept)/slope``."""
        x = np.asarray(x, float)
        if self.model == "gumbel":
            return gumbel_prob_beyond(x, self.slope, self.intercept)
        d = np.sort(self.draws)
        if self.side == "bottom":
            return np.searchsorted(d, x, side="right") / d.size
        return 1.0 - np.searchsorted(d, x, side="left") / d.size

    def quantile(self, p):
        """The edge that a fraction ``p`` of draws lies beyond."""
        p = np.asarray(p, float)
        if self.model == "gumbel":
            return self.intercept + self.slope * (-np.log(-np.log1p(-p)))
        return np.quantile(self.draws, p if self.side == "bottom" else 1.0 - p)


def _s_table(law, delta, side, edge, S_edge, lam_far, grid: int):
    """Real Stieltjes matrices on ``grid + 1`` points from ``lam_far`` to the edge, uniform in
    ``u = √|edge − λ|`` (S has a square-root singularity at the edge): continuation from far, each
    point warm-started from the previous; the last point is the edge solve's own S.
    Returns (λ (grid+1,), S (grid+1, m, m), ok (grid+1,)) ordered from far to the edge."""
    s = 0 if side == "bottom" else 1
    u_max = jnp.sqrt(jnp.abs(edge - lam_far))
    sgn = -1.0 if side == "bottom" else 1.0
    lam = edge + sgn * (u_max * jnp.arange(grid, 0, -1) / grid) ** 2

    def step(S, l):
        S1, _, _, _, ok, _ = _real_point(law, l, delta, S, jnp.asarray(s), 1e-12, 60, 0.5, "newton")
        return S1, (S1, ok)

    _, (Ss, oks) = jax.lax.scan(step, far_start(law, lam[0]), lam)
    return (jnp.concatenate([lam, edge[None]]), jnp.concatenate([Ss, S_edge[None]]),
            jnp.concatenate([oks, jnp.asarray([True])]))


_s_table_jit = eqx.filter_jit(_s_table)


def _psd_sqrt(S, sgn):
    """``R`` with ``R Rᵀ = sgn·S`` (S definite of sign ``sgn``), batched."""
    w, V = np.linalg.eigh(sgn * S)
    return V * np.sqrt(np.maximum(w, 0.0))[..., None, :]


def _spike_edges(lam, S, edge, D1, delta, side):
    """Per draw: the first λ (from far) with det(I + S(λ) D₁/δ) = 0 on the table, else the edge.
    μ(λ) = smallest eigenvalue of I + sgn·RᵀD₁R/δ (similar to I + S D₁/δ, R Rᵀ = sgn·S) is 1 far out
    and decreasing toward the edge; the root is interpolated linearly in u = √|edge − λ|."""
    sgn = 1.0 if side == "bottom" else -1.0
    R = _psd_sqrt(S, sgn)                                        # (K, m, m)
    M = np.einsum("kji,njl,klp->nkip", R, D1, R) * (sgn / delta)
    mu = 1.0 + np.linalg.eigvalsh(M)[..., 0]                     # (draws, K), far → edge
    u = np.sqrt(np.abs(edge - lam))
    neg = mu <= 0.0
    has = neg.any(axis=1)
    k = np.where(has, np.argmax(neg, axis=1), 0)                 # first grid point with μ ≤ 0
    k0 = np.maximum(k - 1, 0)
    rows = np.arange(mu.shape[0])
    m0, m1 = mu[rows, k0], mu[rows, k]
    t = np.where(m0 > m1, m0 / np.where(m0 > m1, m0 - m1, 1.0), 1.0)
    uu = u[k0] + t * (u[k] - u[k0])
    root = edge - sgn * uu ** 2
    root = np.where(k == 0, lam[0], root)                        # μ ≤ 0 already at the far end: flagged by the caller
    return np.where(has, root, edge), has & (k == 0)


def finite_n_edge_law(law: BlockLaw, delta, side: str = "bottom", *, n, model: str = "gumbel", levels=LEVELS,
                      configs: int = 4000, seed: int = 0, grid: int = 48, norm_fluctuation: bool = True,
                      min_tail_samples: int = 20, **edge_options) -> EdgeLaw:
    """The law of the finite-n edge of ``law`` on its unbounded ``side`` at ``n = δd`` samples (module
    docstring): one :func:`spectral.bulk_edge` solve (``convention="finite-n"``, effective sample size
    ``n/c``) per tail level ``c`` of ``levels`` (ln 2 and 1 are always added), and for ``model="spike"``
    a table of ``S(λ)`` per level and ``configs`` sampled draws (numpy seed ``seed``). ``edge_options``
    go to :func:`spectral.bulk_edge`. Raises :class:`SpectralError` for a bad ``n`` / ``levels`` /
    ``side`` / ``model`` and when ``side`` is not unbounded (a bounded side's edge is not set by an
    extreme sample: use :func:`spectral.bulk_edge`)."""
    if side not in ("bottom", "top"):
        raise SpectralError(f"side must be 'bottom' or 'top'; got {side!r}.")
    if model not in MODELS:
        raise SpectralError(f"model must be one of {MODELS}; got {model!r}.")
    if n is None or not np.isfinite(n) or not n > 1:
        raise SpectralError(f"n must be the number of samples n = delta*d > 1; got {n!r}.")
    lv = sorted({float(c) for c in levels} | {math.log(2.0), 1.0})
    if any(not (np.isfinite(c) and 0.0 < c < n) for c in lv):
        raise SpectralError(f"levels are tail masses in units of 1/n and must lie in (0, n); got {tuple(levels)!r}.")
    if model == "spike" and (int(configs) < 100 or int(grid) < 8):
        raise SpectralError(f"model='spike' needs configs >= 100 and grid >= 8; got configs={configs}, grid={grid}.")
    if side not in law.unbounded:
        raise SpectralError(f"finite_n_edge_law: the law is bounded on side={side!r} (unbounded={law.unbounded!r}); "
                            "its edge there is not set by an extreme sample, use spectral.bulk_edge.")
    # one truncation per level, for its edge and (spike) its S(λ) table; e(1) is bulk_edge's finite-n edge
    laws = [truncate(law, n / c, side) for c in lv]
    res = [bulk_edge(tl, delta, side, throw=False, **edge_options) for tl in laws]
    e = np.array([float(r.edge) for r in res])
    conv = all(bool(r.converged) for r in res)
    x = np.log(1.0 / np.asarray(lv))
    slope, intercept = np.polyfit(x, e, 1)
    resid = float(np.max(np.abs(e - (intercept + slope * x))))
    # the law's samples ordered by their extreme eigenvalue, most extreme first, with weighted tail masses
    _, order, cw, ev = tail_order(law, side)
    tail = [int(np.searchsorted(cw, c / n)) for c in lv]
    draws, clipped, beyond = np.asarray([]), 0.0, 0.0
    if model == "spike":
        rng = np.random.default_rng(seed)
        g1 = rng.exponential(size=configs)
        g2 = g1 + rng.exponential(size=configs)
        idx = np.minimum(np.searchsorted(cw, g1 / n), cw.size - 1)
        beyond = float(np.mean(g1 / n < cw[0]))
        D1 = np.asarray(law.D, float)[order[idx]]
        if norm_fluctuation:                    # ‖x₁‖²/d at d = n/δ
            dd = float(n) / float(delta)
            D1 = D1 * (rng.chisquare(dd, size=configs) / dd)[:, None, None]
        mean_ev = float(np.average(ev.mean(axis=1), weights=np.asarray(law.weights)))
        d_ext = float(np.max(np.abs(ev)))
        per_level = np.empty((len(lv), configs))
        for j, c in enumerate(lv):
            e_c = float(res[j].edge)
            far = (min(e_c, mean_ev) - 2.0 * d_ext / float(delta) - 1.0 if side == "bottom"
                   else max(e_c, mean_ev) + 2.0 * d_ext / float(delta) + 1.0)
            lam, S, ok = _s_table_jit(for_jit(laws[j]), jnp.asarray(delta, float), side, jnp.asarray(e_c), res[j].S, jnp.asarray(far),
                                      int(grid))
            conv = conv and bool(np.all(ok))
            per_level[j], at_far = _spike_edges(np.asarray(lam), np.asarray(S), e_c, D1, float(delta), side)
            conv = conv and not bool(np.any(at_far))
        lc, lg2 = np.log(lv), np.log(g2)
        lo, hi = lc[0] - math.log(4.0), lc[-1] + math.log(4.0)
        clipped = float(np.mean((lg2 < lc[0]) | (lg2 > lc[-1])))
        t = np.clip(lg2, lo, hi)
        j = np.clip(np.searchsorted(lc, t) - 1, 0, len(lv) - 2)  # segment (extrapolating from the end ones)
        a = (t - lc[j]) / (lc[j + 1] - lc[j])
        rows = np.arange(configs)
        draws = np.sort((1 - a) * per_level[j, rows] + a * per_level[j + 1, rows])
    setting = dict(delta=float(delta), n=float(n), side=side, model=model, levels=lv, samples=int(law.size),
                   law=law.source, configs=int(configs), seed=int(seed), grid=int(grid),
                   norm_fluctuation=bool(norm_fluctuation),
                   min_tail_samples=int(min_tail_samples), edge_options=dict(edge_options),
                   conventions=dict(levels="tail mass c/n of the truncated law; c = 1 is the finite-n convention",
                                    spike="most extreme sample D1 (tail mass Γ1/n) against the law truncated at Γ2/n: "
                                          "det(I + S(λ) D1/δ) = 0 beyond its edge, else its edge",
                                    gumbel="edge = e(Γ1), e linear in ln(1/c)"))
    g_mean, g_sd = float(intercept + GUMBEL_MEAN * slope), float(GUMBEL_SD * abs(slope))
    med = float(e[lv.index(math.log(2.0))])
    notes = []
    # e(c) must be linear in ln(1/c) for the Gumbel law (an exponential tail). Measured (session 49, n = 1200,
    # δ = 3, misfit / Gumbel sd at 2^16 / 2^18 / 2^20 samples): the design law 1 − g²/2 0.088 / 0.035 / 0.003
    # (Monte Carlo noise of the tail: its Gumbel sd is 10–15 % low); a Gaussian tail D = −|g| 0.10 / 0.11 / 0.10
    # (Gumbel sd half the dense one); a lognormal tail 0.15 / 0.030 / 0.037 (sd 40 % low: NOT caught). Tested only
    # with ≥ 100 tail samples at every level, where the noise is below the threshold.
    tested = min(tail) >= LINEARITY_MIN_TAIL
    linear = bool(not tested or (g_sd > 0 and resid <= GUMBEL_LINEARITY * g_sd))
    if not tested:
        notes.append(f"linearity of e(c) not tested (fewer than {LINEARITY_MIN_TAIL} tail samples at some level)")
    if not linear:
        notes.append(f"e(c) is not linear in ln(1/c) (largest misfit {resid:.3g} = {resid / max(g_sd, 1e-300):.2g} of the "
                     "Gumbel sd): the tail is not exponential and the Gumbel law's spread can be off by tens of "
                     "percent; compare model='spike' and dense draws (spectral.matrix_model)")
    point_mass = bool(np.ptp(e) <= 1e-9 * max(1.0, float(np.max(np.abs(e)))))
    if point_mass:
        notes.append("the edges at every level coincide: the tail is a point mass (a bounded side declared unbounded?); "
                     "the edge does not fluctuate with the extreme sample — use spectral.bulk_edge")
    setting["notes"] = notes
    if model == "spike":
        stats = (float(np.quantile(draws, 0.5)), float(draws.mean()), float(draws.std(ddof=1)))
    else:
        stats = (med, g_mean, g_sd)
    return EdgeLaw(levels=tuple(lv), edges=tuple(float(v) for v in e), probability=tuple(1.0 - math.exp(-c) for c in lv),
                   convention_edge=float(e[lv.index(1.0)]), model=model, median=stats[0], mean=stats[1], sd=stats[2],
                   draws=draws, slope=float(slope), intercept=float(intercept), fit_residual=resid, gumbel_median=med,
                   gumbel_mean=g_mean, gumbel_sd=g_sd, tail_samples=tuple(tail),
                   adequate=bool(min(tail) >= min_tail_samples and not point_mass), clipped=clipped, beyond_sample=beyond,
                   converged=bool(conv), side=side, setting=setting, gumbel_linear=linear)
