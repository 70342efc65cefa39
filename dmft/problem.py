"""Problem specification: teacher, student, loss, ridge and initialization (THEORY §0).

Everything is an ``equinox.Module`` so a problem passes through ``jit``/``vmap`` as a
pytree: callables and shape-setting integers are static fields, continuous parameters
(second layer, ``Q_0``, ``M^0``, ridge) are array leaves and are traced.

All derivatives of the activation, readout and loss come from JAX autodiff
(:func:`sample_grad`, :func:`sample_hessian`); nothing is hand-coded per activation.
"""

from __future__ import annotations

from typing import Callable, Optional

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array

try:  # public alias; moved in some JAX versions
    from jax.core import Tracer
except ImportError:  # pragma: no cover
    from jax._src.core import Tracer


class ProblemError(ValueError):
    """A problem specification or an argument is invalid (the message names it)."""


# ---------------------------------------------------------------------------------
# losses  ell(y, yhat) for one sample (scalars)
# ---------------------------------------------------------------------------------


def square_loss(y, yhat):
    """``(y - yhat)**2 / 2``."""
    return 0.5 * (y - yhat) ** 2


def logistic_loss(y, yhat):
    """``log(1 + exp(-y yhat))`` for labels ``y in {-1, +1}``."""
    return jnp.logaddexp(0.0, -y * yhat)


def huber_loss(width: float = 1.0):
    """Huber loss of the residual with transition at ``width`` (bounded ``ell''``); ``width`` finite and > 0."""
    if not np.isfinite(width) or width <= 0:
        raise ProblemError(f"huber_loss: width must be a finite number > 0 (the residual at which the loss turns "
                           f"linear, e.g. 1.0); got {width!r}.")

    def loss(y, yhat):
        r = jnp.abs(y - yhat)
        return jnp.where(r <= width, 0.5 * r**2, width * (r - 0.5 * width))

    return loss


# ---------------------------------------------------------------------------------
# teacher
# ---------------------------------------------------------------------------------


def _standard_normal_noise(key, shape):
    return jax.random.normal(key, shape)


# Teacher.symmetry_groups with the default key, per (link, k, noise_dim, noise, ...): the link and the
# noise law are static callables (identity), so the groups of a teacher are computed once per process
_SYMMETRY_CACHE: dict = {}
_JUMP_CACHE: dict = {}      # response_jumps per concrete problem (_problem_memo)


def _memoized(cache: dict, memo, compute):
    """``compute()`` cached under ``memo`` (None: not cached); a cache past 512 entries starts over."""
    if memo is None:
        return compute()
    if memo not in cache:
        if len(cache) > 512:
            cache.clear()
        cache[memo] = compute()
    return cache[memo]


