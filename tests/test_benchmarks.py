"""The benchmark suite cannot rot (a tiny benchmark runs end to end), and committed results
are guarded: key accuracy numbers recomputed now must agree with the committed JSON."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
import spectral
from benchmarks import runner

RESULTS = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def test_smoke_benchmark_end_to_end(tmp_path):
    out = runner.run(["smoke"], mode="quick", outdir=tmp_path)
    res = json.loads((tmp_path / "smoke.json").read_text())
    assert res["status"] == "ok" and res == json.loads(json.dumps(out["smoke"]))
    assert res["provenance"]["jax"] and res["accuracy"][0]["agree"] is True
    assert (tmp_path / "smoke.png").exists()
    md = (tmp_path / "RESULTS.md").read_text()
    assert "linear ridge: train error" in md and "smoke" in md


def _load(name):
    p = RESULTS / f"{name}.json"
    if not p.exists():
        pytest.skip(f"no committed {name}.json")
    return json.loads(p.read_text())


def test_committed_spectral_method_numbers_reproduce():
    """THEORY §4 values in the committed spectral JSON are recomputed by quadrature now."""
    res = _load("spectral")
    rows = {r["quantity"]: r for r in res["accuracy"]}
    pr = dmft.Teacher(link=lambda z, eps: z[0] ** 2, k=1, noise_dim=0)
    now = spectral.spectral_method(preprocess=lambda y: 1.0 - 1.0 / y, teacher=pr, delta=2.0)
    thr = spectral.spectral_method_threshold(preprocess=lambda y: jnp.minimum(y, 3.0), teacher=pr)
    checked = 0
    for q, r in rows.items():
        # in this file "theory" holds THEORY's reference value, "simulation" our quadrature value
        if q.startswith("T*=1-1/y cos^2 at delta=2.0"):
            assert r["simulation"] == pytest.approx(now.cosine2, abs=1e-6)
            assert r["agree"]
            checked += 1
        if q == "T=min(y,3) threshold":
            assert r["simulation"] == pytest.approx(thr, abs=1e-6)
            assert r["agree"]
            checked += 1
    assert checked == 2, "committed spectral.json lost its §4 rows"


def test_committed_dmft_agreement_and_reproduction():
    """Every committed DMFT-vs-GD row of the tanh m = 1 case agrees, and the DMFT overlap at
    t = 10 recomputed now with 8192 paths matches the committed value within 4 MC s.e.
    (measured MC sd of M(10) at 8192 paths: 0.0035)."""
    res = _load("dmft")
    rows = [r for r in res["accuracy"] if r["quantity"].startswith("tanh m=1")]
    assert rows and all(r["agree"] for r in rows)
    committed = next(r for r in rows if r["quantity"] == "tanh m=1: overlap[0, 0] at t=10")
    P = dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, eps: jnp.tanh(2 * z[0]) + 0.3 * eps[0], k=1, noise_dim=1),
        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.array([[0.5]]), overlap=jnp.array([[0.3]])),
    )
    tr = dmft.solve(P, delta=2.0, lr=0.2, steps=10, paths=8192, key=jax.random.key(77))
    assert float(tr.overlap[10, 0, 0]) == pytest.approx(committed["theory"], abs=4 * 0.0035)
    assert float(tr.overlap[10, 0, 0]) == pytest.approx(committed["simulation"], abs=4 * 0.0035 + 3 * committed["sim_stderr"] + 0.01)


def test_committed_stationary_rows():
    """The committed stationary benchmark: every row agrees, the OLS response V = 1/(δ−1) is
    exact, and V at δ = 3 recomputed now (D ≡ 1: no Monte Carlo in V) equals the committed one."""
    from dmft.stationary import stationary

    res = _load("stationary")
    assert res["accuracy"] and all(r["agree"] for r in res["accuracy"])
    rows = {r["quantity"]: r for r in res["accuracy"]}
    r3 = rows["OLS δ=3: V (closed form)"]
    assert abs(r3["theory"] - 0.5) < 1e-9
    lin = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.5 * e[0], k=1, noise_dim=1),
                       student=dmft.TwoLayer(activation=lambda r: r, width=1, second_layer=jnp.ones(1)))
    now = stationary(lin, 3.0, paths=1024, max_iters=50)
    assert float(now.response[0, 0]) == pytest.approx(r3["theory"], abs=1e-9)


def test_runner_rejects_bad_mode_and_names(tmp_path):
    with pytest.raises(ValueError, match="mode must be one of"):
        runner.run(["smoke"], mode="fast", outdir=tmp_path)
    with pytest.raises(ValueError, match="unknown benchmark"):
        runner.run(["no_such_bench"], mode="quick", outdir=tmp_path)
    assert runner.default_outdir("quick") == runner.RESULTS / "quick"
    assert runner.default_outdir("standard") == runner.RESULTS


def test_parallel_schedule_balances_by_recorded_wall_time(tmp_path):
    """``--jobs``: longest-first partition by the wall time in the last JSON (60 s without one)."""
    import json

    for n, w in (("a", 100.0), ("b", 70.0), ("c", 50.0), ("d", 20.0)):
        (tmp_path / f"{n}.json").write_text(json.dumps(dict(wall_s=w)))
    shares = runner.schedule(["a", "b", "c", "d", "e"], 2, tmp_path)
    assert sorted(sum(shares, [])) == ["a", "b", "c", "d", "e"]
    load = lambda sh: sum(dict(a=100, b=70, c=50, d=20, e=60)[n] for n in sh)
    assert sorted(load(sh) for sh in shares) == [150, 150]        # {a, c} and {b, e, d}
    assert runner.schedule(["a"], 3, tmp_path) == [["a"]]


def test_committed_finite_size_outliers():
    """Committed outlier checks at d = 1000–4000 (toy m = 2 law, DMFT state) all agree, the
    toy outlier is within 3% at every d ≥ 2000, and its theory value recomputed now from an
    independent law of the committed size agrees within 4 sd of one law (the committed
    spread over its keys; measured 0.012 at 50 000 samples) plus the committed mean's s.e."""
    from benchmarks.bench_spectral import toy_D

    res = _load("spectral_finite_size")
    rows = res["accuracy"]
    assert rows and all(r["agree"] for r in rows)
    toy = [r for r in rows if r["quantity"].startswith("toy") and r["d"] >= 2000]
    assert len(toy) >= 4 and all(abs(r["simulation"] - r["theory"]) <= 0.03 * abs(r["theory"]) for r in toy)
    N = res["setting"]["toy"]["law_samples"]
    k1, k2 = jax.random.split(jax.random.key(123))
    zeta = jax.random.normal(k1, (N,))
    law = spectral.law_from_samples(toy_D(zeta, jax.random.normal(k2, (N, 2))), zeta=zeta, unbounded=())
    o = spectral.outlier(law, res["setting"]["toy"]["delta"], "bottom")
    keys = np.asarray(res["data"]["toy"]["theory"]["eigenvalue"])
    assert keys.size >= 4
    sd = np.std(keys, ddof=1)
    assert float(o.eigenvalue) == pytest.approx(keys.mean(), abs=4 * sd * np.sqrt(1 + 1 / keys.size))


