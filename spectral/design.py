"""Activation (or loss) design: minimize the threshold over a parametric family (issue #7).

Gradient descent with an optax optimizer on the per-key threshold of the stationary route,
with its exact gradient (``spectral.threshold_gradient``). The constraint "the first phase
converges" is enforced by the threshold itself: where the stationary fixed point is not
converged (or the root is lost, or sits on a kink) ``threshold_gradient`` raises, and the step
is backtracked (halved, up to ``backtracks`` times) toward the last accepted point; if every
trial fails the loop stops and says so. Each accepted iterate continues Newton in δ from the
previous root.

The objective is the per-key threshold (fixed samples): the loop can exploit that key's Monte
Carlo noise, so the result must be re-evaluated with independent keys
(``spectral.delta_nn_stationary``; ``benchmarks/bench_design.py`` does) before it is called an
improvement.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from .threshold_gradient import ThresholdGradientError, threshold_gradient


@dataclasses.dataclass
class DesignResult:
    params: Any                 # final accepted parameters
    delta_nn: float             # per-key threshold there
    history: list               # per iteration: params, delta_nn, gradient, accepted/backtracks, wall
    status: str                 # "max-steps" | "stalled" | "converged"
    message: str
    setting: dict


def _to_list(p):
    return jax.tree.map(lambda v: np.asarray(v).tolist(), p)


def design(family: Callable, params, *, trainable, delta0: float, key, paths: int, warmup, level="edge",
           steps: int = 20, optimizer: Optional[optax.GradientTransformation] = None, backtracks: int = 4,
           grad_tol: float = 1e-4, progress: Optional[Callable[[str], None]] = None, **threshold_kw) -> DesignResult:
    """Minimize the per-key δ_NN of ``family(params)`` over ``params[trainable]`` (a tuple of
    keys of the params dict). ``optimizer`` defaults to ``optax.adam(0.05)``. Returns the
    path, the final parameters and why the loop stopped."""
    say = progress or (lambda s: None)
    params = {k: jnp.asarray(v, float) for k, v in params.items()}
    missing = [k for k in trainable if k not in params]
    if missing:
        raise ValueError(f"trainable names {missing} are not keys of params ({sorted(params)}).")
    opt = optimizer or optax.adam(0.05)
    sub = {k: params[k] for k in trainable}
    state = opt.init(sub)
    kw = dict(key=key, paths=paths, level=level, **threshold_kw)
    t0 = time.perf_counter()
    g = threshold_gradient(family, params, delta0=delta0, warmup=warmup, **kw)
    hist = [dict(step=0, params=_to_list(params), delta_nn=g.delta_nn, gradient=_to_list({k: g.gradient[k] for k in trainable}),
                 backtracks=0, wall_s=time.perf_counter() - t0)]
    say(f"step 0: δ_NN = {g.delta_nn:.5f}")
    status, msg = "max-steps", f"{steps} steps done"
    for it in range(1, steps + 1):
        grad = {k: g.gradient[k] for k in trainable}
        gnorm = float(np.sqrt(sum(float(jnp.sum(v**2)) for v in grad.values())))
        if gnorm < grad_tol:
            status, msg = "converged", f"gradient norm {gnorm:.1e} < grad_tol {grad_tol:.0e}"
            break
        updates, new_state = opt.update(grad, state, sub)
        trial, accepted, nb = None, False, 0
        for nb in range(backtracks + 1):
            scale = 0.5**nb
            new_sub = {k: sub[k] + scale * updates[k] for k in trainable}
            trial = dict(params, **new_sub)
            try:
                # continue from the last fixed point; after a failure, restart from a warm-up run
                g_new = threshold_gradient(family, trial, delta0=g.delta_nn, warmup=warmup,
                                           start=None if nb else g.state, **kw)
                accepted = True
                break
            except ThresholdGradientError as e:
                say(f"step {it}: trial rejected ({e}); backtracking")
                last_err = str(e)
        if not accepted:
            status, msg = "stalled", f"every trial step at iteration {it} failed: {last_err}"
            break
        sub, state, params, g = new_sub, new_state, trial, g_new
        hist.append(dict(step=it, params=_to_list(params), delta_nn=g.delta_nn, gradient=_to_list({k: g.gradient[k] for k in trainable}),
                         backtracks=nb, wall_s=time.perf_counter() - t0))
        say(f"step {it}: δ_NN = {g.delta_nn:.5f} (|∇| = {gnorm:.3g}, backtracks {nb})")
    setting = dict(trainable=list(trainable), steps=int(steps), paths=int(paths), level=level, backtracks=int(backtracks),
                   optimizer=repr(optimizer) if optimizer is not None else "optax.adam(0.05)",
                   warmup=dict(lr=float(warmup.lr), steps=int(warmup.steps), paths=int(warmup.paths)),
                   objective="per-key δ_NN of the stationary route (spectral.threshold_gradient)")
    return DesignResult(params=params, delta_nn=g.delta_nn, history=hist, status=status, message=msg, setting=setting)
