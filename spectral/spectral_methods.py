"""Spectral methods (THEORY §2 with m = 1, D = T(y); THEORY §4): the Lu–Li /
Mondelli–Montanari characterization of ``D_n = (1/n) Σ_i T(y_i) x_i x_iᵀ``.

With ``Z = T(Y)``, ``G = ⟨θ*, x⟩``, ``τ = sup supp Z`` and, for ``λ > τ``,

    ψ_δ(λ) = λ (1/δ + E[Z/(λ − Z)]),        ψ_δ'(λ) = 1/δ − E[Z²/(λ − Z)²]
    φ(λ)   = λ E[Z G²/(λ − Z)],             φ'(λ)   = −E[Z² G²/(λ − Z)²]
    λ̄_δ    = argmin_{λ>τ} ψ_δ  (root of ψ_δ' = 0, or τ if none)
    λ*_δ   : ψ_δ(λ) = φ(λ) on λ > λ̄_δ (the largest root)

right bulk edge ``ψ_δ(λ̄_δ)``; top eigenvalue ``ψ_δ(λ*_δ)`` (or the edge if no λ* > λ̄);
squared cosine ``ψ'(λ*)/(ψ'(λ*) − φ'(λ*))`` (0 without outlier).

Relation to the block equations (m = 1): with ``s = −δ/λ`` the Stieltjes equation
``s = 1/(E[Z/(1 + sZ/δ)] − z)`` gives ``z = ψ_δ(λ)``; ``A(z) = φ(λ) − ψ_δ(λ)``, so the
outlier condition ``A = 0`` is ``φ = ψ`` and ``cos² = −1/A'(z) = ψ'/(ψ' − φ')``
(``A'(z) = (φ' − ψ')/ψ'``, chain rule through ``dz/dλ = ψ'``; see ``spectral.outliers``).

Threshold of a preprocessing ``T``: the smallest δ with an outlier, i.e.
``λ_c = inf{λ > τ : E[Z(G² − 1)/(λ − Z)] > E[Z²/(λ − Z)²]}``, ``δ_c = 1/E[Z²/(λ_c − Z)²]``.
Optimal weak-recovery threshold (Mondelli–Montanari): ``δ_u = 1/E_y[(E[G²|y] − 1)²]``.
All expectations by quadrature (``spectral.quadrature``) for k = 1 teachers.
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import NO_OUTLIER, SUCCESS, UNBOUNDED_SUPPORT, SpectralError, message
from .law import BlockLaw
from .quadrature import gauss_legendre_composite, hermite_nodes, is_standard_normal_noise, teacher_nodes


class SpectralMethodResult(eqx.Module):
    """Limit of the spectral method ``(1/n) Σ T(y_i) x_i x_iᵀ`` at ratio δ (floats)."""

    eigenvalue: float       # top eigenvalue (= edge when there is no outlier)
    edge: float             # right bulk edge ψ(λ̄)
    cosine2: float          # squared cosine of the top eigenvector with θ* (0 without outlier)
    has_outlier: bool
    lambda_star: float      # λ* (nan without outlier)
    lambda_bar: float       # λ̄
    tau: float              # sup supp T(Y) (on the quadrature nodes)
    delta: float
    status: int
    message: str
    setting: dict = eqx.field(static=True, default=None)


class _Moments:
    """Vectorized moments of ``Z = T(Y)`` and ``G² = z²`` on the nodes."""

    def __init__(self, Z, G2, w):
        self.Z, self.G2, self.w = Z, G2, w
        self.tau = float(np.max(Z[w > 0]))

    def E(self, f):
        return f @ self.w

    def E1(self, lam):  # E[Z/(λ − Z)]
        return self.E(self.Z / (lam[..., None] - self.Z))

    def E2(self, lam):  # E[Z²/(λ − Z)²]
        return self.E((self.Z / (lam[..., None] - self.Z)) ** 2)

    def EG(self, lam):  # E[Z G²/(λ − Z)]
        return self.E(self.Z * self.G2 / (lam[..., None] - self.Z))

    def EG1(self, lam):  # E[Z (G² − 1)/(λ − Z)]
        return self.E(self.Z * (self.G2 - 1.0) / (lam[..., None] - self.Z))

    def EG2(self, lam):  # E[Z² G²/(λ − Z)²]
        return self.E(self.G2 * (self.Z / (lam[..., None] - self.Z)) ** 2)

    def psi(self, lam, delta):
        return lam * (1.0 / delta + self.E1(lam))

    def dpsi(self, lam, delta):
        return 1.0 / delta - self.E2(lam)

    def phi(self, lam):
        return lam * self.EG(lam)

    def dphi(self, lam):
        return -self.EG2(lam)

    def grid(self, num=600):
        """λ = τ + exp(u) grid above τ, from τ + 1e-9·scale to τ + 1e4·scale."""
        scale = max(1.0, float(np.sqrt(self.E(self.Z**2))))
        return self.tau + scale * np.exp(np.linspace(np.log(1e-9), np.log(1e4), num))


def _bisect(f, lo, hi, iters=200):
    """Root of f on [lo, hi] with f(lo), f(hi) of opposite signs (float64 bisection)."""
    flo = f(np.asarray(lo))
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if mid == lo or mid == hi:
            break
        fm = f(np.asarray(mid))
        if np.sign(fm) == np.sign(flo):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _check_preprocess(T, y):
    Z = np.asarray(jax.vmap(T)(jnp.asarray(y)), dtype=float)
    if Z.shape != y.shape:
        raise SpectralError(f"preprocess must map a scalar y to a scalar T(y); got output shape {Z.shape[1:]}.")
    return Z


QUADRATURE_KEYS = ("panels", "order", "noise_nodes", "mc_samples", "key")   # teacher_nodes' options


def _quadrature_options(quadrature, allowed=QUADRATURE_KEYS) -> dict:
    q = dict(quadrature or {})
    bad = sorted(set(q) - set(allowed))
    if bad:
        raise SpectralError(f"quadrature: unknown option(s) {bad}; allowed here: {list(allowed)}.")
    return q


def unbounded_above(preprocess, teacher, tau) -> bool:
    """Whether ``T(link(z, ε))`` grows without bound beyond the quadrature's range, so that
    ``sup T(Y) = ∞`` although the nodes (|z| ≤ 13, finite noise nodes) give a finite ``τ``.

    The ray test of :meth:`dmft.Teacher.unbounded_label_levels` applied to the label ``T(y)`` (values at
    s = 8, 64, 512 strictly increasing, the last increment ≥ half the one before: powers and logarithms
    pass; bounded maps approach their sup much faster, e.g. 1 − 1/y by 1/64, 1 − y^(−1/2) by 1/8 per ray
    step on y = z²), and the far value above the nodes' sup ``τ`` (so a bounded oscillating T cannot pass
    by chance). Poles of T at finite y are not probed (T must be finite on every label: the nodes check
    that). Checked in tests/test_spectral_methods.py."""
    import dmft

    composed = dmft.Teacher(link=lambda z, e: preprocess(teacher.link(z, e)), k=teacher.k, noise_dim=teacher.noise_dim,
                            noise=teacher.noise)
    with np.errstate(all="ignore"):
        above = composed.unbounded_label_levels().get("above")
    return above is not None and above[2] > tau + 1e-3 * (1.0 + abs(float(tau)))


def _unbounded_message(what: str) -> str:
    return (f"{what}: T(y) is unbounded above on the labels this teacher produces (it keeps growing beyond "
            "the quadrature range). In the strict limit the top of the spectrum of (1/n) Σ T(y_i) x_i x_iᵀ is "
            "then the largest T(y_i), growing with n: there is no right bulk edge and no separated outlier "
            "(the Lu–Li / Mondelli–Montanari formulas need a bounded T). Bound T (e.g. min(T(y), c)), or at a "
            "finite n use spectral.outlier(spectral.spectral_method_law(T, teacher), delta, side='top', "
            "convention='finite-n', n=n).")


def _moments(preprocess, teacher, quadrature):
    z, eps, y, w, method = teacher_nodes(teacher, **_quadrature_options(quadrature))
    Z = _check_preprocess(preprocess, y)
    bad = ~np.isfinite(Z) & (w > 0)
    if np.any(bad):
        raise SpectralError(f"preprocess T(y) is NaN/inf at {int(bad.sum())} quadrature nodes (e.g. y = "
                            f"{y[bad][0]:.3g}); make T finite for every label the teacher produces.")
    if not np.isfinite(np.max(Z)):
        raise SpectralError("sup T(y) must be finite for the spectral method (the support of T is unbounded above).")
    return _Moments(Z, z**2, w), method


def _check_delta(delta):
    if not np.isfinite(delta) or delta <= 0:
        raise SpectralError(f"delta (= n/d) must be finite and > 0; got {delta}.")


def spectral_method(preprocess, teacher, delta, *, quadrature=None, throw=True) -> SpectralMethodResult:
    """Top eigenvalue, right bulk edge and squared cosine of ``(1/n) Σ T(y_i) x_i x_iᵀ`` in the
    limit ``n/d → δ`` for a k = 1 teacher (expectations by quadrature)."""
    delta = float(delta)
    _check_delta(delta)
    mo, method = _moments(preprocess, teacher, quadrature)
    tau = mo.tau
    setting = dict(delta=delta, teacher_k=teacher.k, noise_dim=teacher.noise_dim, expectation=method,
                   nodes=int(mo.Z.size), convention="strict")
    if unbounded_above(preprocess, teacher, tau):
        if throw:
            raise SpectralError(_unbounded_message("spectral_method"))
        nan = float("nan")
        return SpectralMethodResult(eigenvalue=nan, edge=float("inf"), cosine2=nan, has_outlier=False, lambda_star=nan,
                                    lambda_bar=nan, tau=float("inf"), delta=delta, status=UNBOUNDED_SUPPORT,
                                    message=message(UNBOUNDED_SUPPORT) + " (T(y) unbounded above)", setting=setting)
    # λ̄: root of ψ' = 0, i.e. E[Z²/(λ − Z)²] = 1/δ (ψ' increasing in λ); λ̄ = τ if ψ'(τ+) ≥ 0
    grid = mo.grid()
    dps = mo.dpsi(grid, delta)
    if dps[0] >= 0:
        lam_bar = tau
    else:
        i = int(np.argmax(dps >= 0))
        lam_bar = _bisect(lambda l: mo.dpsi(l, delta), grid[i - 1], grid[i])
    edge = float(mo.psi(np.asarray(lam_bar), delta)) if lam_bar > tau else float(
        tau * (1.0 / delta + mo.E1(np.asarray(tau + 1e-12 * max(1, abs(tau))))))
    # λ*: largest root of φ − ψ = λ (E[Z(G²−1)/(λ − Z)] − 1/δ) on (λ̄, ∞)
    g = lambda l: mo.EG1(l) - 1.0 / delta
    lg = lam_bar + (grid - tau) if lam_bar > tau else grid
    gv = g(lg)
    pos = np.nonzero(gv > 0)[0]
    if pos.size == 0:
        return SpectralMethodResult(eigenvalue=edge, edge=edge, cosine2=0.0, has_outlier=False,
                                    lambda_star=float("nan"), lambda_bar=float(lam_bar), tau=tau, delta=delta,
                                    status=NO_OUTLIER, message="no outlier: delta below the threshold of T",
                                    setting=setting)
    j = pos[-1]
    if j == lg.size - 1:
        raise SpectralError("spectral_method: phi - psi stays positive on the whole lambda grid; the "
                            "preprocessing T may be unbounded or degenerate.")
    lam_star = _bisect(g, lg[j], lg[j + 1])
    ls = np.asarray(lam_star)
    dps_, dph = float(mo.dpsi(ls, delta)), float(mo.dphi(ls))
    cos2 = dps_ / (dps_ - dph) if dps_ > 0 else 0.0     # ψ'/(ψ' − φ')
    return SpectralMethodResult(eigenvalue=float(mo.psi(ls, delta)), edge=edge, cosine2=float(cos2),
                                has_outlier=True, lambda_star=float(lam_star), lambda_bar=float(lam_bar),
                                tau=tau, delta=delta, status=SUCCESS, message="success", setting=setting)


def spectral_method_threshold(preprocess, teacher, *, quadrature=None) -> float:
    """Smallest δ at which ``(1/n) Σ T(y_i) x_i x_iᵀ`` has an outlier correlated with θ*:
    ``λ_c = inf{λ > τ: E[Z(G²−1)/(λ−Z)] > E[Z²/(λ−Z)²]}``, ``δ_c = 1/E[Z²/(λ_c−Z)²]``.
    Returns ``inf`` if no δ gives an outlier. Raises :class:`SpectralError` if T(y) is unbounded
    above (no strict-limit edge, hence no threshold: see :func:`unbounded_above`)."""
    mo, _ = _moments(preprocess, teacher, quadrature)
    if unbounded_above(preprocess, teacher, mo.tau):
        raise SpectralError(_unbounded_message("spectral_method_threshold"))
    h = lambda l: mo.EG1(l) - mo.E2(l)
    grid = mo.grid()
    hv = h(grid)
    pos = np.nonzero(hv > 0)[0]
    if pos.size == 0:
        return float("inf")
    i = pos[0]
    if i == 0:  # h > 0 right above τ: λ̄ = τ regime, outlier iff E[Z(G²−1)/(τ−Z)] > 1/δ
        return float(1.0 / mo.EG1(np.asarray(grid[0])))
    lam_c = _bisect(h, grid[i - 1], grid[i])
    return float(1.0 / mo.E2(np.asarray(lam_c)))


def spectral_method_law(preprocess, teacher, *, quadrature=None) -> BlockLaw:
    """The m = 1 block law ``(ζ = z, D = T(y))`` on the quadrature nodes, for the general block
    solvers (``spectral.outlier``, ``spectral.bulk_edge``): cross-check of the two routes."""
    z, eps, y, w, method = teacher_nodes(teacher, **_quadrature_options(quadrature))
    Z = _check_preprocess(preprocess, y)
    keep = w > 1e-300
    top = unbounded_above(preprocess, teacher, float(np.max(Z[keep])))
    return BlockLaw(D=jnp.asarray(Z[keep])[:, None, None], weights=jnp.asarray(w[keep] / w[keep].sum()),
                    zeta=jnp.asarray(z[keep])[:, None], unbounded=("top",) if top else (),
                    source=f"spectral-method {method}")


# ------------------------------------------------------------------------------------
# optimal weak recovery threshold δ_u = 1/E_y[(E[G²|y] − 1)²]
# ------------------------------------------------------------------------------------


def _noise_likelihood(teacher, newton_steps=30):
    """p(y|z) for scalar standard-normal noise and a link monotone in ε: ε(y, z) by Newton,
    p = φ(ε)/|∂h/∂ε| (all derivatives by autodiff)."""
    h = lambda z, e: teacher.link(jnp.reshape(z, (1,)), jnp.reshape(e, (1,)))
    dh = jax.grad(h, argnums=1)

    def lik(y, z):
        def step(e, _):
            return e - (h(z, e) - y) / dh(z, e), None
        e, _ = jax.lax.scan(step, jnp.zeros_like(y), None, length=newton_steps)
        ok = jnp.abs(h(z, e) - y) <= 1e-8 * (1.0 + jnp.abs(y))
        return jnp.where(ok, jnp.exp(-0.5 * e**2) / jnp.sqrt(2 * jnp.pi) / jnp.abs(dh(z, e)), 0.0)

    return jax.jit(jax.vmap(jax.vmap(lik, in_axes=(None, 0)), in_axes=(0, None)))


def weak_recovery_threshold(teacher, *, likelihood=None, quadrature=None, y_panels=3000, y_order=6) -> float:
    """Optimal weak-recovery threshold ``δ_u = 1/E_y[(E[G²|y] − 1)²]`` (Mondelli–Montanari),
    k = 1 teacher with ``E[G|y] = 0``.

    Noiseless links: ``E[G²|y]`` averages ``z²`` over nodes with identical label (exact for
    even links monotone in |z| and for plateaus; for other non-injective links pass
    ``likelihood``). Noisy links: ``likelihood(y, z) = p(y|z)`` if given, else derived for
    scalar standard-normal noise by inverting ``ε ↦ link(z, ε)`` (Newton, autodiff).

    The precondition is checked with the same expectations: if ``E_y[E[G|y]²] > 1e-8`` the labels
    carry first-order information about ``G`` (e.g. ``y = z + noise``), the linear estimator
    ``(1/n) Σ y_i x_i`` correlates with θ* at every δ > 0, and the threshold is 0: it returns
    ``0.0`` with a warning saying so. ``quadrature``: noiseless ``teacher_nodes`` options
    (panels, order, noise_nodes, mc_samples, key); noisy: panels, order, L.
    """
    if teacher.k != 1:
        raise SpectralError(f"weak_recovery_threshold needs a k = 1 teacher (got k = {teacher.k}).")
    if teacher.noise_dim == 0 and likelihood is None:
        z, _, y, w, _ = teacher_nodes(teacher, **_quadrature_options(quadrature))
        # group identical labels (±z are bit-identical for even links on symmetric nodes)
        key = np.round(y, 12)
        _, inv = np.unique(key, return_inverse=True)
        den = np.bincount(inv, weights=w)
        cond = np.bincount(inv, weights=w * z**2) / den   # E[G²|y] per label class
        first = np.bincount(inv, weights=w * z) / den     # E[G|y] per label class
        return _weak_recovery_value(np.sum(den * (cond - 1.0) ** 2), np.sum(den * first**2))
    q = _quadrature_options(quadrature, ("panels", "order", "L"))
    if likelihood is None:
        if teacher.noise_dim != 1 or not is_standard_normal_noise(teacher):
            raise SpectralError("weak_recovery_threshold: pass likelihood(y, z) = p(y|z) for this noise "
                                "(automatic only for scalar standard-normal noise).")
        likelihood = _noise_likelihood(teacher)
    else:
        likelihood = jax.jit(jax.vmap(jax.vmap(likelihood, in_axes=(None, 0)), in_axes=(0, None)))
    from .quadrature import normal_nodes
    z, wz = normal_nodes(q.get("panels", 400), q.get("order", 8), q.get("L", 12.0))
    # y-range from the labels at the tensor nodes
    e, _ = hermite_nodes(20)
    ys = np.asarray(teacher.labels(jnp.asarray(np.repeat(z, e.size))[:, None],
                                   jnp.asarray(np.tile(e, z.size))[:, None]))
    yl, yh = np.min(ys), np.max(ys)
    yn, yw = gauss_legendre_composite(yl, yh, y_panels, y_order)
    total = total1 = 0.0
    for chunk in np.array_split(np.arange(yn.size), max(1, yn.size // 2000)):
        P = np.asarray(likelihood(jnp.asarray(yn[chunk]), jnp.asarray(z)))  # (ny, nz) p(y|z)
        py = P @ wz                                                          # p(y)
        safe = np.where(py > 0, py, 1.0)
        m2 = (P @ (wz * z**2)) / safe                                        # E[G²|y]
        m1 = (P @ (wz * z)) / safe                                           # E[G|y]
        total += np.sum(yw[chunk] * py * (m2 - 1.0) ** 2)
        total1 += np.sum(yw[chunk] * py * m1**2)
    return _weak_recovery_value(total, total1)


def _weak_recovery_value(second: float, first: float) -> float:
    """``1/E_y[(E[G²|y] − 1)²]``, or 0 where ``E_y[E[G|y]²]`` shows first-order information."""
    if first > 1e-8:
        import warnings

        warnings.warn(f"weak_recovery_threshold: E_y[E[G|y]^2] = {first:.3g} > 0, so the labels carry first-order "
                      "information (the link is not even in z): weak recovery is possible at every delta > 0 "
                      "(linear estimator), threshold 0. The formula 1/E[(E[G^2|y] - 1)^2] needs E[G|y] = 0.",
                      RuntimeWarning, stacklevel=3)
        return 0.0
    return float(1.0 / second)