def test_committed_first_phase_reproduces():
    """One committed end-of-first-phase point (quadratic m=4, d=200, δ=6: a clear hard outlier) is
    recomputed with the benchmark's own setting and key: the hard weight below the constrained edge
    must match within 3 seed s.e. (the measured seed spread), and the committed GeLU a=1/4 rows must
    show no outlier anywhere on their grid (the statement docs/thresholds.md makes)."""
    from benchmarks.bench_delta_star_trend import problem
    from dmft import activations

    res = _load("first_phase")
    row = next(r for r in res["data"]["rows"] if r["setting"].startswith("quadratic") and r["d"] == 200 and r["delta"] == 6.0)
    P = problem(activations.get("quadratic"))
    sim = dmft.simulate(P, d=200, delta=6.0, lr=row["lr"], steps=row["steps"], seeds=row["seeds"],
                        key=jax.random.fold_in(jax.random.key(res["setting"]["key"]), 200), return_weights=True,
                        freeze_hard=True, test_samples=1024)
    w = []
    for s in range(row["seeds"]):
        X, y = dmft.simulation_data(P, sim, s)
        o = spectral.hard_outlier_at_state(P, X, y, sim.W[s], sim.a[s], k=res["setting"]["k"], theory=False)
        w.append(o.hard_weight_below_edge)
    tol = 3 * max(row["hard_weight_below_edge_stderr"], 0.01)
    assert abs(np.mean(w) - row["hard_weight_below_edge_mean"]) <= tol
    assert row["hard_weight_below_edge_mean"] > 0.5
    gelu = [r for r in res["data"]["rows"] if r["setting"].startswith("gelu, m=4, a=1/4")]
    assert gelu and max(r["hard_weight_below_edge_mean"] for r in gelu) < 0.25


