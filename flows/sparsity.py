"""Zero-preserving subsets and preserved sparsity (THEORY §5).

Z is zero-preserving if  w_Z = 0  ⇒  ∇_{w_Z} 𝓛(w) = 0,  i.e. {w : w_Z = 0} is invariant under
the gradient flow. For feed-forward nets with σ(0) = 0, {incoming column j of W_l} ∪ {outgoing
row j of W_{l+1}} is zero-preserving (σ'(0) = 0, e.g. ReLU^p p > 1 or square: the incoming
column alone is). `zero_preserving_subset` starts from the zero entries of a KKT point and
removes, by exact autodiff tests at random points of {w_Z = 0}, every entry whose gradient
does not vanish, until the set is invariant (the largest zero-preserving subset it contains).
"""
from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .errors import FlowError
from .flow import gradient_flow
from .limiting import time_shift, ncf_blowup_time
from .models import as_model, check_degree, require_theory
from .ncf import make_loss


class ZeroPreserving(eqx.Module):
    mask: Any            # pytree of bools: True on Z
    n_zero: int          # |Z|
    n_candidates: int    # zero entries of the KKT point
    n_removed: int       # zero entries that are not zero-preserving
    probes: int
    grad_tol: float      # relative tolerance: |∂_i 𝓛| ≤ grad_tol·max_j |∂_j 𝓛| counts as 0 on {w_Z = 0}
    max_kept_grad: float  # largest relative |∂_i 𝓛| over Z at the probes: 0.0 = structural (exact) invariance,
                          # > 0 (rounding level) = invariance from a symmetry of this data


def zero_preserving_subset(model, direction, X, y, loss="square", zero_tol: float = 1e-6,
                           key=None, probes: int = 3, params_like=None, grad_tol: float = 1e-12) -> ZeroPreserving:
    """The zero-preserving subset contained in the zero pattern of `direction` (a KKT point).

    An entry stays in Z when its gradient on {w_Z = 0} is 0 at every probe up to ``grad_tol`` relative to the
    probe's largest gradient entry: invariance that comes from a symmetry of the data (e.g. x₂ → −x₂) leaves
    rounding-level gradients (1e-16) that an exact test removed (user audit, session 49). ``grad_tol=0``
    keeps only exact (structural) zeros; ``max_kept_grad`` says which kind the result is."""
    model = as_model(model, params_like)
    if not 0 <= grad_tol < 1e-3:
        raise FlowError(f"grad_tol={grad_tol}: a relative rounding tolerance in [0, 1e-3) (default 1e-12; 0 = exact).")
    X = jnp.asarray(X, dtype=jnp.float64)
    flat, unravel = ravel_pytree(direction)
    flat = np.asarray(flat)
    cand = np.abs(flat) <= zero_tol * np.abs(flat).max()
    lossf = make_loss(model, X, jnp.asarray(y, dtype=jnp.float64), loss)
    g = jax.jit(jax.grad(lambda x: lossf(unravel(x))))
    key = jax.random.PRNGKey(7) if key is None else key
    pts = [np.asarray(jax.random.normal(k, flat.shape)) for k in jax.random.split(key, probes)]
    Z = cand.copy()
    while True:
        bad = np.zeros_like(Z)
        kept = 0.0
        for p in pts:
            gr = np.abs(np.asarray(g(jnp.asarray(np.where(Z, 0.0, p)))))
            rel = gr / max(gr.max(), 1e-300)
            bad |= Z & (rel > grad_tol) & (gr != 0.0)
            kept = max(kept, float(np.max(rel[Z & ~bad], initial=0.0)))
        if not bad.any():
            break
        Z &= ~bad
    mask = jax.tree_util.tree_map(lambda a: np.asarray(a) > 0.5, unravel(jnp.asarray(Z, dtype=jnp.float64)))
    return ZeroPreserving(mask=mask, n_zero=int(Z.sum()), n_candidates=int(cand.sum()),
                          n_removed=int(cand.sum() - Z.sum()), probes=probes, grad_tol=float(grad_tol),
                          max_kept_grad=kept)