class Teacher(eqx.Module):
    """Multi-index teacher ``y = link(z, eps)``, ``z = Θ*ᵀx ∈ R^k``.

    ``link`` takes ``z`` of shape ``(k,)`` and ``eps`` of shape ``(noise_dim,)`` for one
    sample and returns a scalar; it is vectorized internally. ``noise`` samples ``eps``
    (``noise(key, shape)``; default standard normal). ``hard`` lists teacher coordinates
    with ``E[z_j | y] = 0`` at zero overlap; ``None`` detects them numerically: the coordinates the
    link is even in and those of joint sign flips that keep every label (:meth:`symmetry_groups`,
    e.g. ``y = z₁z₂``). They are sampled antithetically in DMFT, and their overlap rows are kept
    exactly 0 while the symmetry holds (:meth:`hard_groups`).
    """

    link: Callable = eqx.field(static=True)
    k: int = eqx.field(static=True)
    noise_dim: int = eqx.field(static=True, default=0)
    noise: Callable = eqx.field(static=True, default=_standard_normal_noise)
    hard: Optional[tuple] = eqx.field(static=True, default=None)

    def __check_init__(self):
        if not isinstance(self.k, (int, np.integer)) or self.k < 1:
            raise ProblemError(f"Teacher.k must be a positive int (got {self.k!r}).")
        if not isinstance(self.noise_dim, (int, np.integer)) or self.noise_dim < 0:
            raise ProblemError(f"Teacher.noise_dim must be an int >= 0 (got {self.noise_dim!r}).")
        if self.hard is not None:
            bad = [j for j in self.hard if not (0 <= int(j) < self.k)]
            if bad:
                raise ProblemError(f"Teacher.hard has indices {bad} outside 0..k-1 = 0..{self.k - 1}.")

    def labels(self, z: Array, eps: Array) -> Array:
        """Vectorized link: ``z`` (..., k), ``eps`` (..., noise_dim) -> ``y`` (...)."""
        batch = z.shape[:-1]
        zf = z.reshape((-1, self.k))
        ef = jnp.broadcast_to(eps, batch + (self.noise_dim,)).reshape((zf.shape[0], self.noise_dim))
        y = jax.vmap(self.link)(zf, ef)
        return jnp.reshape(y, batch)

    def sample_noise(self, key, batch: tuple) -> Array:
        if self.noise_dim == 0:
            return jnp.zeros(batch + (0,))
        eps = self.noise(key, batch + (self.noise_dim,))
        if jnp.shape(eps) != batch + (self.noise_dim,):   # static shapes: raised while tracing, before compiling
            raise ProblemError(f"Teacher.noise(key, shape) must return an array of the requested shape "
                               f"{batch + (self.noise_dim,)}; it returned {jnp.shape(eps)}.")
        return eps

    def unbounded_label_levels(self, directions: int = 8) -> dict:
        """Where the label ``y`` is unbounded, three growing label values along a ray.

        Deterministic test on rays ``s·u`` of the Gaussian inputs (``z``, and ``eps`` when the
        noise is the default standard normal; a custom noise law is treated as bounded here):
        ``u`` = each coordinate axis and ``directions`` fixed random unit vectors, both signs,
        ``s`` = 8, 64, 512. ``y`` is unbounded above along a ray when ``y(512) > y(64) > y(8)``
        and the increments do not shrink by more than half (``y(512) − y(64) ≥ ½ (y(64) − y(8))``:
        linear, polynomial and logarithmic growth pass, saturating links such as tanh or sign do
        not); likewise below. Returns ``{"above": (y8, y64, y512), "below": (...)}`` for the ray
        with the largest growth on each side found (a side is absent where every ray is bounded).
        Used by :func:`spectral.law_from_problem` to decide, from the problem rather than from the
        sample tails, whether ``D(r, y)`` is unbounded because ``y`` is."""
        width = self.k + (self.noise_dim if self.noise is _standard_normal_noise else 0)
        rng = np.random.default_rng(20261202)
        extra = rng.standard_normal((directions, width))
        U = np.concatenate([np.eye(width), extra / np.linalg.norm(extra, axis=1, keepdims=True)])
        U = np.concatenate([U, -U])
        s = np.array([8.0, 64.0, 512.0])
        pts = (U[:, None, :] * s[None, :, None]).reshape(-1, width)
        z = jnp.asarray(pts[:, : self.k], dtype=jnp.float64)
        eps = (jnp.asarray(pts[:, self.k:], dtype=jnp.float64) if width > self.k
               else jnp.zeros((pts.shape[0], self.noise_dim), dtype=jnp.float64))
        y = np.asarray(self.labels(z, eps), dtype=np.float64).reshape(len(U), 3)
        out = {}
        for side, sign in (("above", 1.0), ("below", -1.0)):
            v = sign * y
            ok = (np.all(np.isfinite(v), axis=1) & (v[:, 2] > v[:, 1]) & (v[:, 1] > v[:, 0])
                  & (v[:, 1] - v[:, 0] > 1e-9 * (1 + np.abs(v[:, 0]))) & (v[:, 2] - v[:, 1] >= 0.5 * (v[:, 1] - v[:, 0])))
            if ok.any():
                i = int(np.argmax(np.where(ok, v[:, 2] - v[:, 0], -np.inf)))
                out[side] = tuple(float(x) for x in y[i])
        return out

    def hard_coordinates(self, key=None) -> tuple:
        """Declared ``hard``, else every coordinate of a label-preserving sign flip
        (:meth:`symmetry_groups`): the even coordinates and those of joint flips."""
        if self.hard is not None:
            return tuple(int(j) for j in self.hard)
        return tuple(sorted({j for g in self.symmetry_groups(key) for j in g}))

    def hard_groups(self, key=None) -> tuple:
        """The sign-flip groups that make the hard coordinates' ``E[z_j g]`` exactly 0: a row ``j``
        is forced to 0 while every row of some group containing ``j`` is still 0 (the flip then
        leaves the law of ``(z, y, r)`` invariant). Declared coordinates that no detected flip
        covers are kept as singletons (the declaration is honoured; :meth:`unverified_hard` names them)."""
        hard = set(self.hard_coordinates(key))
        if not hard:
            return ()
        groups = [g for g in self.symmetry_groups(key) if set(g) <= hard]
        covered = {j for g in groups for j in g}
        return tuple(groups) + tuple((j,) for j in sorted(hard - covered))

    def unverified_hard(self, key=None) -> tuple:
        """Declared hard coordinates that no label-preserving sign flip covers."""
        if not self.hard:
            return ()
        covered = {j for g in self.symmetry_groups(key) for j in g}
        return tuple(sorted(int(j) for j in self.hard if int(j) not in covered))

    def symmetry_groups(self, key=None, samples: int = 512, max_k: int = 10) -> tuple:
        """Sign flips that leave every label unchanged, hence ``E[z_S | y] = 0`` at zero overlap on
        ``S``: each coordinate the link is even in (``(j,)``, :meth:`detect_even_coordinates`), then the
        minimal joint flips ``z_S → −z_S`` (|S| ≥ 2) of the other coordinates, e.g. ``y = z₁z₂`` or
        ``y = (z₁ + z₂)²``, and, for the default (symmetric Gaussian) noise, the minimal flips
        ``(z_S, ε) → −(z_S, ε)``, e.g. ``y = z·ε``. Checked on ``samples`` Gaussian draws outside any
        trace; subsets are enumerated up to ``k = max_k``. A joint group makes a hard row exact only while
        all its rows are 0 (``y = z₁z₂`` with ``z₁`` learned makes ``z₂`` easy): see :meth:`hard_groups`."""
        import itertools

        def compute():
            with jax.ensure_compile_time_eval():      # concrete even when called under a trace (sweeps)
                return self._symmetry_groups(key, samples, max_k, itertools)

        memo = (self.link, self.k, self.noise_dim, self.noise, samples, max_k) if key is None else None
        return _memoized(_SYMMETRY_CACHE, memo, compute)

    def _symmetry_groups(self, key, samples, max_k, itertools):
        noise_ok = self.noise_dim > 0 and self.noise is _standard_normal_noise
        # every candidate flip at once (one compiled program per teacher): the k single flips, then all
        # subsets of ≤ max_k coordinates with and without the noise flip
        cands = [((j,), False) for j in range(self.k)]
        if self.k <= max_k:
            cands += [(S, nz) for size in range(1, self.k + 1) for S in itertools.combinations(range(self.k), size)
                      for nz in (False, True) if (size > 1 or nz) and (noise_ok or not nz)]
        keeps = self._flips_keep(key, samples, cands)
        even = [j for j in range(self.k) if keeps[((j,), False)]]
        groups = [(j,) for j in even]
        rest = [j for j in range(self.k) if j not in even]
        if len(rest) > max_k:
            return tuple(groups)
        found = []
        for size in range(1, len(rest) + 1):
            for S in itertools.combinations(rest, size):
                for noise in (False, True):
                    if (S, noise) not in keeps or any(set(F) <= set(S) for F in found):
                        continue
                    if keeps[(S, noise)]:
                        found.append(S)
        return tuple(groups) + tuple(found)

    def detect_even_coordinates(self, key=None, samples: int = 512) -> tuple:
        """Teacher coordinates ``j`` with ``link(z with z_j -> -z_j, eps) == link(z, eps)``.

        Evenness in ``z_j`` implies ``E[z_j | y] = 0`` (a hard direction at zero overlap).
        Checked on ``samples`` Gaussian draws (concrete even under a trace).
        """
        with jax.ensure_compile_time_eval():
            keeps = self._flips_keep(key, samples, [((j,), False) for j in range(self.k)])
        return tuple(j for j in range(self.k) if keeps[((j,), False)])

    def _flips_keep(self, key, samples: int, cands) -> dict:
        """For each candidate flip ``(S, noise)`` (``z_S → −z_S``, and ``ε → −ε`` if ``noise``): whether
        every label of ``samples`` Gaussian draws is unchanged (one compiled program per teacher)."""
        key = jax.random.key(12345) if key is None else key
        kz, ke = jax.random.split(key)
        z = jax.random.normal(kz, (samples, self.k))
        eps = self.sample_noise(ke, (samples,))
        sz = np.ones((len(cands) + 1, self.k))
        se = np.ones(len(cands) + 1)
        for i, (S, nz) in enumerate(cands, start=1):
            sz[i, list(S)] = -1.0
            se[i] = -1.0 if nz else 1.0
        ys = np.asarray(_flipped_labels(self, z, eps, jnp.asarray(sz), jnp.asarray(se)))   # (1 + candidates, samples)
        return dict(zip(cands, np.all(np.abs(ys[1:] - ys[0]) <= 1e-10 * (1.0 + np.abs(ys[0])), axis=1)))