def test_design_gd_weak_recovery_and_threshold_rule():
    """δ_alg of the staircase by quadrature: resolution-independent, and → 1/2 (noiseless phase
    retrieval, closed form) as the noise z1 → 0, quadratically (measured: 0.5 + 0.19 σ² near 0).
    The design rule keeps thresholds and rejects windows (outlier that appears and disappears)."""
    from benchmarks.bench_design_gd import persistent_threshold, weak_recovery_staircase

    full = weak_recovery_staircase(1.0, points=2001)
    assert full == pytest.approx(weak_recovery_staircase(1.0, points=1501), abs=1e-6)
    assert 0.6 < full < 0.7            # y alone: less than the easy direction known (1/2)
    small = [weak_recovery_staircase(s, points=2001) for s in (0.3, 0.2, 0.1)]
    assert small[0] > small[1] > small[2] > 0.5
    assert small[2] == pytest.approx(0.5, abs=3e-3)
    grid = [1.0, 1.5, 2.0, 2.5, 3.0, 4.0]
    assert persistent_threshold(grid, [0.3, 0.1, -0.05, -0.1, -0.2, -0.3], 1.8)
    assert not persistent_threshold(grid, [0.3, 0.1, -0.05, -0.1, 0.02, 0.05], 1.8)    # a window
    assert not persistent_threshold(grid, [0.3, 0.2, 0.1, 0.1, 0.1, 0.1], float("nan"))
    # paired area: a step curve shifted left by one grid spacing (0.5) with jump 0.9 → area 0.45
    from benchmarks.bench_design_gd import paired_gd_area

    step = lambda x0: np.array([[0.9 if x > x0 else 0.0] * 3 for x in grid])
    area, se = paired_gd_area(step(1.75), step(2.25), grid)
    assert area == pytest.approx(0.45) and se == 0.0


