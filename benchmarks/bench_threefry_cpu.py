"""Compile time of random draws on CPU, three lowerings of JAX's Threefry hash in turn in one process, no
compilation cache: JAX's CPU default (looped: a 5-trip loop over the rounds), the straight-line rounds
alone (JAX's lowering elsewhere), and the straight-line rounds with a fusion fence (fenced: what
``import dmft`` selects, ``dmft/threefry_cpu.py``).

Programs, each compiled anew per repeat (``jax.clear_caches()``; the persistent cache is switched off
for the benchmark), compilation time from ``jax.monitoring`` (backend + tracing + lowering), run time of
the compiled call after it:

- ``draws``: three ``jax.random.normal`` draws of one seed's data, init and test set, ``vmap``ped over
  4 keys: (800, 200), (200, 2), (16384, 3);
- ``dmft.simulate``: phase retrieval with label noise, GeLU student m = 2, d = 200, δ = 2, 40 steps, 4 seeds;
- ``dmft.solve``: the same problem, 20 steps, 4096 paths;
- ``dmft.stationary``: logistic regression with a linear student (m = 1), δ = 2, 2048 paths: every
  operation elementwise, where the unfenced straight-line hash fuses into each consumer;
- ``dmft.check_finite_maps``: the same problem as simulate (its draws compile apart from the checked program);
- ``flows`` random start: ``flows.two_layer`` init on 8 inputs, width 6.

Bits: raw Threefry bits, splits, normal draws in both precisions and under vmap, compared byte for byte
with the looped rule's. Results: the largest difference of the simulate, solve and stationary outputs from
the looped rule's (the surrounding programs fuse differently: rounding-level differences, amplified by
the DMFT).
"""

from __future__ import annotations

import pathlib
import time

import jax
import jax.numpy as jnp
import numpy as np

NAME = "threefry_cpu"
RULES = ("looped", "straight", "fenced")


def settings(mode: str) -> dict:
    return dict(repeats=3 if mode != "quick" else 1, order="looped, straight, fenced in turn",
                draws=dict(keys=4, shapes=[[800, 200], [200, 2], [16384, 3]]),
                problem="y = z^2 + 0.1 eps, GeLU student m = 2, a = (1/2, 1/2) trained, Q0 = I/2, M0 = 0.1, square loss",
                simulate=dict(d=200, delta=2.0, lr=0.2, steps=40, seeds=4),
                solve=dict(delta=2.0, lr=0.2, steps=20, paths=4096),
                stationary=dict(problem="logistic regression, y = sign(z + 0.3 eps), linear student m = 1, ridge 0.1",
                                delta=2.0, paths=2048, max_iters=60),
                flows=dict(model="two_layer", d_in=8, width=6))


def _problem():
    import dmft

    m = 2
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, eps: z[0] ** 2 + 0.1 * eps[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jax.nn.gelu, width=m, second_layer=jnp.ones(m) / m, train_second_layer=True),
        loss=dmft.square_loss, ridge=0.0,
        init=dmft.Init(q0=0.5 * jnp.eye(m), overlap=jnp.full((1, m), 0.1)))


def _cases(S):
    import dmft
    import flows

    problem = _problem()
    logit = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: jnp.sign(z[0] + 0.3 * e[0]), k=1, noise_dim=1),
                         student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)),
                         loss=dmft.logistic_loss, ridge=0.1)
    shapes = [tuple(s) for s in S["draws"]["shapes"]]

    def one(k):
        ks = jax.random.split(k, len(shapes))
        return [jax.random.normal(kk, s) for kk, s in zip(ks, shapes)]
    draw_all = jax.jit(jax.vmap(one))                  # one jitted function: its second call is a compiled call

    def draws():
        keys = jax.vmap(lambda s: jax.random.fold_in(jax.random.key(3), s))(jnp.arange(S["draws"]["keys"]))
        return draw_all(keys)

    def simulate():
        r = dmft.simulate(problem, key=jax.random.key(1), **S["simulate"])
        return np.concatenate([np.asarray(r.train_error), np.asarray(r.test_error)])

    def solve():
        r = dmft.solve(problem, key=jax.random.key(0), **S["solve"])
        return np.concatenate([np.asarray(r.train_error), np.asarray(r.test_error)])

    def finite_maps():
        dmft.check_finite_maps(problem)
        return np.zeros(1)

    def stationary():
        st = {k: v for k, v in S["stationary"].items() if k != "problem"}
        r = dmft.stationary(logit, key=jax.random.key(10), **st)
        return np.asarray([r.train_error, r.test_error], float)

    def flows_init():
        model = flows.two_layer(width=S["flows"]["width"])
        return np.concatenate([np.ravel(p) for p in jax.tree.leaves(model.init(jax.random.key(5), S["flows"]["d_in"]))])

    return dict(draws=draws, simulate=simulate, solve=solve, stationary=stationary, check_finite_maps=finite_maps,
                flows_init=flows_init)