# ---------------------------------------------------------------------------------
# student
# ---------------------------------------------------------------------------------


def committee_readout(activation: Callable) -> Callable:
    """``F(r; a) = Σ_j a_j σ(r_j)``."""

    def readout(r, a):
        return jnp.sum(a * activation(r))

    return readout


class TwoLayer(eqx.Module):
    """Two-layer student ``F(Wᵀx; a)`` of width ``m``.

    ``readout(r, a)`` (one sample, ``r`` of shape ``(m,)``) defaults to
    ``Σ_j a_j activation(r_j)``. ``second_layer`` is the initial ``a``;
    ``train_second_layer`` turns its GD on with step ``second_layer_lr_scale · η``.
    """

    # activation / readout / loss are pytree nodes (not static): a plain function is a
    # non-array leaf (static under eqx.filter_jit), a parametric one (an eqx.Module, see
    # dmft.families) carries traced parameters — sweeps over them do not recompile and
    # thresholds can be differentiated with respect to them
    activation: Optional[Callable]
    width: int = eqx.field(static=True)
    second_layer: Array
    train_second_layer: bool = eqx.field(static=True, default=False)
    readout: Optional[Callable] = None
    second_layer_lr_scale: float = eqx.field(static=True, default=1.0)

    def __init__(
        self,
        activation=None,
        width: int = 1,
        second_layer=None,
        train_second_layer: bool = False,
        readout=None,
        second_layer_lr_scale: float = 1.0,
    ):
        if not isinstance(width, (int, np.integer)) or width < 1:
            raise ProblemError(f"TwoLayer.width must be a positive int (got {width!r}).")
        if activation is None and readout is None:
            raise ProblemError("TwoLayer needs an `activation` (σ) or a general `readout(r, a)`.")
        self.activation = activation
        self.width = int(width)
        if second_layer is None:
            second_layer = jnp.ones(width) / width
        if _is_concrete(second_layer) and np.iscomplexobj(np.asarray(second_layer)):
            raise ProblemError("TwoLayer.second_layer must be real (got a complex array).")
        self.second_layer = jnp.asarray(second_layer, dtype=float)
        if readout is None and self.second_layer.shape != (self.width,):
            raise ProblemError(
                f"TwoLayer.second_layer has shape {self.second_layer.shape}; the default readout "
                f"Σ_j a_j σ(r_j) needs shape ({self.width},)."
            )
        if self.second_layer.ndim != 1:
            raise ProblemError("TwoLayer.second_layer must be a 1-d array (the parameters a).")
        self.train_second_layer = bool(train_second_layer)
        self.readout = readout
        self.second_layer_lr_scale = float(second_layer_lr_scale)

    def F(self, r: Array, a: Array) -> Array:
        if self.readout is not None:
            return self.readout(r, a)
        return jnp.sum(a * self.activation(r))


