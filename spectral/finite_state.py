"""The hard-direction outlier at a finite-d GD state, and the outlier equation applied to
that state's own law (THEORY §2–§3).

At a finite-d state ``(X, y, W, a)`` (e.g. the end of ``dmft.simulate(..., freeze_hard=True)``,
the first phase at finite d) the W-Hessian is ``H = (1/n) Σ_i x_i x_iᵀ ⊗ D_i + λI``. Split
``R^{dm}`` into the hard rows ``Θ_h ⊗ R^m`` and the rest. Then:

- ``constrained_edge``: the smallest eigenvalue of ``H`` restricted to the non-hard rows
  (the finite-d bulk edge seen by everything but the hard directions);
- ``eigenvalues`` / ``hard_weight``: the bottom eigenpairs of the full ``H`` and the squared
  norm of each eigenvector on the hard rows (its ``cos²`` with the hard subspace).

By Cauchy interlacing ``eigenvalues[0] ≤ constrained_edge`` always; without an outlier the
gap is ``O(1/d)`` and the hard weight ``O(1/d)``; with one, both are ``O(1)``.

The *theory at the state* applies the outlier equation and the bulk edge of THEORY §2 to the
empirical law of ``(ζ_i, D_i)``, ``ζ_i = x_i[hard]`` (n samples, finite-n convention at that
n if ``D`` is unbounded below). It checks the equations at times the dynamic DMFT cannot reach:
theory and finite-d eigenpair should agree up to finite-size corrections.
"""

from __future__ import annotations

import functools
from typing import Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ._errors import SpectralError
from .hessian import block_matvec, dense_block_matrix, finite_blocks
from .lanczos import check_lanczos, lanczos_extreme, lanczos_iters
from .law import law_from_samples
from .outliers import all_outliers
from .stieltjes import bulk_edge


class StateOutlier(eqx.Module):
    """Finite-d bottom spectrum along the hard rows, and the outlier equation at the same state.
    Eigenvalues include the ridge. ``theory_*`` are nan when the equation has no outlier
    (``theory_exists`` False) or failed (``theory_status`` says which)."""

    eigenvalues: np.ndarray        # bottom k eigenvalues of H (finite d)
    hard_weight: np.ndarray        # squared norm of each eigenvector on the hard rows
    constrained_edge: float        # smallest eigenvalue of H on the non-hard rows
    theory_outlier: float
    theory_cosine2: float
    theory_edge: float
    theory_margin: float           # extreme eigenvalue of A at the edge: < 0 ⇔ outlier exists
    theory_exists: bool
    theory_status: str
    setting: Optional[dict] = None
    theory_all_outliers: Optional[np.ndarray] = None   # every branch's outlier (h·m, extreme first; nan: none)
    theory_all_cosine2: Optional[np.ndarray] = None    # and its squared cosine (0: none); branch 0 = theory_outlier

    @property
    def hard_weight_below_edge(self) -> float:
        """Summed hard weight of the computed eigenvectors below ``constrained_edge`` (interlacing:
        at most h·m of them): O(1/d)·few without an outlier, O(1) with one."""
        return float(np.sum(self.hard_weight[self.eigenvalues < self.constrained_edge]))

    @property
    def gap(self) -> float:
        """``constrained_edge − eigenvalues[0]`` (≥ 0): O(1) with an outlier, O(1/d) without."""
        return float(self.constrained_edge - self.eigenvalues[0])


def shift_above(D, n, d, ridge=0.0):
    """A level above the whole spectrum of ``(1/n) Σ x xᵀ ⊗ D + ridge`` with high probability
    (10× the Marchenko–Pastur scale of ``max|D|``); traceable."""
    return 10.0 * jnp.max(jnp.abs(D)) * (1 + jnp.sqrt(d / n)) ** 2 + jnp.abs(ridge) + 1.0


