"""The law of the per-sample Hessian blocks ``D`` (and of the hard coordinates ``ζ``).

THEORY §0/§2: ``D(r, y; a) = ∇²_r ℓ(y, F(r; a)) ∈ R^{m×m}``; the bulk and outlier
equations only need expectations over the joint law of ``(ζ, D)``. A :class:`BlockLaw`
is a weighted sample of that law: Monte Carlo samples (equal weights, e.g. from
``dmft.solve``'s effective process or the user's sampler) or quadrature nodes
(``spectral.quadrature``). Every expectation ``E[f(ζ, D)]`` is ``Σ_i w_i f(ζ_i, D_i)``.

Unbounded support (THEORY §2 "Unbounded weights"): ``unbounded`` records on which side
(``"bottom"``, ``"top"``) the law of ``D`` has unbounded support. It cannot be read off a
finite sample, so it is declared by the constructor (``law_from_problem`` and the
quadrature constructors detect it with a tail test; users can override). Edges and
outliers on an unbounded side need a convention (``"strict"`` or ``"finite-n"``);
:func:`truncate` builds the finite-n law (``D`` truncated at its ``1 − 1/n`` quantile).
"""

from __future__ import annotations

from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import SpectralError, is_concrete

SIDES = ("bottom", "top")


class BlockLaw(eqx.Module):
    """Weighted sample of ``(ζ, D)``: ``D`` (N, m, m) symmetric, ``weights`` (N,) summing to 1,
    ``zeta`` (N, h) the coordinates of ``x`` along the ``h`` hard directions (or None).

    ``unbounded``: tuple of sides on which the support of ``D``'s eigenvalues is unbounded.
    ``source``: provenance string (e.g. "monte-carlo", "quadrature", "dmft t=40", "truncated n=8000").
    """

    D: jax.Array
    weights: jax.Array
    zeta: Optional[jax.Array]
    unbounded: tuple = eqx.field(static=True, default=())
    source: str = eqx.field(static=True, default="samples")

    @property
    def m(self) -> int:
        return self.D.shape[-1]

    @property
    def size(self) -> int:
        return self.D.shape[0]

    def mean(self, f_values):
        """``E[f] = Σ_i w_i f_i`` over the leading axis."""
        return jnp.tensordot(self.weights, f_values, axes=(0, 0))


def _validate(D, weights, zeta, unbounded):
    if D.ndim == 1:
        D = D[:, None, None]
    if D.ndim != 3 or D.shape[1] != D.shape[2]:
        raise SpectralError(f"D must have shape (N, m, m) (or (N,) for m = 1); got {D.shape}.")
    N = D.shape[0]
    if weights.shape != (N,):
        raise SpectralError(f"weights must have shape (N,) = ({N},); got {weights.shape}.")
    if zeta is not None:
        if zeta.ndim == 1:
            zeta = zeta[:, None]
        if zeta.shape[0] != N:
            raise SpectralError(f"zeta must have shape (N, h) with N = {N}; got {zeta.shape}.")
    for s in unbounded:
        if s not in SIDES:
            raise SpectralError(f"unbounded must be a subset of {SIDES}; got {unbounded!r}.")
    if is_concrete(D):
        Dn = np.asarray(D)
        if not np.all(np.isfinite(Dn)):
            bad = int(np.sum(~np.all(np.isfinite(Dn.reshape(N, -1)), axis=1)))
            raise SpectralError(
                f"D contains NaN/inf in {bad} of {N} samples; remove those samples (e.g. "
                "D[jnp.all(jnp.isfinite(D), axis=(1, 2))]) or fix the sampler/loss.")
        asym = np.max(np.abs(Dn - np.swapaxes(Dn, 1, 2))) if N else 0.0
        scale = max(1.0, float(np.max(np.abs(Dn)))) if N else 1.0
        if asym > 1e-8 * scale:
            raise SpectralError(
                f"D is not symmetric (max |D - D^T| = {asym:.3g}); a Hessian block must be "
                "symmetric: pass (D + D^T)/2 if the asymmetry is round-off, otherwise fix the sampler.")
    if is_concrete(weights):
        w = np.asarray(weights)
        if not np.all(np.isfinite(w)) or np.any(w < 0) or abs(w.sum() - 1) > 1e-8:
            raise SpectralError("weights must be finite, >= 0 and sum to 1.")
    if zeta is not None and is_concrete(zeta) and not np.all(np.isfinite(np.asarray(zeta))):
        raise SpectralError("zeta contains NaN/inf; remove those samples or fix the sampler.")
    return D, zeta