class Init(eqx.Module):
    """Initialization ``W^0 = Θ* M^0 + W_⊥^0``, rows of ``√d W_⊥^0`` i.i.d. ``N(0, Q_0)``.

    ``q0``: ``(m, m)`` positive definite; ``overlap``: ``M^0`` of shape ``(k, m)``.
    """

    q0: Array
    overlap: Array

    def __init__(self, q0, overlap):
        for what, arr in (("q0", q0), ("overlap", overlap)):
            if _is_concrete(arr) and np.iscomplexobj(np.asarray(arr)):
                raise ProblemError(f"Init.{what} must be real (got a complex array, which would be cast to its real "
                                   "part: a Hermitian q0 became the identity in a user audit).")
        self.q0 = jnp.asarray(q0, dtype=float)
        self.overlap = jnp.asarray(overlap, dtype=float)


class Problem(eqx.Module):
    """Teacher, student, loss ``ell(y, yhat)``, ridge ``λ`` (on W) and ``λ_a`` (on a), init."""

    teacher: Teacher
    student: TwoLayer
    loss: Callable
    ridge: Array
    init: Init
    ridge_second: Array

    def __init__(self, teacher, student, loss=square_loss, ridge=0.0, init=None, ridge_second=0.0):
        self.teacher = teacher
        self.student = student
        self.loss = loss
        self.ridge = jnp.asarray(ridge, dtype=float)
        self.ridge_second = jnp.asarray(ridge_second, dtype=float)
        m, k = student.width, teacher.k
        if init is None:
            init = Init(q0=jnp.eye(m), overlap=jnp.zeros((k, m)))
        self.init = init
        self._validate()

    # -- validation (concrete values only; skipped under tracing) --------------------
    def _validate(self):
        _probe_link(self.teacher)
        _probe_readout(self.student)
        m, k = self.student.width, self.teacher.k
        q0, ov = self.init.q0, self.init.overlap
        if q0.shape != (m, m):
            raise ProblemError(f"Init.q0 has shape {q0.shape}; it must be (width, width) = ({m}, {m}).")
        if ov.shape != (k, m):
            raise ProblemError(
                f"Init.overlap (M^0) has shape {ov.shape}; it must be (k, width) = ({k}, {m})."
            )
        for what, arr in (("Init.q0", q0), ("Init.overlap (M^0)", ov), ("TwoLayer.second_layer", self.student.second_layer)):
            if _is_concrete(arr) and not np.all(np.isfinite(np.asarray(arr))):
                raise ProblemError(f"{what} has non-finite entries ({np.asarray(arr).tolist()}); give finite values.")
        if _is_concrete(q0):
            qn = np.asarray(q0)
            if not np.allclose(qn, qn.T, atol=1e-12):
                raise ProblemError("Init.q0 must be symmetric.")
            if np.linalg.eigvalsh(qn).min() <= 0:
                raise ProblemError(
                    f"Init.q0 must be positive definite (smallest eigenvalue "
                    f"{np.linalg.eigvalsh(qn).min():.3g}); use e.g. q0 = s**2 * I for init scale s."
                )
        for name, val in (("ridge", self.ridge), ("ridge_second", self.ridge_second)):
            if _is_concrete(val) and not (np.isfinite(float(val)) and float(val) >= 0):   # nan and inf too
                raise ProblemError(f"Problem.{name} must be a finite number >= 0 (got {float(val)}).")

    # -- per-sample maps (autodiff) -------------------------------------------------
    @property
    def m(self) -> int:
        return self.student.width

    @property
    def k(self) -> int:
        return self.teacher.k

    def sample_loss(self, y, r, a):
        """``ell(y, F(r; a))`` for one sample, ``r`` of shape ``(m,)``."""
        return self.loss(y, self.student.F(r, a))