def hard_rows_shifted(mv, hard_rows, big):
    """Matvec of ``H`` with the hard rows removed: those rows are decoupled and sent to ``big``
    (above the spectrum), so the smallest eigenvalue of the result is the smallest eigenvalue of
    ``H`` restricted to the non-hard rows (the finite-d bulk edge seen by everything but the hard
    directions). ``hard_rows``: boolean (d,). Pure and traceable: use it inside ``jit``."""
    mask = jnp.asarray(hard_rows)[:, None]
    return lambda V: jnp.where(mask, big * V, mv(jnp.where(mask, 0.0, V)))


@functools.partial(jax.jit, static_argnames=("k", "max_iters", "tol"))
def _lanczos_bottom(X, D, ridge, rows, key, *, k, max_iters, tol):
    """Bottom ``k`` eigenpairs of the W-Hessian and the bottom of its non-hard restriction, by Lanczos.
    One program per shape: (X, D) are arguments, not closed over. Before (session 39) each call built
    new closures and compiled new programs; a loop over seeds at d = 2000 spent 28 % of its time
    compiling and died after ~60 calls when the programs' memory maps reached vm.max_map_count."""
    n, d = X.shape
    m = D.shape[-1]
    mv = block_matvec(X, D, ridge)
    res = lanczos_extreme(mv, (d, m), k, key, which="smallest", max_iters=max_iters, tol=tol, throw=False)
    mv_c = hard_rows_shifted(mv, rows, shift_above(D, n, d, ridge))
    res_c = lanczos_extreme(mv_c, (d, m), 1, jax.random.fold_in(key, 1), which="smallest", max_iters=max_iters,
                            tol=tol, throw=False)
    return res, res_c


def bottom_spectrum(X, D, ridge, hard, *, k: int, method: str, key=None, max_iters=None, tol: float = 1e-10):
    """Bottom ``k`` eigenvalues of ``H = (1/n) Σ x_i x_iᵀ ⊗ D_i + ridge·I``, the squared norm of each
    eigenvector on the hard rows ``hard`` (teacher coordinates), and the constrained edge (the smallest
    eigenvalue of ``H`` restricted to the other rows). ``method``: "dense" (LAPACK ``syevr`` on the bottom
    of the float64 matrix) or "lanczos" (matrix-free; the constrained edge with the hard rows shifted far up).
    Shared by :func:`hard_outlier_at_state` (a GD state) and :func:`spectral.matrix_model` (draws of the
    random-matrix model of a law). Returns numpy arrays ``(eigenvalues (k,), hard_weight (k,), edge)``."""
    n, d = X.shape
    m = D.shape[-1]
    rows = np.zeros(d, bool)
    rows[list(hard)] = True
    if method == "dense":
        # only the bottom k eigenpairs and the constrained edge's one eigenvalue (LAPACK syevr on a subset):
        # measured at d = 2560 (float64, 2 cores): 0.8 + 0.5 s against 9.4 s for every eigenvector (numpy eigh);
        # the same eigenvalues to 3e-16 and eigenvector entries to 2e-15 up to sign (session 44)
        H = np.asarray(dense_block_matrix(X, D, ridge))
        ev, vec = scipy.linalg.eigh(H, subset_by_index=[0, k - 1])
        vec = vec.reshape(d, m, k)
        keep = np.repeat(~rows, m)
        edge_c = float(scipy.linalg.eigh(H[np.ix_(keep, keep)], eigvals_only=True, subset_by_index=[0, 0])[0])
    else:
        key = jax.random.key(0) if key is None else key
        res, res_c = _lanczos_bottom(jnp.asarray(X), D, jnp.asarray(ridge, D.dtype), jnp.asarray(rows), key, k=k,
                                     max_iters=max_iters, tol=tol)
        check_lanczos(res.status, tol, lanczos_iters(d * m, k, max_iters))
        check_lanczos(res_c.status, tol, lanczos_iters(d * m, 1, max_iters))
        ev, vec = np.asarray(res.eigenvalues), np.moveaxis(np.asarray(res.eigenvectors), 0, -1)
        edge_c = float(res_c.eigenvalues[0])
    hw = (vec[list(hard)] ** 2).sum(axis=(0, 1))
    return np.asarray(ev), np.asarray(hw), edge_c


