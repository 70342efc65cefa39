"""Activation (or loss) design: minimize the threshold over a parametric family (issue #7).

Gradient descent with an optax optimizer on the per-key threshold of the stationary route,
with its exact gradient (``spectral.threshold_gradient``). The constraint "the first phase
converges" is enforced by the threshold itself: where the stationary fixed point is not
converged (or the root is lost, or sits on a kink) ``threshold_gradient`` raises, and the step
is backtracked (halved, up to ``backtracks`` times) toward the last accepted point; if every
trial fails the loop stops and says so. Each accepted iterate continues Newton in δ from the
previous root.

The objective is the mean over a few keys of the per-key threshold (fixed samples): the loop
can still exploit those keys' Monte Carlo noise, so the result must be re-evaluated with independent keys
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

from dmft.solve import key_record

from .threshold_gradient import ThresholdGradientError, threshold_gradient


@dataclasses.dataclass
class DesignResult:
    params: Any                 # final accepted parameters
    delta_nn: float             # mean over keys of the per-key threshold there (in-sample: the design keys)
    history: list               # per iteration: params, delta_nn, gradient, accepted/backtracks, wall
    status: str                 # "max-steps" | "stalled" | "converged" | "no-dependence"
    message: str
    setting: dict
    best_step: int = 0          # the accepted iterate with the lowest δ_NN (Adam can step over a sharp minimum:
                                # the last iterate is not always the best; a user audit saw 1.289 then 1.298)

    @property
    def best(self) -> dict:
        """The history entry of the best accepted iterate (params, delta_nn, delta_nn_stderr, per_key, ...)."""
        return self.history[self.best_step]


def _to_list(p):
    return jax.tree.map(lambda v: np.asarray(v).tolist(), p)


def design(family: Callable, params, *, trainable, delta0: float, keys, paths: int, warmup, level="edge",
           steps: int = 20, optimizer: Optional[optax.GradientTransformation] = None, backtracks: int = 4,
           grad_tol: float = 1e-4, progress: Optional[Callable[[str], None]] = None,
           threshold_options: Optional[dict] = None) -> DesignResult:
    """Minimize the Monte Carlo estimate of δ_NN — the mean over ``keys`` of the per-key
    threshold of ``family(params)`` — over ``params[trainable]`` (names in the params dict).
    The per-key gradient is noisy (measured: its across-key spread is comparable to its mean at
    512–2048 paths, bench_threshold_gradient), so use several keys. ``optimizer`` defaults to
    ``optax.adam(0.05)``. ``threshold_options``: further keywords of ``threshold_gradient``
    (e.g. ``dict(route="dynamic", lr=0.5, steps=80)`` to design on δ*(t); ``warmup`` may then be
    None). Returns the path, the final parameters and why the loop stopped."""
    say = progress or (lambda s: None)
    params = {k: jnp.asarray(v, float) for k, v in params.items()}
    missing = [k for k in trainable if k not in params]
    if missing:
        raise ValueError(f"trainable names {missing} are not keys of params ({sorted(params)}).")
    if not tuple(trainable):
        raise ValueError("trainable is empty: name at least one key of params to optimize.")
    keys = list(keys)
    if not keys:
        raise ValueError("keys: give at least one PRNG key (several: the per-key gradient is noisy).")
    opt = optax.adam(0.05) if optimizer is None else optimizer
    sub = {k: params[k] for k in trainable}
    state = opt.init(sub)
    kw = dict(paths=paths, level=level, **(threshold_options or {}))
    t0 = time.perf_counter()

    def evaluate(p, roots, starts):
        """Mean δ_NN and gradient over keys (continuing each key from its last fixed point
        when ``starts`` is given)."""
        res = [threshold_gradient(family, p, delta0=roots[i], key=k, warmup=warmup,
                                  start=None if starts is None else starts[i], **kw) for i, k in enumerate(keys)]
        grad = {n: jnp.mean(jnp.stack([r.gradient[n] for r in res]), axis=0) for n in trainable}
        return res, float(np.mean([r.delta_nn for r in res])), grad

    res, dnn, grad = evaluate(params, [delta0] * len(keys), None)

    def record(step, nb):
        per = [r.delta_nn for r in res]
        return dict(step=step, params=_to_list(params), delta_nn=dnn,
                    delta_nn_stderr=float(np.std(per, ddof=1) / np.sqrt(len(per))) if len(per) > 1 else None,
                    per_key=per, gradient=_to_list(grad), backtracks=nb, wall_s=time.perf_counter() - t0)

    hist = [record(0, 0)]
    say(f"step 0: δ_NN = {dnn:.5f}")
    status, msg = "max-steps", f"{steps} steps done"
    flat = [n for n in trainable if not np.any(np.asarray(grad[n]) != 0.0)]
    for it in range(1, steps + 1):
        gnorm = float(np.sqrt(sum(float(jnp.sum(v**2)) for v in grad.values())))
        if it == 1 and len(flat) == len(tuple(trainable)):
            # an exactly zero gradient at the start: the threshold does not depend on these parameters on this
            # route (e.g. init_scale on the stationary route), not a converged design (audit: reported "converged")
            status, msg = "no-dependence", (f"the gradient is exactly 0 for every trainable {flat} at the start: the "
                                            "threshold does not depend on them on this route; nothing to design")
            break
        if gnorm < grad_tol:
            status, msg = "converged", f"gradient norm {gnorm:.1e} < grad_tol {grad_tol:.0e}"
            break
        updates, new_state = opt.update(grad, state, sub)
        accepted, last_err = False, ""
        for nb in range(backtracks + 1):
            scale = 0.5**nb
            new_sub = {k: sub[k] + scale * updates[k] for k in trainable}
            trial = dict(params, **new_sub)
            try:
                # continue every key from its last fixed point; after a failure, from a warm-up run
                out = evaluate(trial, [r.delta_nn for r in res], None if nb else [r.state for r in res])
                accepted = True
                break
            except ThresholdGradientError as e:
                last_err = str(e)
                say(f"step {it}: trial rejected ({last_err}); backtracking")
        if not accepted:
            status, msg = "stalled", f"every trial step at iteration {it} failed: {last_err}"
            break
        sub, state, params = new_sub, new_state, trial
        res, dnn, grad = out
        hist.append(record(it, nb))
        say(f"step {it}: δ_NN = {dnn:.5f} (|∇| = {gnorm:.3g}, backtracks {nb})")
    setting = dict(trainable=list(trainable), steps=int(steps), paths=int(paths), keys=len(keys), level=level,
                   backtracks=int(backtracks), optimizer="optax.adam(0.05)" if optimizer is None else
                   "user-supplied optax transformation (its hyperparameters are not introspectable: record them with the result)",
                   warmup=None if warmup is None else dict(lr=float(warmup.lr), steps=int(warmup.steps), paths=int(warmup.paths)),
                   threshold_options={k: v for k, v in (threshold_options or {}).items()},
                   objective="mean over keys of the per-key δ_NN of the stationary route (spectral.threshold_gradient)",
                   family=getattr(family, "__qualname__", type(family).__name__),
                   key_data=[key_record(k) for k in keys], delta0=float(delta0),
                   constant_trainables=flat)
    best = int(np.argmin([h["delta_nn"] for h in hist]))
    if flat and status != "no-dependence":
        msg += f"; the gradient was exactly 0 for {flat} at the start (no dependence on this route)"
    if best != len(hist) - 1:
        msg += (f"; the best iterate is step {best} (δ_NN {hist[best]['delta_nn']:.5f}, result.best), not the last "
                f"({dnn:.5f})")
    return DesignResult(params=params, delta_nn=dnn, history=hist, status=status, message=msg, setting=setting,
                        best_step=best)
