"""Positively homogeneous models H(params, X) -> (n,) over pytrees (THEORY §5).

    H(X; c w) = c^L H(X; w)   for c > 0,   L >= 2, locally Lipschitz gradient.

A model object is an equinox Module that is *callable as H(params, X)* and carries
`init(key, d_in)` (a random unit-norm parameter pytree), the declared degree
`degree(d_in)`, and `lipschitz_grad` (False for ReLU, p = 1: the theorems do not apply and
every tool refuses it unless called with `experimental=True`).

Constructors: `feedforward`, `two_layer`, `deep_linear`, `diagonal_linear`, and `Model`
(wraps any user callable H(params, X) with a `params_like` pytree).

Feed-forward convention: params = (W_1, ..., W_{D-1}, v) with W_1 of shape (d, m_1),
W_l of shape (m_{l-1}, m_l), v of shape (m_{D-1},);
H(X) = sigma(... sigma(sigma(X W_1) W_2) ...) v.  With sigma p-homogeneous the degree is
a_0 = 0, a_l = p (a_{l-1} + 1), L = a_{D-1} + 1   (p = 1: L = D; two-layer square: L = 3).
"""
from __future__ import annotations

import functools
from typing import Any, Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from .errors import FlowError

ACTIVATIONS = ("square", "relu", "relu_p", "leaky_relu", "linear")


def activation_fn(name: str, p: float = 1.0, alpha: float = 0.0) -> Callable:
    """sigma(z) for the supported p-homogeneous activations."""
    if name == "square":
        return lambda z: z * z
    if name == "linear":
        return lambda z: z
    if name in ("relu", "relu_p"):
        if p == 1:
            return jax.nn.relu
        return lambda z: jax.nn.relu(z) ** p
    if name == "leaky_relu":
        # m = max(z, alpha z); sigma = sign(m) |m|^p   (p-homogeneous, odd-ish)
        def f(z):
            m = jnp.maximum(z, alpha * z)
            return m if p == 1 else jnp.sign(m) * jnp.abs(m) ** p
        return f
    raise FlowError(f"activation={name!r} is not supported; use one of {ACTIVATIONS} "
                    "or wrap your own H(params, X) with flows.Model(fn, params_like, degree=...).")


def _unit(params):
    flat, unravel = ravel_pytree(params)
    return unravel(flat / jnp.linalg.norm(flat))


@functools.partial(jax.jit, static_argnums=1)
def _random_unit(key, shapes):
    # one compiled program per shape list (eager, the ravel/unravel closures cost ~0.3 s a call)
    keys = jax.random.split(key, len(shapes))
    return _unit(tuple(jax.random.normal(k, s) for k, s in zip(keys, shapes)))


class FeedForward(eqx.Module):
    """Bias-free feed-forward net with p-homogeneous activation, scalar output."""
    widths: tuple = eqx.field(static=True)
    activation: str = eqx.field(static=True)
    p: float = eqx.field(static=True)
    alpha: float = eqx.field(static=True)
    d_in: Any = eqx.field(static=True, default=None)

    def __call__(self, params, X):
        sig = activation_fn(self.activation, self.p, self.alpha)
        h = X
        for W in params[:-1]:
            h = sig(h @ W)
        return h @ params[-1]

    @property
    def act_degree(self) -> float:
        return 1.0 if self.activation == "linear" else (2.0 if self.activation == "square" else float(self.p))

    def degree(self, d_in=None) -> float:
        """Declared homogeneity degree L (a_l = p (a_{l-1} + 1), L = a_{D-1} + 1)."""
        a = 0.0
        for _ in self.widths:
            a = self.act_degree * (a + 1.0)
        return a + 1.0

    @property
    def lipschitz_grad(self) -> bool:
        if self.activation in ("square", "linear"):
            return True
        if self.activation == "leaky_relu" and self.alpha == 1.0:
            return True
        return self.p >= 2

    def shapes(self, d_in):
        dims = (d_in,) + tuple(self.widths)
        return [(dims[i], dims[i + 1]) for i in range(len(self.widths))] + [(dims[-1],)]

    def init(self, key, d_in=None):
        d_in = d_in if d_in is not None else self.d_in
        if d_in is None:
            raise FlowError("d_in is unknown: pass d_in= to the constructor or to init(key, d_in).")
        return _random_unit(key, tuple(tuple(s) for s in self.shapes(d_in)))

    def unit_norms(self, params):
        """Per hidden unit j of layer l: sqrt(||incoming col j of W_l||^2 + ||outgoing row j||^2)."""
        out = []
        for l in range(len(self.widths)):
            inc = jnp.sum(params[l] ** 2, axis=0)
            nxt = params[l + 1]
            og = nxt ** 2 if nxt.ndim == 1 else jnp.sum(nxt ** 2, axis=1)
            out.append(jnp.sqrt(inc + og))
        return out