def _is_concrete(x) -> bool:
    return not isinstance(x, Tracer)


def sample_grad(problem: Problem, y, r, a):
    """``g = ∇_r ell(y, F(r; a))`` (shape ``(m,)``)."""
    return jax.grad(problem.sample_loss, argnums=1)(y, r, a)


def sample_hessian(problem: Problem, y, r, a):
    """``D = ∇²_r ell(y, F(r; a))`` (shape ``(m, m)``): Gauss–Newton plus ``ell'·∇²F``."""
    return jax.hessian(problem.sample_loss, argnums=1)(y, r, a)


def sample_grad_a(problem: Problem, y, r, a):
    """``∇_a ell(y, F(r; a))``."""
    return jax.grad(problem.sample_loss, argnums=2)(y, r, a)


def _at_trace_time(compute):
    """``compute()`` of concrete inputs; inside a caller's ``jit`` / ``vmap`` (where its operations would be staged
    and its host conversions fail) again under ``jax.ensure_compile_time_eval``. Not always under it: that
    evaluates op by op (measured: 37 small compilations instead of 8 for ``check_finite_maps``)."""
    try:
        return compute()
    except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError,
            jax.errors.TracerBoolConversionError, jax.errors.TracerIntegerConversionError):
        with jax.ensure_compile_time_eval():
            return compute()


def is_traced(tree) -> bool:
    """Whether any leaf of ``tree`` (e.g. a :class:`Problem`) is a JAX tracer: a problem built inside
    ``jax.vmap`` / ``jax.jit`` from traced parameters, whose maps cannot be evaluated before the run."""
    return any(not _is_concrete(x) for x in jax.tree_util.tree_leaves(tree))


def check_finite_maps(problem: Problem, key=None, samples: int = 256):
    """Evaluate link, readout, loss and their derivatives on Gaussian inputs at the initial
    state; raise :class:`ProblemError` naming which returned non-finite values. Under a caller's
    ``jax.jit`` / ``jax.vmap`` over δ or lr the (concrete) problem is checked at trace time
    (:func:`_at_trace_time`; session 51 audit: it raised ``TracerArrayConversionError``); a
    problem whose own parameters are traced cannot be evaluated and is not checked (returns False)."""
    if is_traced(problem):
        return False

    def compute():   # values on the host (under a caller's trace, this conversion is what fails first)
        y, checks = _finite_map_values(problem, *_initial_draws(problem, jax.random.key(7) if key is None else key, samples))
        return np.asarray(y), {name: np.asarray(v) for name, v in checks.items()}

    y, checks = _at_trace_time(compute)
    if not np.all(np.isfinite(np.asarray(y))):
        raise ProblemError(
            "Teacher.link returned non-finite labels on Gaussian inputs "
            f"({int(np.sum(~np.isfinite(np.asarray(y))))} of {samples}); fix the link."
        )
    for name, val in checks.items():
        v = np.asarray(val)
        if not np.all(np.isfinite(v)):
            raise ProblemError(
                f"The {name} is non-finite on Gaussian inputs at initialization "
                f"({int(np.sum(~np.isfinite(v)))} entries); check the activation, readout and loss "
                "(e.g. a log or division at 0, or a kink where a second derivative is needed)."
            )
    return True


@eqx.filter_jit
def _flipped_labels(teacher, z, eps, sz, se):
    """Labels of ``(z·sz_c, eps·se_c)`` for every row c of the sign patterns ``sz`` (C, k), ``se`` (C,)."""
    return jax.vmap(lambda a, b: teacher.labels(z * a, eps * b))(sz, se)