def detect_unbounded(D, weights=None) -> tuple:
    """Tail test for unbounded support of the extreme eigenvalues of ``D`` (concrete only).

    For a bounded law the extreme of N samples has converged: the extreme of the whole
    sample exceeds the extreme of a 1/16 subsample by a tiny fraction of the spread. For
    exponential-type tails (e.g. ``−2y`` with ``y = z²``) it grows by ~log(16) tail scales.
    Heuristic; declare ``unbounded`` explicitly when the law is known.
    """
    ev = np.linalg.eigvalsh(np.asarray(D))
    lo, hi = ev[:, 0], ev[:, -1]
    N = lo.size
    if N < 256:
        return ()
    sub = slice(0, N // 16)
    spread = np.quantile(hi, 0.75) - np.quantile(lo, 0.25) + 1e-300
    out = []
    # growth of the extreme relative to the inter-quantile spread
    if (lo[sub].min() - lo.min()) > 0.25 * spread and (np.quantile(lo, 0.01) - lo.min()) > 1.0 * spread:
        out.append("bottom")
    if (hi.max() - hi[sub].max()) > 0.25 * spread and (hi.max() - np.quantile(hi, 0.99)) > 1.0 * spread:
        out.append("top")
    return tuple(out)


def law_from_samples(D, zeta=None, weights=None, unbounded="auto", source="samples") -> BlockLaw:
    """Law from samples ``D`` (N, m, m) (or (N,) for m = 1), optional hard coordinates
    ``zeta`` (N,) or (N, h), optional weights (default 1/N). ``unbounded``: "auto" (tail test,
    :func:`detect_unbounded`), or a tuple of sides, e.g. ``("bottom",)``, or ``()``."""
    D = jnp.asarray(D, dtype=jnp.float64)
    N = D.shape[0]
    weights = jnp.full((N,), 1.0 / N) if weights is None else jnp.asarray(weights, dtype=jnp.float64)
    zeta = None if zeta is None else jnp.asarray(zeta, dtype=jnp.float64)
    if isinstance(unbounded, str):
        if unbounded != "auto":
            unbounded = (unbounded,)
    D, zeta = _validate(D, weights, zeta, () if unbounded == "auto" else tuple(unbounded))
    if unbounded == "auto":
        unbounded = detect_unbounded(D) if is_concrete(D) else ()
    return BlockLaw(D=D, weights=weights, zeta=zeta, unbounded=tuple(unbounded), source=source)


def sample_blocks(problem, y, r, a):
    """Per-sample Hessian blocks ``D_i = ∇²_r ℓ(y_i, F(r_i; a))`` by autodiff
    (``dmft.sample_hessian`` vmapped): ``y`` (N,), ``r`` (N, m) -> (N, m, m)."""
    return _sample_blocks_jit(problem, y, r, a)


@eqx.filter_jit
def _sample_blocks_jit(problem, y, r, a):
    # one compilation per (problem structure, shapes); measured: eager op-by-op autodiff of the
    # vmapped Hessian cost ~0.2 s per call (~80 s of a 160 s quick design_gd run, 407 calls)
    import dmft

    return jax.vmap(lambda yy, rr: dmft.sample_hessian(problem, yy, rr, a))(y, r)


def law_from_problem(problem, y, r, a, zeta=None, unbounded="auto", source="problem") -> BlockLaw:
    """Law of ``(ζ, D(r, y; a))`` from samples of ``(y, r)`` (DMFT effective process or
    finite-d pre-activations ``r = Wᵀx``) and the problem's loss/readout, by autodiff."""
    y = jnp.asarray(y, dtype=jnp.float64)
    r = jnp.asarray(r, dtype=jnp.float64)
    if r.ndim == 1:
        r = r[:, None]
    if r.shape[1] != problem.m:
        raise SpectralError(f"r must have shape (N, m) with m = problem width {problem.m}; got {r.shape}.")
    for name, v in (("y", y), ("r", r)):
        if is_concrete(v) and not np.all(np.isfinite(np.asarray(v))):
            raise SpectralError(f"{name} contains NaN/inf; remove those samples or fix the sampler.")
    a = jnp.asarray(a, dtype=jnp.float64)
    D = sample_blocks(problem, y, r, a)
    if isinstance(unbounded, str) and unbounded == "auto" and is_concrete(D) and is_concrete(r):
        tails = detect_unbounded(D)
        labels = unbounded_through_labels(problem, r, a)
        preacts = unbounded_through_preactivations(problem, y, r, a)
        unbounded = tuple(s for s in SIDES if s in tails or s in labels or s in preacts)
    return law_from_samples(D, zeta=zeta, unbounded=unbounded, source=source)


def unbounded_through_labels(problem, r, a, samples: int = 1024) -> tuple:
    """Sides on which ``D(r, y; a)`` is unbounded because the label is (concrete only).

    With square loss on ``y = z²``, ``D = ∇F∇Fᵀ + (F − y)∇²F`` falls without bound as ``y`` grows
    wherever ``∇²F(r)`` has a positive eigenvalue; whether a finite sample's tail shows it depends
    on the sample (the tail test :func:`detect_unbounded` flagged the GeLU phase-retrieval DMFT law
    at some δ and not at others). Here the question is put to the problem: along the label's
    growing ray (:meth:`dmft.Teacher.unbounded_label_levels`, values ``Y0 < Y1 < Y2``), the
    smallest eigenvalue of ``D(r_i, Y)`` over the first ``samples`` rows of ``r`` is evaluated at
    the three values; "bottom" is flagged when it decreases and keeps decreasing
    (``λ(Y1) − λ(Y2) ≥ ½ (λ(Y0) − λ(Y1)) > 0``: linear growth in ``y`` passes, a bounded-curvature
    loss whose ``D`` saturates does not); "top" likewise for the largest eigenvalue. Since the
    inputs are Gaussian, any ``r`` occurs together with any label value, so this is the
    unboundedness of the law's support, not of the sample."""
    levels = problem.teacher.unbounded_label_levels()
    if not levels:
        return ()
    rr = jnp.asarray(r, dtype=jnp.float64)[:samples]
    out = set()
    for Ys in levels.values():
        ev = [np.linalg.eigvalsh(np.asarray(sample_blocks(problem, jnp.full(rr.shape[0], Y), rr, a))) for Y in Ys]
        lo = [float(e[:, 0].min()) for e in ev]
        hi = [-float(e[:, -1].max()) for e in ev]
        for side, v in (("bottom", lo), ("top", hi)):
            d1, d2 = v[0] - v[1], v[1] - v[2]
            if np.isfinite(v).all() and d1 > 0 and d2 >= 0.5 * d1:
                out.add(side)
    return tuple(s for s in SIDES if s in out)


def _keeps_growing(v):
    """``v[..., 0:4]`` at ``s``, ``4s``, ``16s``, ``64s`` along a ray: decreasing, each increment
    at least 1.5 times the one before (``|r|^p`` growth gives ``4^p``: linear 4, square root 2). A
    saturating or decaying ``v`` fails: softplus'' → 0 gives e.g. ``0.048, 0.047, 5e-8, 0`` (a
    late collapse passes one ratio, not both)."""
    d = v[..., :-1] - v[..., 1:]
    return (np.all(np.isfinite(v), axis=-1) & (d[..., 0] > 1e-9 * (1 + np.abs(v[..., 0])))
            & np.all(d[..., 1:] >= 1.5 * d[..., :-1], axis=-1))


def unbounded_through_preactivations(problem, y, r, a, labels: int = 8, directions: int = 8) -> tuple:
    """Sides on which ``D(r, y; a)`` is unbounded because the pre-activations are (concrete only).

    The companion of :func:`unbounded_through_labels` for tails driven by ``r``. Examples: a
    quadratic or relu-power readout has ``∇F∇Fᵀ ∝ r rᵀ``, so ``D`` grows without bound with
    ``|r|`` — with a loss whose curvature vanishes at large residual (Huber) only where the label
    follows the output, ``y ≈ F(r)``; under square loss with ``m ≥ 2`` a GeLU student has
    ``D_jj ∋ (F − y) a_j σ''(r_j)``, unbounded on both sides when one unit's ``r_i`` grows while
    ``r_j`` stays where ``σ''`` has either sign. A tail test on a finite sample sees such growth in
    some draws and not in others (measured: one quadratic-Huber DMFT law, flagged on the top side
    by :func:`detect_unbounded` in 3 of 4 keys). Here the question is put to the problem: from each
    of the first ``labels`` sample points ``(r_i, y_i)``, and from ``c·(1, …, 1)`` (``c`` = ±2, ±4
    times ``sd(r)``, median label), along the rays ``r_i + s·u`` (``u`` = each
    coordinate axis and ``directions`` fixed random unit vectors, both signs; ``s`` = 8, 32, 128,
    512 times ``max(1, sd(r))``), with the label held at ``y_i`` (growing residual) or set to the
    student's own output ``F`` clipped to the label range (zero residual; the range is the
    sample's ``[min y, max y]``, open on a side where :meth:`dmft.Teacher.unbounded_label_levels`
    finds the label unbounded), "bottom" is flagged when the smallest eigenvalue of ``D`` keeps
    decreasing on some ray (:func:`_keeps_growing`: growth like ``|r|^p``, ``p ≥ ½``, passes;
    saturation does not), "top" likewise for the largest. Since ``r`` given the labels is
    Gaussian (finite d: ``r = Wᵀx``) or built from Gaussian fields (the DMFT effective process),
    every ``r`` occurs with every label of the range: this is the support of the law, not of the
    sample. Its tail may be thin (``D`` linear in a Gaussian ``r``): the strict convention then
    has no edge on that side although a finite sample shows one; the finite-n convention
    (:func:`truncate`) is the one to compare with finite-d spectra."""
    m = problem.m
    rng = np.random.default_rng(20261204)
    extra = rng.standard_normal((directions, m))
    U = np.concatenate([np.eye(m), extra / np.linalg.norm(extra, axis=1, keepdims=True)])
    U = np.concatenate([U, -U])
    yn, sd = np.asarray(y, dtype=np.float64), max(1.0, float(np.std(np.asarray(r))))
    # ray origins: the first `labels` sample points, and c·(1, …, 1) for c = ±2, ±4 sd(r) with the
    # median label (so that one unit can sit where σ'' < 0 — silu: r < −2.4 — while another grows)
    rn = np.concatenate([np.asarray(r, dtype=np.float64)[:labels], np.outer(sd * np.array([-4.0, -2.0, 2.0, 4.0]), np.ones(m))])
    y0 = np.concatenate([yn[:labels], np.full(4, float(np.median(yn)))])
    s = np.array([8.0, 32.0, 128.0, 512.0]) * sd
    R = rn[:, None, None, :] + U[None, :, None, :] * s[None, None, :, None]  # (origins, rays, 4, m)
    levels = problem.teacher.unbounded_label_levels()
    y_lo = -np.inf if "below" in levels else float(yn.min())
    y_hi = np.inf if "above" in levels else float(yn.max())
    a = jnp.asarray(a, dtype=jnp.float64)
    flat = jnp.asarray(R.reshape(-1, m))
    F = np.asarray(jax.vmap(lambda rr: problem.student.F(rr, a))(flat), dtype=np.float64)
    held = np.broadcast_to(y0[:, None, None], R.shape[:3]).reshape(-1)
    Y = np.concatenate([held, np.clip(F, y_lo, y_hi)])
    D = sample_blocks(problem, jnp.asarray(Y), jnp.concatenate([flat, flat]), a)
    ev = np.linalg.eigvalsh(np.asarray(D)).reshape((2,) + R.shape)  # (label choice, origins, rays, 4, m)
    out = []
    if np.any(_keeps_growing(ev[..., 0])):
        out.append("bottom")
    if np.any(_keeps_growing(-ev[..., -1])):
        out.append("top")
    return tuple(out)


def law_from_dmft(problem, traj, t, hard=None, unbounded="auto") -> BlockLaw:
    """Law of ``(ζ, D)`` at DMFT time ``t`` from ``traj = dmft.solve(..., save_samples_at=(t,))``:
    ``traj.samples[t]`` with ``z`` (N, k), ``y`` (N,), ``r`` (N, m), second layer
    ``traj.second_layer[t]``. ``hard``: teacher coordinates that are hard (default: the
    teacher's even coordinates)."""
    if t not in traj.samples:
        raise SpectralError(f"law_from_dmft: the trajectory holds no samples at step t = {t!r} (saved: "
                            f"{sorted(traj.samples)}); run dmft.solve(..., save_samples_at=({t!r},)) to keep the effective "
                            "process at that step.")
    smp = traj.samples[t]
    hard = problem.teacher.hard_coordinates() if hard is None else tuple(hard)
    z = jnp.asarray(smp.z if hasattr(smp, "z") else smp["z"])
    y = smp.y if hasattr(smp, "y") else smp["y"]
    r = smp.r if hasattr(smp, "r") else smp["r"]
    a = traj.second_layer[t]
    zeta = z[:, list(hard)] if len(hard) else None
    return law_from_problem(problem, y, r, a, zeta=zeta, unbounded=unbounded, source=f"dmft t={t}")


def tail_order(law: BlockLaw, side: str):
    """The samples ordered from the most extreme on ``side`` (smallest eigenvalue of ``D`` for "bottom",
    largest for "top"): ``(e, order, cw, ev)`` with ``e`` the extreme eigenvalue (negated for "top"),
    ``order = argsort(e)``, ``cw`` the cumulative weight along ``order`` (the tail mass up to each
    sample) and ``ev`` all eigenvalues (N, m). Concrete arrays only."""
    ev = np.linalg.eigvalsh(np.asarray(law.D))
    e = ev[:, 0] if side == "bottom" else -ev[:, -1]
    order = np.argsort(e)
    return e, order, np.cumsum(np.asarray(law.weights)[order]), ev


def truncate(law: BlockLaw, n: int, side: str, mode: str = "drop") -> BlockLaw:
    """Finite-n convention (THEORY §2): the law of ``D`` truncated at its ``1 − 1/n``
    quantile on ``side`` — samples whose extreme eigenvalue (smallest for "bottom",
    largest for "top") lies beyond the ``1/n`` tail quantile are dropped and the weights
    renormalized (conditioning on the bulk of n samples). Concrete arrays only."""
    if side not in SIDES:
        raise SpectralError(f"side must be 'bottom' or 'top'; got {side!r}.")
    if n is None or not (n > 1):
        raise SpectralError("convention='finite-n' needs the sample size n > 1 (pass n=delta*d).")
    e, order, cw, _ = tail_order(law, side)
    w = np.asarray(law.weights)
    # weighted 1/n quantile of the extreme eigenvalue
    q = e[order][min(np.searchsorted(cw, 1.0 / n), len(cw) - 1)]
    if mode == "clip":  # move the tail mass onto the quantile (eigenvalues of D clipped)
        D = np.asarray(law.D)
        evals, vecs = np.linalg.eigh(D)
        if side == "bottom":
            evals = np.maximum(evals, q)
        else:
            evals = np.minimum(evals, -q)
        Dc = np.einsum("nij,nj,nkj->nik", vecs, evals, vecs)
        return BlockLaw(D=jnp.asarray(Dc), weights=law.weights, zeta=law.zeta,
                        unbounded=tuple(s for s in law.unbounded if s != side),
                        source=f"{law.source}; clipped at 1-1/n quantile ({side}), n={n}")
    if mode != "drop":
        raise SpectralError(f"truncate mode must be 'drop' or 'clip'; got {mode!r}.")
    keep = e >= q
    wk = w * keep
    wk = wk / wk.sum()
    idx = np.nonzero(keep)[0]
    return BlockLaw(D=law.D[idx], weights=jnp.asarray(wk[idx]),
                    zeta=None if law.zeta is None else law.zeta[idx],
                    unbounded=tuple(s for s in law.unbounded if s != side),
                    source=f"{law.source}; truncated at 1-1/n quantile ({side}), n={n}")


def stratify(law: BlockLaw, side: str, *, tail_mass: float, bulk: int, seed: int = 0) -> BlockLaw:
    """A smaller law with the same tail: every sample within tail mass ``tail_mass`` of the extreme on
    ``side`` (the order of :func:`tail_order`) kept with its weight, and the others replaced by ``bulk``
    of them chosen by systematic sampling along that order (points ``(u + k)/bulk``, k < ``bulk``, of
    their cumulative weight, one uniform ``u`` from numpy ``seed``), each carrying ``1/bulk`` of their total
    weight. Unbiased for every expectation over the bulk, and exact in the law of the extreme eigenvalue
    up to ``1/bulk`` of the bulk's mass (so its Monte Carlo error is far below a uniform subsample's);
    the tail quantiles below ``tail_mass`` (:func:`truncate` at ``n ≥ 1/tail_mass``, the levels of
    :func:`spectral.finite_n_edge_law`) are the full law's exactly (levels beyond ``tail_mass`` and the other
    side are not: a two-sided law keeps both unbounded sides but only this side's tail; and for m > 1 the
    bulk's block structure is sampled, so edges move by ~0.01–0.04 at m = 2, the size of the full law's own
    Monte Carlo spread: user audit, session 49). Why: the edge solves cost ∝ samples,
    and the law of an extreme needs a pool large in its tail only (docs/spectral.md "The pool must reach
    the tail"). Concrete arrays only."""
    if side not in SIDES:
        raise SpectralError(f"side must be 'bottom' or 'top'; got {side!r}.")
    if not (np.isfinite(tail_mass) and 0.0 < tail_mass < 1.0):
        raise SpectralError(f"tail_mass must lie in (0, 1) (the weight kept whole on side={side!r}); got {tail_mass!r}.")
    _, order, cw, _ = tail_order(law, side)
    # samples with cumulative tail weight ≤ tail_mass, plus the first one past it: truncate() at n = 1/tail_mass
    # indexes that sample, which a systematic bulk pick replaced (quantile off by 0.033 at the boundary: audit)
    k = min(int(np.searchsorted(cw, tail_mass, side="right")) + 1, order.size - 1)
    rest = order[k:]
    if not (isinstance(bulk, (int, np.integer)) and 1 <= bulk < rest.size):
        raise SpectralError(f"bulk must be an integer in [1, {rest.size}) (the samples outside the tail: fewer, or use "
                            f"the law itself); got {bulk!r}.")
    w = np.asarray(law.weights, float)
    c_rest = np.cumsum(w[rest])
    u = (np.random.default_rng(seed).uniform() + np.arange(int(bulk))) / int(bulk) * c_rest[-1]
    pick = rest[np.minimum(np.searchsorted(c_rest, u, side="right"), rest.size - 1)]
    idx = np.concatenate([order[:k], pick])
    wn = np.concatenate([w[order[:k]], np.full(int(bulk), c_rest[-1] / int(bulk))])
    return BlockLaw(D=law.D[idx], weights=jnp.asarray(wn / wn.sum()),
                    zeta=None if law.zeta is None else law.zeta[idx], unbounded=law.unbounded,
                    source=f"{law.source}; stratified ({side}): tail mass {tail_mass:g} whole ({k} samples), "
                           f"{int(bulk)} of {rest.size} others (systematic along the tail order)")


def padded_size(n: int) -> int:
    """Sample count a law is padded to before a jitted solver (:func:`for_jit`): ``n`` itself up to
    256; up to 16384 the smallest ``2^k`` or ``1.5·2^k`` ≥ ``n`` (at most 50% more rows, where
    compilation dominates); above, the next multiple of 2048 (at most 12.5% more, where the
    solve itself dominates)."""
    if n <= 256:
        return n
    if n > 16384:
        return -(-int(n) // 2048) * 2048
    p = 1 << (int(n) - 1).bit_length()          # smallest power of two ≥ n
    return 3 * p // 4 if 3 * p // 4 >= n else p


def for_jit(law: BlockLaw) -> BlockLaw:
    """The law as the jitted solvers take it: an empty provenance string and no ``unbounded``
    sides (both are static fields: laws with different provenance, or whose tail test
    (``unbounded="auto"``) came out differently at another δ or t, would recompile the solver;
    the sides are resolved into a convention before the jitted solve, which never reads them) and the
    sample axis padded to :func:`padded_size` with weight-0 copies of the first sample (a new
    sample count is a new shape, hence a new compilation: finite-n truncation and n = δd give
    a different count at every δ). Every solver quantity is a weighted mean over samples, and the
    extreme eigenvalues of ``D`` (used for brackets) are unchanged by copies, so the padded law
    is the same law."""
    n = law.size
    pad = padded_size(n) - n
    if law.source == "" and law.unbounded == () and pad == 0:
        return law
    D, w, z = law.D, law.weights, law.zeta
    if pad:
        D = jnp.concatenate([D, jnp.broadcast_to(D[:1], (pad,) + D.shape[1:])])
        w = jnp.concatenate([w, jnp.zeros((pad,), w.dtype)])
        z = None if z is None else jnp.concatenate([z, jnp.broadcast_to(z[:1], (pad,) + z.shape[1:])])
    return BlockLaw(D=D, weights=w, zeta=z, unbounded=(), source="")