def feedforward(widths=(4,), activation="square", p: float = 1.0, alpha: float = 0.0,
                d_in=None) -> FeedForward:
    """Feed-forward homogeneous net. activation in {'square','relu','relu_p','leaky_relu','linear'};
    `p` is the ReLU^p / leaky power, `alpha` the leak. ReLU (p = 1) has no locally Lipschitz
    gradient and is refused by the theory tools unless `experimental=True`."""
    if activation not in ACTIVATIONS:
        activation_fn(activation)  # raises
    if activation in ("relu_p",) and p < 1:
        raise FlowError(f"p={p}: ReLU^p needs p >= 1 (p >= 2 for the theorems).")
    if activation == "relu" and p == 1.0:
        pass
    widths = tuple(int(w) for w in (widths if np.iterable(widths) else (widths,)))
    if not widths or min(widths) < 1:
        raise FlowError(f"widths={widths}: every hidden layer needs width >= 1 (e.g. two_layer(width=4)).")
    return FeedForward(widths=widths, activation=activation, p=float(p), alpha=float(alpha), d_in=d_in)


def two_layer(activation="square", width=4, p: float = 1.0, alpha: float = 0.0, d_in=None) -> FeedForward:
    """H(x) = sum_j v_j sigma(w_j . x).  square: L = 3; ReLU^p: L = p + 1; linear: L = 2."""
    if activation == "relu_p" and p == 1.0:
        p = 2.0
    return feedforward((width,), activation, p, alpha, d_in)


def deep_linear(depth=3, width=4, d_in=None) -> FeedForward:
    """Deep linear net with `depth` weight matrices: L = depth."""
    return feedforward((width,) * (depth - 1), "linear", 1.0, 0.0, d_in)


class DiagonalLinear(eqx.Module):
    """H(x; u, v) = sum_i u_i v_i x_i  (L = 2). Closed forms: with c = X^T e_y,
    KKT points (u_i = s v_i = 1/sqrt2 on coordinate i), N = |c_i|/2, Delta = |c_(1)| - |c_(2)|."""
    d_in: Any = eqx.field(static=True, default=None)

    def __call__(self, params, X):
        u, v = params
        return X @ (u * v)

    def degree(self, d_in=None):
        return 2.0

    lipschitz_grad: bool = eqx.field(static=True, default=True)

    def init(self, key, d_in=None):
        d_in = d_in if d_in is not None else self.d_in
        if d_in is None:
            raise FlowError("d_in is unknown: pass d_in= to diagonal_linear or init(key, d_in).")
        return _random_unit(key, ((d_in,), (d_in,)))


def diagonal_linear(d_in=None) -> DiagonalLinear:
    return DiagonalLinear(d_in=d_in)


class Model(eqx.Module):
    """Wrap a user callable H(params, X). `params_like` fixes the pytree structure used for
    random starts; `degree` (optional) is the declared L, checked against the measured one."""
    fn: Callable = eqx.field(static=True)
    params_like: Any
    declared: Any = eqx.field(static=True, default=None)
    lipschitz_grad: bool = eqx.field(static=True, default=True)

    def __call__(self, params, X):
        return self.fn(params, X)

    def degree(self, d_in=None):
        return self.declared

    def init(self, key, d_in=None):
        flat, unravel = ravel_pytree(self.params_like)
        x = jax.random.normal(key, flat.shape, dtype=jnp.float64)
        return unravel(x / jnp.linalg.norm(x))


