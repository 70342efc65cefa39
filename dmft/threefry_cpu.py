"""The CPU lowering of JAX's Threefry-2x32 hash that ``import dmft`` (and so ``import flows``, ``import
spectral``) selects: the straight-line rounds JAX uses on every other platform, followed by a fusion
fence, instead of JAX's CPU default (a 5-trip ``fori_loop`` over the rounds). ``dmft.THREEFRY_STATUS``
says what happened.

Why. Every compiled program that draws random numbers (``dmft.simulate`` its data, initial weights and
test set inside its scan program; ``dmft.solve`` and ``dmft.stationary`` their Monte Carlo paths; ``flows``
its random starts) carries one copy of the hash per draw, and XLA's CPU backend compiles the looped copy
slowly. Three rules, measured by ``benchmarks/bench_threefry_cpu.py`` (committed
``benchmarks/results/threefry_cpu.json``: jaxlib 0.10.2, 2-core CPU, session 43, median compile time of 3
repeats, looped / straight / fenced):

- looped (JAX's CPU default): three vmapped normal draws 0.93 s; ``dmft.simulate`` (m = 2, d = 200)
  2.38 s; m = 1 ``dmft.stationary`` 4.05 s; a ``flows`` random start 0.47 s;
- straight, the rounds alone: 0.42 / 1.61 / 5.42 / 1.29 s. Fast where the draws feed a matrix product
  (simulate's data X), but XLA then fuses whole hash chains into every elementwise consumer (the m = 1
  stationary DMFT, where every operation is elementwise: 1.3–1.6x slower than looped in two runs);
- fenced, the rounds then a conditional whose predicate is false for every key and whose dead branch
  swaps the two output words: 0.51 / 1.74 / 3.74 / 0.31 s. XLA cannot prove the branch dead, keeps the
  conditional, and fuses nothing through it. (``lax.optimization_barrier`` is dropped by XLA's CPU
  pipeline, and a conditional with two identity branches is simplified away: both tried.)

Compiled run times are equal within noise. The whole quick benchmark suite (2 workers, same machine and
day): 754 s before this session's two changes, 672 s after (fenced rule, and ``check_finite_maps``'s draws
compiled apart from the checked program; with a new 37 s benchmark). Summed compilation 848 → 733 s;
``dmft.simulate``'s program 211 → 109 s over 106 compilations.

Bits. Threefry is exact uint32 arithmetic, and the live branch of the fence is the identity, so every rule
draws the same bits, and every distribution built on them (normal, uniform, split, fold_in, …) the same
values. With the fence the draws are materialized as with the loop, so the programs around them fuse as
before: measured, the simulate, solve and stationary outputs of the benchmark are bit-identical to the
looped rule's (without the fence they moved by up to 4e-16 / 9e-10 / 0). ``tests/test_threefry_cpu.py``
compares raw bits, splits and normal draws of all three rules byte for byte.

Safety. It replaces a lowering rule in JAX's private registry (``jax._src``), so it is applied only on a
JAX series where it was checked (``VERIFIED_JAX``), only when the private names it needs are there, and
never with ``DELTANN_FAST_CPU_COMPILE=0`` (the opt-out of :mod:`dmft.xla_flags` too). Lowering happens at
compile time, so it acts on every program compiled after the import. GPU and TPU lowerings are untouched.
"""

from __future__ import annotations

import os

VERIFIED_JAX = ("0.10.",)          # jax series on which the private names below were checked
OPT_OUT_ENV = "DELTANN_FAST_CPU_COMPILE"
_STATUS = None                      # what the first call did (the registration is process-wide)


def _threefry_module():
    """JAX's private Threefry module if it has the names used here (primitive, straight-line hash, both
    lowering rules), else None."""
    try:
        from jax._src.random import threefry2x32 as t
    except ImportError:  # pragma: no cover - other JAX layouts
        return None
    names = ("threefry2x32_p", "_threefry2x32_lowering", "_threefry2x32_lowering_rule", "_threefry2x32_cpu_lowering_rule")
    return t if all(hasattr(t, n) for n in names) else None