def _initial_draws(problem: Problem, key, samples: int):
    """Standard normal teacher inputs ``z`` (samples, k), the teacher's noise and field noise ``g`` (samples, m)
    for the checks at the initial state (:func:`_initial_fields` makes ``r``). Drawn outside the checked
    programs: they compile once per shape for every problem, and the straight-line Threefry
    (dmft/threefry_cpu.py) fused into the loss made the checked program 3x slower to compile."""
    kz, ke, kr = jax.random.split(key, 3)
    return (jax.random.normal(kz, (samples, problem.k)), problem.teacher.sample_noise(ke, (samples,)),
            jax.random.normal(kr, (samples, problem.m)))


def _initial_fields(problem: Problem, z, g):
    """Pre-activations at the initial state: ``r = M⁰ᵀz + chol(Q₀) g``."""
    return g @ jnp.linalg.cholesky(jnp.asarray(problem.init.q0)).T + z @ problem.init.overlap


def _probe_numpy(fn, args, name: str, sizes: str, fix: str, one: str, shape: str):
    """Call a user map once on numpy arrays: under JAX an index past the end is clamped silently, numpy raises,
    so the mistake is named here (``IndexError`` → :class:`ProblemError` saying ``sizes`` and ``fix``); a
    non-scalar output is named too. Other failures of this eager call (a map that needs JAX arrays) are left to
    the compiled checks that follow."""
    try:
        out = fn(*args)
    except IndexError as exc:
        raise ProblemError(f"{name} indexes its inputs beyond their {sizes}: {exc}. {fix}") from exc
    except Exception:
        return
    if np.size(out) != 1:
        raise ProblemError(f"{name} must return {one} (a scalar); it returned shape {np.shape(out)} for {shape}.")


def _probe_link(teacher):
    """The link on numpy zeros of the declared sizes (z: (k,), eps: (noise_dim,)): a user audit found z[1] with
    k = 1 reading z[0], a teacher running with wrong labels."""
    _probe_numpy(teacher.link, (np.zeros(teacher.k), np.zeros(teacher.noise_dim)), "Teacher.link",
                 f"declared sizes (z has k = {teacher.k} entries, eps has noise_dim = {teacher.noise_dim})",
                 "Fix k / noise_dim or the link (noise_dim = 0 means a noiseless link that must not read eps).",
                 "one label per sample", f"z of shape ({teacher.k},)")


def _probe_readout(student):
    """A user ``readout(r, a)`` on numpy zeros r (width,) and the numpy second layer. Session 50 user audit: a
    readout reading a[2] with a of length 2 ran as a[1], and r[3] with width 3 ran as r[2], in both simulate
    and solve, with no message."""
    if student.readout is None or not _is_concrete(student.second_layer):
        return
    _probe_numpy(student.readout, (np.zeros(student.width), np.asarray(student.second_layer)), "TwoLayer.readout",
                 f"sizes (r has width = {student.width} entries, a has {np.size(student.second_layer)})",
                 "Fix width / second_layer or the readout.", "one output per sample", f"r of shape ({student.width},)")


@eqx.filter_jit
def _finite_map_values(problem: Problem, z, eps, g):
    """The values :func:`check_finite_maps` inspects, in one compiled program per problem
    structure (eager op-by-op autodiff cost ~0.65 s per call; measured 17 s of a quick
    ``design_gd`` run, 27 calls), from standard normal ``z`` (samples, k), ``g`` (samples, m)
    and the teacher's noise ``eps``."""
    y = problem.teacher.labels(z, eps)
    r = _initial_fields(problem, z, g)
    a = problem.student.second_layer
    checks = {
        "readout/activation F(r; a)": jax.vmap(problem.student.F, in_axes=(0, None))(r, a),
        "loss ell(y, F)": jax.vmap(problem.sample_loss, in_axes=(0, 0, None))(y, r, a),
        "loss gradient ∇_r ell (autodiff)": jax.vmap(lambda yy, rr: sample_grad(problem, yy, rr, a))(y, r),
        "loss Hessian ∇²_r ell (autodiff)": jax.vmap(lambda yy, rr: sample_hessian(problem, yy, rr, a))(y, r),
    }
    return y, checks


# ---------------------------------------------------------------------------------
# jumps of ∇_r ℓ: a singular part of the response that autodiff cannot see
# ---------------------------------------------------------------------------------

JUMP_TOL = 1e-2          # relative mismatch (of 1 + max|∂ℓ/∂r_j|) above which a cell holds a jump of ∂ℓ/∂r_j
                         # (a step of the curvature alone, e.g. relu², Huber, gives O(h) ≲ 1e-3)
JUMP_CELLS = 4000        # cells of [-JUMP_SPAN, JUMP_SPAN] scanned per coordinate
JUMP_SPAN = 4.0