def as_model(model, params_like=None) -> Any:
    """Return an object with __call__(params, X), init(key, d_in), degree(d_in), lipschitz_grad."""
    if hasattr(model, "init") and hasattr(model, "degree"):
        return model
    if not callable(model):
        raise FlowError(f"model={model!r} is not callable as H(params, X).")
    if params_like is None:
        raise FlowError("model is a bare callable H(params, X): pass params_like= (a parameter pytree "
                        "of the right structure) or build it with flows.feedforward / flows.two_layer / "
                        "flows.Model(fn, params_like, degree=...).")
    return Model(fn=model, params_like=params_like)


def require_theory(model, experimental: bool, where: str):
    """Refuse models without locally Lipschitz gradient (ReLU) unless experimental=True."""
    if not getattr(model, "lipschitz_grad", True) and not experimental:
        raise FlowError(
            f"{where}: model has no locally Lipschitz gradient (ReLU, p = 1); the Kumar-Haupt "
            "theorems (THEORY §5) do not apply. Use activation='relu_p' with p >= 2 or square, or "
            "pass experimental=True to run it anyway (results are then heuristic).")


@eqx.filter_jit
def _scaled_outputs(model, X, w, cs):
    return jax.vmap(lambda c: model(jax.tree_util.tree_map(lambda a: c * a, w), X))(cs)


def measure_degree(model, X, key, params=None, n_points: int = 3, cs=(0.5, 2.0, 3.0)):
    """Measure L from H(c w) = c^L H(w) at random points. Returns (L_median, spread, values)."""
    model = as_model(model)
    X = jnp.asarray(X)
    pts = [params] if params is not None else []
    keys = jax.random.split(key, n_points)
    pts += [model.init(k, X.shape[1]) for k in keys]
    cs_arr = jnp.asarray(cs, dtype=jnp.float64)
    evalc = lambda w: _scaled_outputs(model, X, w, jnp.concatenate([jnp.ones(1), cs_arr]))
    vals = []
    for w in pts:
        hs = np.asarray(evalc(w))
        h1 = hs[0]
        scale = np.max(np.abs(h1))
        ok = np.abs(h1) > 1e-6 * max(scale, 1e-300)
        if not ok.any():
            continue
        for c, hc in zip(cs, hs[1:]):
            ratio = hc[ok] / h1[ok]
            with np.errstate(all="ignore"):
                # a sign change means not positively homogeneous -> nan
                vals.extend(list(np.where(ratio <= 0, np.nan, np.log(np.abs(ratio)) / np.log(c))))
    vals = np.asarray(vals)
    if vals.size == 0:
        raise FlowError("model: H(X; w) vanishes at every random w; cannot measure the degree L.")
    if np.any(~np.isfinite(vals)):
        return float("nan"), float("inf"), vals
    return float(np.median(vals)), float(np.max(vals) - np.min(vals)), vals


def check_degree(model, X, key=None, params=None, tol: float = 1e-6) -> float:
    """Measured homogeneity degree; FlowError if not constant, < 2, or != declared."""
    key = jax.random.PRNGKey(12345) if key is None else key
    L, spread, _ = measure_degree(model, X, key, params)
    if not np.isfinite(L) or spread > tol * max(1.0, abs(L)):
        raise FlowError(f"model is not positively homogeneous: measured degree log|H(cw)/H(w)|/log c "
                        f"varies by {spread:.3g} over c and random w (median {L:.4g}). Remove biases / "
                        "non-homogeneous activations (tanh, GeLU), or use flows.feedforward.")
    declared = model.degree(X.shape[1]) if hasattr(model, "degree") else None
    if declared is not None and abs(declared - L) > 1e-6 * max(1.0, L):
        raise FlowError(f"model: declared degree {declared} but measured L = {L:.8g}; fix degree=.")
    if L < 2 - 1e-9:
        raise FlowError(f"model has degree L = {L:.4g} < 2; the theory (THEORY §5) needs L >= 2.")
    Lr = round(L)
    return float(Lr) if abs(L - Lr) < 1e-8 else L