def run(mode: str, outdir: pathlib.Path) -> dict:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    import dmft
    from dmft.threefry_cpu import reference_draws, register_cpu_lowering

    from .runner import _COMPILE

    jax.config.update("jax_enable_x64", True)
    outdir = pathlib.Path(outdir)
    S = settings(mode)
    if dmft.THREEFRY_STATUS != "applied" or jax.devices()[0].platform != "cpu":
        return dict(setting=S, accuracy=[], performance=[], data=dict(
            skipped=f"CPU lowering only (platform {jax.devices()[0].platform}; dmft.THREEFRY_STATUS {dmft.THREEFRY_STATUS})"))
    cases = _cases(S)
    _COMPILE.register()
    cache_was = jax.config.jax_enable_compilation_cache
    jax.config.update("jax_enable_compilation_cache", False)
    comp = {c: {r: [] for r in RULES} for c in cases}
    runs = {c: {r: [] for r in RULES} for c in cases}
    out = {c: {} for c in cases}
    bits = {}
    try:
        for rep in range(S["repeats"]):
            for rule in RULES:
                register_cpu_lowering(rule)
                if rep == 0:
                    jax.clear_caches()
                    bits[rule] = jax.tree.map(np.asarray, jax.jit(reference_draws)(jax.random.key(20261206)))
                for name, f in cases.items():
                    jax.clear_caches()
                    c0, t0 = _COMPILE.seconds(), time.perf_counter()
                    out[name][rule] = jax.block_until_ready(f())
                    wall = time.perf_counter() - t0
                    comp[name][rule].append(_COMPILE.seconds() - c0)
                    t1 = time.perf_counter()
                    jax.block_until_ready(f())                      # compiled: run time
                    runs[name][rule].append(time.perf_counter() - t1)
                    print(f"   rep {rep} {rule:8s} {name:18s} compile {comp[name][rule][-1]:.2f} s "
                          f"(first call {wall:.2f} s), compiled call {runs[name][rule][-1]:.3f} s", flush=True)
    finally:
        register_cpu_lowering("fenced")
        jax.clear_caches()
        jax.config.update("jax_enable_compilation_cache", cache_was)

    same_bits = {r: {k: bool(bits["looped"][k].tobytes() == bits[r][k].tobytes()) for k in bits["looped"]}
                 for r in RULES[1:]}
    diff = {r: {c: float(np.max(np.abs(out[c]["looped"] - out[c][r]))) for c in ("simulate", "solve", "stationary", "flows_init")}
            for r in RULES[1:]}
    med = lambda v: float(np.median(v))
    perf, total = [], {r: 0.0 for r in RULES}
    for name in cases:
        c = {r: med(comp[name][r]) for r in RULES}
        for r in RULES:
            total[r] += c[r]
        ranges = " / ".join(f"{np.ptp(comp[name][r]):.2f}" for r in RULES)
        calls = " / ".join(f"{med(runs[name][r]):.3f}" for r in RULES)
        perf.append(dict(what=f"compile time, {name}: looped / fenced Threefry (CPU)", value=c["fenced"], unit="s (fenced)",
                         ratio=c["looped"] / c["fenced"],
                         note=f"looped {c['looped']:.2f} s, straight (no fence) {c['straight']:.2f} s; ranges {ranges} s "
                              f"over {S['repeats']} repeats; compiled call {calls} s (looped / straight / fenced)"))
    perf.append(dict(what=f"compile time, all {len(cases)} programs: looped / fenced Threefry (CPU)", value=total["fenced"],
                     unit="s (fenced)", ratio=total["looped"] / total["fenced"],
                     note=f"looped {total['looped']:.2f} s, straight {total['straight']:.2f} s; bits identical to looped: "
                          f"{all(all(v.values()) for v in same_bits.values())}; max |Δ| against looped of the simulate / solve / "
                          f"stationary curves (fenced) {diff['fenced']['simulate']:.1e} / {diff['fenced']['solve']:.1e} / "
                          f"{diff['fenced']['stationary']:.1e}"))

    fig, ax = plt.subplots(figsize=(5.6, 3.2))
    x = np.arange(len(cases))
    for j, rule in enumerate(RULES):
        ax.bar(x + 0.27 * (j - 1), [med(comp[c][rule]) for c in cases], 0.27, label=f"{rule} Threefry")
    ax.set_xticks(x, list(cases), fontsize=7)
    ax.set_ylabel("compile time (s)")
    ax.legend(fontsize=7)
    ax.set_title("CPU compile time per program (median of repeats)", fontsize=9)
    fig.tight_layout()
    fig.savefig(outdir / "threefry_cpu.png", dpi=110)
    plt.close(fig)
    return dict(setting=S, accuracy=[], performance=perf, figure="threefry_cpu.png",
                data=dict(compile_s=comp, compiled_call_s=runs, bits_identical=same_bits, max_abs_difference=diff,
                          status=dmft.THREEFRY_STATUS))