def hard_outlier_at_state(problem, X, y, W, a, *, hard=None, k: int = 6, method: str = "auto",
                          key=None, theory: bool = True, max_iters=None, tol: float = 1e-10) -> StateOutlier:
    """Bottom eigenpairs of the W-Hessian at ``(X, y, W, a)`` with their hard-row weights, the
    constrained (non-hard) edge, and the outlier equation on the empirical law of the state.

    ``hard``: teacher coordinates that are hard (default: the teacher's). ``method``: "dense"
    (eigh, d·m ≤ 6000), "lanczos" (matrix-free; the constrained edge via the HVP with the hard
    rows shifted far up), or "auto". ``max_iters``, ``tol``: the Lanczos limits
    (:func:`spectral.lanczos_extreme`; its default of 150 matvecs did not reach 1e-10 at d = 4000 in
    bench_window_bounded's setting, where the bottom eigenvalues are close to the edge).
    """
    hard = tuple(problem.teacher.hard_coordinates()) if hard is None else tuple(int(j) for j in hard)
    if not hard:
        raise SpectralError("hard_outlier_at_state needs hard teacher coordinates (Teacher.hard or an even link).")
    n, d = X.shape
    m = problem.m
    if W.shape != (d, m):
        raise SpectralError(f"W must have shape (d, m) = ({d}, {m}); got {W.shape}.")
    if method == "auto":
        method = "dense" if d * m <= 6000 else "lanczos"
    if method not in ("dense", "lanczos"):
        raise SpectralError(f"method must be 'dense', 'lanczos' or 'auto'; got {method!r}.")
    ridge = float(problem.ridge)
    D = finite_blocks(problem, X, y, a, W)
    ev, hw, edge_c = bottom_spectrum(X, D, ridge, hard, k=k, method=method, key=key, max_iters=max_iters, tol=tol)
    setting = dict(d=int(d), n=int(n), delta=n / d, m=int(m), hard=list(hard), method=method, ridge=ridge, k=int(k),
                   train_second_layer=bool(problem.student.train_second_layer),
                   hessian="W-block (d·m rows; with a trained second layer the a-rows and the W–a cross terms are "
                           "left out: they move the bottom and hard outliers little, the top a lot)")
    t = dict(theory_outlier=np.nan, theory_cosine2=np.nan, theory_edge=np.nan, theory_margin=np.nan,
             theory_exists=False, theory_status="not computed")
    if theory:
        law = law_from_samples(D, zeta=X[:, list(hard)], source=f"finite-d state d={d} n={n}")
        conv = "finite-n" if "bottom" in law.unbounded else None
        try:
            # every branch (a width-m student can have up to h·m outliers; a user audit saw two at a trained-a
            # Huber state, −0.554 and −0.395 dense, where only branch 0 was reported); branch 0 = `outlier`'s
            o = all_outliers(law, n / d, "bottom", convention=conv, n=n if conv else None, throw=False)
            e = bulk_edge(law, n / d, "bottom", convention=conv, n=n if conv else None, throw=False)
            ex = np.asarray(o.exists, bool)
            exists = bool(ex[0])
            t = dict(theory_outlier=float(o.eigenvalue[0]) + ridge if exists else np.nan,
                     theory_cosine2=float(o.cosine2[0]) if exists else 0.0, theory_edge=float(e.edge) + ridge,
                     theory_margin=float(o.margin[0]), theory_exists=exists,
                     theory_status=f"outlier status {int(o.status[0])}, edge status {int(e.status)}",
                     theory_all_outliers=np.where(ex, np.asarray(o.eigenvalue) + ridge, np.nan),
                     theory_all_cosine2=np.where(ex, np.asarray(o.cosine2), 0.0))
            setting["convention"] = o.convention
        except SpectralError as exc:  # reported, not raised: the finite-d part stands on its own
            t["theory_status"] = f"failed: {exc}"
    return StateOutlier(eigenvalues=np.asarray(ev), hard_weight=np.asarray(hw), constrained_edge=edge_c,
                        setting=setting, **t)