def check_zero_preserved(model, params0, mask, X, y, loss="square", t1: float = 10.0, delta=None,
                         rtol: float = 1e-9, experimental: bool = False, n_save: int = 100):
    """Flow from params0 with w_Z set to 0: returns max_t max|w_Z(t)| (exactly 0 if Z is structurally
    zero-preserving; rounding level, growing with t, if the invariance comes from a symmetry of the data) and
    the FlowResult."""
    model = as_model(model)
    p0 = jax.tree_util.tree_map(lambda a, m: jnp.where(jnp.asarray(m), 0.0, a), params0, mask)
    fr = gradient_flow(model, p0, X, y, loss, t1=t1, delta=delta, mask=mask, rtol=rtol,
                       experimental=experimental, n_save=n_save)
    valid = fr.ts <= fr.t_final * (1 + 1e-12)
    return float(np.max(fr.masked_max[valid])), fr


class SparsityScaling(eqx.Module):
    deltas: Any          # (K,)
    t_rel: float         # horizon relative to the shift (e.g. the first-saddle time of p)
    shifts: Any          # (K,)
    max_zero: Any        # (K,) max_{t ≤ shift + t_rel} ‖w_Z(t)‖
    end_zero: Any        # (K,) ‖w_Z‖ at shift + t_rel
    end_norm: Any        # (K,) ‖w‖ at shift + t_rel
    exponent: float      # slope of log max_zero vs log δ
    exponent_end: float
    setting: dict


def sparsity_scaling(model, params0, mask, X, y, loss="square", deltas=(1e-2, 1e-3, 1e-4),
                     t_rel: float = 1.0, kkt=None, rtol: float = 1e-10, experimental: bool = False,
                     n_save: int = 200) -> SparsityScaling:
    """Size of the small (zero-preserving) weights w_Z from δ·w_0 through escape up to
    shift + t_rel (take t_rel = first-saddle time of p), against δ."""
    model = as_model(model)
    require_theory(model, experimental, "sparsity_scaling")
    X = jnp.asarray(X, dtype=jnp.float64)
    L = check_degree(model, X)
    if kkt is None:
        from .kkt import kkt_from
        kkt = kkt_from(model, params0, X, y, loss, degree=L)
    N = kkt.value
    flat0, unravel = ravel_pytree(params0)
    w0 = unravel(flat0 / jnp.linalg.norm(flat0))
    deltas = np.sort(np.asarray(deltas, dtype=np.float64))[::-1]
    if abs(L - 2) < 1e-12:
        a = float(jnp.dot(ravel_pytree(w0)[0], ravel_pytree(kkt.direction)[0]))
        shifts = time_shift(L, N, deltas) - np.log(a) / (2 * N)
    else:
        shifts = ncf_blowup_time(model, w0, X, y, loss, L=L) / deltas ** (L - 2)
    mx, en, nr = [], [], []
    for d, s in zip(deltas, shifts):
        t1 = float(s + t_rel)
        ts = np.concatenate([np.linspace(0, s, n_save // 2, endpoint=False), np.linspace(s, t1, n_save // 2)])
        fr = gradient_flow(model, w0, X, y, loss, t1=t1, ts=ts, delta=float(d), mask=mask, rtol=rtol,
                           experimental=experimental)
        mx.append(float(np.max(fr.masked_norm)))
        en.append(float(fr.masked_norm[-1]))
        nr.append(float(fr.norm[-1]))
    slope = lambda e: float(np.polyfit(np.log(deltas), np.log(np.asarray(e)), 1)[0])
    return SparsityScaling(deltas=deltas, t_rel=float(t_rel), shifts=np.asarray(shifts),
                           max_zero=np.asarray(mx), end_zero=np.asarray(en), end_norm=np.asarray(nr),
                           exponent=slope(mx), exponent_end=slope(en),
                           setting=dict(L=L, N=N, loss=loss if isinstance(loss, str) else "user"))