def reference_draws(key) -> dict:
    """Draws whose bytes must not depend on the lowering: raw bits, splits, fold_in, normal draws in both
    precisions and under vmap (compared between rules by ``tests/test_threefry_cpu.py`` and
    ``benchmarks/bench_threefry_cpu.py``)."""
    import jax
    import jax.numpy as jnp

    k1, k2, k3 = jax.random.split(key, 3)
    keys = jax.vmap(lambda s: jax.random.fold_in(k3, s))(jnp.arange(5))
    return dict(bits=jax.random.bits(k1, (257, 3), dtype=jnp.uint32), split=jax.random.key_data(jax.random.split(k2, 7)),
                normal64=jax.random.normal(k1, (300, 7), dtype=jnp.float64),
                normal32=jax.random.normal(k2, (129,), dtype=jnp.float32),
                uniform=jax.random.uniform(k3, (64, 2)),
                vmapped=jax.vmap(lambda k: jax.random.normal(k, (33, 4)))(keys))


def _fenced_rule(straight_hash):
    """The straight-line hash, then a fusion fence: a conditional on a predicate that is false for every
    key, ``(key word >> 31) == 7``, whose dead branch swaps the two output words. XLA cannot prove the
    branch dead, so it keeps the conditional, and no consumer fuses the hash into itself. (Without the
    fence XLA fused whole hash chains into every elementwise consumer: m = 1 stationary DMFT programs
    compiled 1.3-2x slower than with the loop. ``lax.optimization_barrier`` is dropped by XLA's CPU
    pipeline, and a conditional with two identity branches is simplified away; both measured.)
    The live branch is the identity, so the bits are the straight-line hash's."""
    import jax

    def rule(k1, k2, x1, x2):
        y1, y2 = straight_hash(k1, k2, x1, x2, use_rolled_loops=False)
        if k1.size == 0:
            return y1, y2
        dead = (k1.ravel()[0] >> 31) == 7          # uint32 >> 31 is 0 or 1: never 7
        return tuple(jax.lax.cond(dead, lambda w: (w[1], w[0]), lambda w: w, (y1, y2)))
    return rule


def register_cpu_lowering(rule: str) -> None:
    """Register ``rule`` as Threefry's CPU lowering: "fenced" (straight-line rounds and a fusion fence,
    what ``import dmft`` selects), "straight" (the rounds alone, JAX's lowering on other platforms) or
    "looped" (JAX's own CPU default). For tests and A/B measurements; a program is lowered with the rule
    registered when it is compiled."""
    from jax._src.interpreters import mlir

    t = _threefry_module()
    if t is None:  # pragma: no cover
        raise RuntimeError("this JAX has no jax._src.random.threefry2x32 lowering rules to choose from")
    rules = dict(looped=lambda: t._threefry2x32_cpu_lowering_rule, straight=lambda: t._threefry2x32_lowering_rule,
                 fenced=lambda: mlir.lower_fun(_fenced_rule(t._threefry2x32_lowering), multiple_results=True))
    if rule not in rules:
        raise ValueError(f"rule must be one of {sorted(rules)} (got {rule!r}).")
    mlir.register_lowering(t.threefry2x32_p, rules[rule](), platform="cpu")


def fenced_threefry_on_cpu(environ=None, jax_version: str | None = None) -> str:
    """Select the fenced straight-line Threefry lowering on CPU where it is safe (module docstring). Returns why
    it was or was not applied, for provenance: ``"applied"``, ``"opted out"``, ``"jax <v> not verified"``
    or ``"private JAX names missing"``. The arguments exist for tests (with them nothing is registered)."""
    global _STATUS
    probe = environ is not None or jax_version is not None
    if not probe and _STATUS is not None:
        return _STATUS
    env = os.environ if environ is None else environ
    if env.get(OPT_OUT_ENV, "1") == "0":
        status = "opted out"
    else:
        if jax_version is None:
            import jax

            jax_version = jax.__version__
        if not jax_version.startswith(VERIFIED_JAX):
            status = f"jax {jax_version} not verified"
        elif _threefry_module() is None:  # pragma: no cover
            status = "private JAX names missing"
        else:
            status = "applied"
            if not probe:
                register_cpu_lowering("fenced")
    if not probe:
        _STATUS = status
    return status