def response_jumps(problem: Problem, key=None, points: int = 8) -> float:
    """Largest jump of ``∂ℓ/∂r_j`` along ``r_j`` (other coordinates fixed) that its autodiff derivative
    does not account for, relative to ``1 + max|∂ℓ/∂r_j|``; 0 for a smooth loss∘readout.

    Why: the DMFT response ``Γ = E[∂g/∂ω]`` is computed from exact per-path Jacobians of
    ``g = ∇_r ℓ`` (autodiff). Where ``g`` jumps — ReLU (``σ'' = δ(r)``), the absolute loss — the
    derivative of the *expectation* has a Dirac part, ``p(r_j = 0)·E[jump | r_j = 0]``, that the
    pointwise derivative (0 almost everywhere) leaves out, so the DMFT is biased although every
    path is finite. Finite-d GD is unaffected (it uses gradients only). Method: ``points`` labelled
    samples at the initial state; along each coordinate, the increments of ``∂ℓ/∂r_j`` over
    ``JUMP_CELLS`` cells of ``[-4, 4]`` against the trapezoid integral of ``∂²ℓ/∂r_j²`` (smooth maps:
    mismatch O(h³), h = 0.002; a step of the curvature alone, O(h)). Measured (phase retrieval, m = 2,
    square loss): ReLU 0.78, the absolute loss 0.66 (jumps); relu² 6e-4, Huber 5e-5 (curvature steps);
    gelu, tanh, erf, softplus, silu, quadratic < 3e-9. Above ``JUMP_TOL`` the DMFT entry points warn
    (:func:`warn_if_response_jumps`). Under a caller's ``jax.jit`` / ``jax.vmap`` over δ or lr it is evaluated
    at trace time (the problem is concrete); for a problem whose own parameters are traced it returns nan
    (not checked: call it on a concrete problem of the family)."""
    if is_traced(problem):
        return float("nan")

    def compute():
        return _at_trace_time(lambda: float(_response_jump_values(
            problem, *_initial_draws(problem, jax.random.key(11) if key is None else key, points))))

    return _memoized(_JUMP_CACHE, _problem_memo(problem, points) if key is None else None, compute)


def _problem_memo(problem: Problem, *extra):
    """A hashable identity of a concrete problem (its tree structure with the static callables, and the
    bytes of its arrays); None under a trace."""
    leaves, treedef = jax.tree_util.tree_flatten(problem)
    try:
        arrays = tuple((np.asarray(x).dtype.str, np.shape(x), np.asarray(x).tobytes()) for x in leaves)
        hash(treedef)
    except Exception:  # traced leaves, or unhashable static data
        return None
    return (treedef, arrays) + extra


@eqx.filter_jit
def _response_jump_values(problem: Problem, z, eps, g):
    y = problem.teacher.labels(z, eps)
    r0 = _initial_fields(problem, z, g)
    a = problem.student.second_layer
    t = jnp.linspace(-JUMP_SPAN, JUMP_SPAN, JUMP_CELLS + 1)
    h = t[1] - t[0]
    m = problem.m

    def along(yy, rr, j):
        rs = jnp.broadcast_to(rr, (t.size, m)).at[:, j].set(t)
        ej = jnp.zeros(m).at[j].set(1.0)
        # ∂ℓ/∂r_j and its autodiff derivative along r_j (one forward-over-reverse product, not the m×m Hessian)
        gj, hj = jax.vmap(lambda r: jax.tree.map(lambda v: v[j], jax.jvp(lambda q: sample_grad(problem, yy, q, a),
                                                                           (r,), (ej,))))(rs)
        mism = jnp.abs(jnp.diff(gj) - 0.5 * h * (hj[1:] + hj[:-1]))
        return jnp.max(mism) / (1.0 + jnp.max(jnp.abs(gj)))

    per = jax.vmap(lambda yy, rr: jax.vmap(lambda j: along(yy, rr, j))(jnp.arange(m)))(y, r0)
    return jnp.max(jnp.where(jnp.isfinite(per), per, 0.0))


def warn_if_response_jumps(problem: Problem, where: str, fix: str) -> float:
    """Run :func:`response_jumps`; warn (``RuntimeWarning``) when it exceeds ``JUMP_TOL``. Returns the value
    for the setting record."""
    v = response_jumps(problem)
    if v > JUMP_TOL:
        import warnings

        warnings.warn(f"{where}: ∂ℓ/∂r jumps (relative size {v:.2g}; e.g. ReLU, whose σ'' is a Dirac mass at 0, or an "
                      "absolute loss). Autodiff sees derivative 0 there, so the DMFT response Γ = E[∂g/∂ω] misses the "
                      "Dirac part p(r = 0)·E[jump | r = 0] and the curves are biased (measured, docs/dmft.md: ReLU width 3, "
                      "trained second layer: a_1 0.765 ± 0.003 against GD's 0.726 ± 0.006 at d = 4000 and the DMFT of "
                      f"softplus(50 r)/50, 0.736 ± 0.003). Finite-d GD is not affected. {fix}",
                      RuntimeWarning, stacklevel=3)
    return v