def test_fss_onset_finds_the_scaling_change():
    """Finite-size-scaling onset: sub-threshold cos ∝ d^{-1/2} (ratio √(d_s/d)), above it the same
    plateau at both d (ratio 1), whatever the plateau height; the onset lies in the bracketing grid
    interval, the paired shift of a curve moved right by one grid step is +0.5, and no crossing → nan."""
    from benchmarks.bench_design_gd import fss_onset

    grid, db, ds = [1.0, 1.5, 2.0, 2.5, 3.0], 1000, 300
    rng = np.random.default_rng(1)

    def curves(onset, plateau, seeds):
        out = {}
        for d in (db, ds):
            mean = [plateau if g > onset else 2.0 / np.sqrt(d) for g in grid]
            out[d] = np.abs(np.array(mean)[:, None] * (1 + 0.05 * rng.standard_normal((len(grid), seeds))))
        return out[db], out[ds]

    a, b = curves(1.75, 0.6, 8), curves(2.25, 0.2, 8)      # b: later onset, much lower plateau
    oa, ob = fss_onset(grid, *a, db, ds), fss_onset(grid, *b, db, ds)
    assert oa["level"] == pytest.approx((ds / db) ** 0.25)
    assert 1.5 < oa["onset"] < 2.0 and 2.0 < ob["onset"] < 2.5
    assert 0 < oa["onset_stderr"] < 0.1
    pair = fss_onset(grid, *b, db, ds, paired_with=a)
    assert pair["shift"] == pytest.approx(ob["onset"] - oa["onset"]) and pair["shift"] == pytest.approx(0.5, abs=0.05)
    flat = curves(9.0, 0.6, 8)
    assert np.isnan(fss_onset(grid, *flat, db, ds)["onset"])


def test_committed_design_gd_is_consistent():
    """The committed design-vs-GeLU GD check: the designed α is the argmin of the key-mean δ*(t)
    among persistent thresholds, and the paired DMFT difference in its row is recomputed from the
    per-key roots stored next to it."""
    res = _load("design_gd")
    dg = res["diagnostics"]
    scan, alphas = dg["scan"], res["setting"]["alphas"]
    ok = [a for a in alphas if dg["feasible"][str(a)]]
    assert dg["alpha_opt"] == min(ok, key=lambda a: scan[str(a)]["delta_star"][-1])
    row = next(r for r in res["accuracy"] if "vs gelu (α=0)" in r["quantity"])
    diff = np.asarray(dg["theory"]["designed"]["per_key"])[:, -1] - np.asarray(dg["theory"]["gelu (α=0)"]["per_key"])[:, -1]
    assert row["paired_difference"] == pytest.approx(diff.mean(), abs=1e-12)
    assert row["agree"] == bool(diff.mean() < -3 * diff.std(ddof=1) / np.sqrt(len(diff)))
    from benchmarks.bench_design_gd import accuracy_rows

    again = accuracy_rows(res["setting"], dg["theory"], dg["gd"], dg["alpha_opt"])
    assert json.loads(json.dumps(again)) == res["accuracy"]


def test_committed_escape_dmft_is_consistent():
    """The committed seeded-DMFT-vs-GD escape benchmark: the DMFT value of each row is the mean over
    exactly the draws whose solve finished (failed draws are excluded and named in the row, never
    averaged in), the GD value is the mean of the stored per-seed curve, and each agree flag follows
    from the stated 3-s.e. rule."""
    res = _load("escape_dmft")
    diag = res["diagnostics"]
    assert set(diag) == set(res["setting"]["candidates"])
    for row in res["accuracy"]:
        name = row["quantity"].split(":")[0]
        v = diag[name]
        failed = [s["failed_step"] for s in v["solver"] if s["failed_step"] >= 0]
        assert v["draws_failed"] == failed and v["draws_used"] == len(v["solver"]) - len(failed)
        assert all(str(f) in row["tolerance"] for f in failed)
        cos = np.asarray(v["dmft_cos"], float)[[s["failed_step"] < 0 for s in v["solver"]]]
        assert np.all(np.isfinite(cos))
        assert row["theory"] == pytest.approx(cos[:, -1].mean(), abs=1e-12)
        assert row["theory_stderr"] == pytest.approx(cos[:, -1].std(ddof=1) / np.sqrt(len(cos)), abs=1e-12)
        assert row["simulation"] == pytest.approx(v["gd_cos_mean"][-1], abs=1e-6)
        se = np.hypot(row["theory_stderr"], row["sim_stderr"])
        assert row["agree"] == bool(abs(row["theory"] - row["simulation"]) < 3 * se)
    from benchmarks.bench_escape_dmft import accuracy_rows

    assert json.loads(json.dumps(accuracy_rows(res["setting"], diag))) == res["accuracy"]