def _value_record(v, depth: int = 0, module: bool = True) -> str:
    """A short, JSON-friendly record of a value a callable closes over (numbers exactly, small arrays in full,
    larger ones by shape and a hash, callables by :func:`_callable_name`)."""
    import hashlib

    if callable(v) and not isinstance(v, type):
        return _callable_name(v, depth + 1, module) if depth < 3 else getattr(v, "__qualname__", type(v).__name__)
    if isinstance(v, (bool, int, float, complex, str, type(None))):
        return repr(v)
    try:
        a = np.asarray(v)
        if a.dtype.kind in "biufc":
            if a.size <= 16:
                return repr(a.tolist())
            return f"array{a.shape}:{hashlib.sha256(a.tobytes()).hexdigest()[:12]}"
    except Exception:   # traced or not an array
        pass
    if isinstance(v, (tuple, list)) and len(v) <= 16:
        return "[" + ", ".join(_value_record(x, depth + 1, module) for x in v) + "]"
    return f"<{type(v).__name__}>"


def _code_digest(code) -> str:
    """sha256 of a code object's bytecode, names and constants (nested code objects by their own digest, not
    by their repr, which holds a memory address: the same in every process)."""
    import hashlib
    import types

    consts = tuple(_code_digest(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
    return hashlib.sha256(code.co_code + repr((consts, code.co_names)).encode()).hexdigest()


def _callable_name(f, depth: int = 0, module: bool = True) -> Optional[str]:
    """A record of a user callable that tells different callables apart: ``module.qualname``, a lambda's
    source line, and what the source does not show — default arguments, closure variables, a partial's
    arguments — plus a hash of the bytecode. (A user audit, session 49, found ``huber_loss(0.5)`` and
    ``huber_loss(2.0)``, ``relu_power(2)`` and ``relu_power(3)``, and two partials of one function recorded
    identically while their results differed.) ``module=False`` leaves module names out (a script run as
    ``__main__`` and the same module imported elsewhere then match: dmft.sweep's manifest)."""
    if f is None:
        return None
    import functools
    import inspect

    if isinstance(f, functools.partial):
        args = ", ".join([_value_record(a, depth, module) for a in f.args] +
                         [f"{k}={_value_record(v, depth, module)}" for k, v in sorted(f.keywords.items())])
        return f"partial({_callable_name(f.func, depth + 1, module)}, {args})"
    name = getattr(f, "__qualname__", type(f).__name__)
    if module:
        name = f"{getattr(f, '__module__', '?')}.{name}"
    if "<lambda>" in name:
        try:
            name += ": " + inspect.getsource(f).strip()[:200]
        except (OSError, TypeError):
            pass
    code = getattr(f, "__code__", None)
    if code is None:
        return name
    extra = []
    if getattr(f, "__defaults__", None):
        extra.append("defaults=(" + ", ".join(_value_record(v, depth, module) for v in f.__defaults__) + ")")
    if getattr(f, "__kwdefaults__", None):
        extra.append("kwdefaults={" + ", ".join(f"{k}={_value_record(v, depth, module)}"
                                                for k, v in sorted(f.__kwdefaults__.items())) + "}")
    if getattr(f, "__closure__", None):
        cells = []
        for n, c in zip(code.co_freevars, f.__closure__):
            try:
                cells.append(f"{n}={_value_record(c.cell_contents, depth, module)}")
            except ValueError:  # empty cell
                cells.append(f"{n}=<empty>")
        extra.append("closure={" + ", ".join(cells) + "}")
    extra.append(f"code={_code_digest(code)[:12]}")
    return name + " [" + "; ".join(extra) + "]"


def describe_problem(problem: Problem) -> dict:
    """The problem in a ``setting`` record: sizes, the initial state (Q_0, M^0, a^0), training flags and
    the callables by name (lambdas with their source line). Arrays under a trace are recorded as None."""
    def arr(x):
        try:
            return np.asarray(x, float).tolist()
        except Exception:  # traced
            return None

    st = problem.student
    return dict(k=int(problem.k), noise_dim=int(problem.teacher.noise_dim), width=int(problem.m),
                link=_callable_name(problem.teacher.link), hard=None if problem.teacher.hard is None else list(problem.teacher.hard),
                activation=_callable_name(st.activation), readout=_callable_name(st.readout),
                loss=_callable_name(problem.loss), second_layer=arr(st.second_layer),
                train_second_layer=bool(st.train_second_layer), second_layer_lr_scale=float(st.second_layer_lr_scale),
                q0=arr(problem.init.q0), overlap=arr(problem.init.overlap))