def test_committed_success_bounded_is_consistent():
    """The committed GD success curves of the bounded staircase: each row's success fraction and 50%
    point follow from the stored per-seed final cos, and the accuracy rows (per-d 50% point, FSS onsets,
    1/√d extrapolation vs the DMFT δ*(t)) are recomputed from the stored data exactly."""
    res = _load("success_bounded")
    S, data = res["setting"], res["data"]
    from benchmarks.bench_success_bounded import accuracy_rows
    from dmft.success import fifty_percent_point

    for r in data["rows"]:
        cf = np.asarray(r["cos_final"])
        assert cf.shape == (len(S["grid"]), S["seeds"])
        assert r["success"] == pytest.approx((cf > S["threshold"]).mean(1).tolist(), abs=1e-12)
        d50, se = fifty_percent_point(S["grid"], r["success"], S["seeds"])
        assert (np.isnan(d50) and np.isnan(r["delta_50"])) or d50 == pytest.approx(r["delta_50"], abs=1e-12)
    again = accuracy_rows(S, data["rows"], data["engine"])
    assert json.dumps(again, sort_keys=True) == json.dumps(res["accuracy"], sort_keys=True)  # NaN-safe
    for row in res["accuracy"]:
        if row["sim_stderr"] is not None and np.isfinite(row["simulation"]):
            se = np.hypot(row["theory_stderr"], row["sim_stderr"])
            assert row["agree"] == bool(abs(row["simulation"] - row["theory"]) < 3 * se)


def test_committed_success_phase_retrieval_is_consistent():
    """The committed phase-retrieval GD success curves (quadratic and GeLU students): success fractions
    and 50% points follow from the stored per-seed final cos; the accuracy rows (one-sided comparison
    with the committed DMFT δ*(t), log-d trend) are recomputed from the stored data exactly; the
    engine record says why there is no δ_NN to compare with (first phase not converged)."""
    res = _load("success")
    S, data = res["setting"], res["data"]
    from benchmarks.bench_success import accuracy_rows
    from dmft.success import fifty_percent_point

    assert set(data["rows"]) == {"quadratic", "gelu"}
    for act, rows in data["rows"].items():
        A = S["acts"][act]
        assert [r["d"] for r in rows] == S["ds"]
        for r in rows:
            cf = np.asarray(r["cos_final"])
            assert cf.shape == (len(A["grid"]), S["seeds"])
            assert r["success"] == pytest.approx((cf > S["threshold"]).mean(1).tolist(), abs=1e-12)
            d50, se = fifty_percent_point(A["grid"], r["success"], S["seeds"])
            assert (np.isnan(d50) and np.isnan(r["delta_50"])) or d50 == pytest.approx(r["delta_50"], abs=1e-12)
        assert data["engine"][act]["first_phase_converged"] is False
    again = accuracy_rows(S, data["rows"], data["engine"])
    assert json.dumps(again, sort_keys=True) == json.dumps(res["accuracy"], sort_keys=True)  # NaN-safe


def test_every_committed_result_ran_ok():
    """No committed benchmark JSON (standard, quick or GPU) records a failed run: a benchmark broken
    by a code change must be fixed and rerun, not committed with status "error" (the quick lanczos
    JSON was, for a day, after the activation became a pytree leaf)."""
    kept = {"gpu/spectral_oom.json"}  # the full-size GPU spectral attempt that ran out of memory: the record of that limit
    bad = []
    for p in sorted(RESULTS.rglob("*.json")):
        res = json.loads(p.read_text())
        if str(p.relative_to(RESULTS)) in kept:
            continue
        if isinstance(res, dict) and "status" in res and res["status"] != "ok":
            bad.append(f"{p.relative_to(RESULTS)}: {res['status']} ({str(res.get('error'))[:120]})")
    assert not bad, "benchmark results with a failed run:\n" + "\n".join(bad)
