"""δ*(t) plumbing (DMFT sweep -> law of (ζ, D) -> outlier margin -> root), success-curve
statistics and the deltann CLI. The comparison with GD is in benchmarks/bench_thresholds.py."""

import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from typer.testing import CliRunner

import dmft
import spectral
from dmft.cli import app
from dmft.success import fifty_percent_point, hard_cosine
from spectral.thresholds import _root_on_grid, _upper_root_on_grid, delta_star, truncate_fixed_shape


def test_root_on_grid_linear_interpolation():
    deltas = np.array([1.0, 2.0, 3.0, 4.0])
    root, lo, hi = _root_on_grid(deltas, 2.5 - deltas)  # margin > 0 below 2.5
    assert (lo, hi) == (2.0, 3.0) and root == pytest.approx(2.5)
    assert np.isnan(_root_on_grid(deltas, np.ones(4))[0])
    # session 50 audit: non-finite margins are gaps; the bracket spans them, an outlier before a gap is no crossing
    g = np.array([1.0, 2.0, 3.0, 4.0])
    r = _root_on_grid(g, [0.2, np.nan, -0.1, -0.2])
    assert np.isnan(r[0]) and r[1:] == (1.0, 3.0)
    assert np.isnan(_root_on_grid(g, [-0.2, np.nan, -0.1, -0.2])[1])
    assert _root_on_grid(g, [-0.2, np.nan, 0.1, -0.2]) == pytest.approx((3.0 + 1.0 / 3.0, 3.0, 4.0))
    r = _root_on_grid(g, [np.inf, np.nan, -0.1, -0.2])
    assert np.isnan(r[0]) and r[1:] == (1.0, 3.0)


def test_upper_root_on_grid_finds_where_the_outlier_disappears():
    """The end of a window: margin < 0 (outlier) back to ≥ 0 (none), linearly interpolated; the lower
    crossing is not an upper one, non-finite margins are not crossings."""
    g = np.array([2.0, 4.0, 6.0, 8.0])
    assert _upper_root_on_grid(g, [0.1, -0.2, -0.1, 0.3]) == pytest.approx((6.5, 6.0, 8.0))
    assert _upper_root_on_grid(g, [-0.1, 0.1, 0.2, 0.3]) == pytest.approx((3.0, 2.0, 4.0))
    assert np.isnan(_upper_root_on_grid(g, [0.1, -0.2, -0.1, -0.3])[0])           # plain threshold: no upper end
    assert np.isnan(_upper_root_on_grid(g, [0.1, -0.2, np.inf, np.nan])[0])
    assert _root_on_grid(g, [0.1, -0.2, -0.1, 0.3])[0] == pytest.approx(2.0 + 2 * 0.1 / 0.3)  # lower end unchanged


def test_delta_star_reports_a_window(monkeypatch):
    """delta_star on a margin that is negative only in a window of δ (the shape measured in
    bench_window_bounded): the lower root is δ*(t) as before, and the diagnostics and the message say
    where the outlier disappears again (not 'learnable for every δ > δ*'). A synthetic margin curve
    replaces the DMFT sweep (this checks the wiring, the benchmark checks the physics)."""
    import spectral.thresholds as th

    def fake(problem, deltas, *, lr, steps, times, paths, key, convention, d, level, pad_to=None, chol_jitter=None):
        x = np.asarray(deltas, float)
        marg = np.stack([(x - 3.0) * (x - 7.0) / 10 for _ in times], 1)   # < 0 on (3, 7)
        tr = np.tile(np.linspace(1.0, 0.5, steps + 1) ** 0, (len(x), 1))   # constant: stationary
        nan = np.full_like(marg, np.nan)
        return th.MarginCurve(deltas=x, times=tuple(times), margin=marg, eigenvalue=nan, edge=nan, cosine2=nan,
                              train_error=tr, test_error=tr, convention=convention, notes=[],
                              unstable_fraction=np.zeros(len(x)))

    monkeypatch.setattr(th, "margin_curve", fake)
    pb = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),   # only ridge is read
                      student=dmft.TwoLayer(activation=jnp.square, width=1, second_layer=jnp.ones(1)), ridge=0.5)
    res = delta_star(pb, grid=[1.0, 2.0, 4.0, 6.0, 8.0, 10.0], lr=0.5, steps=8, times=(4, 8), paths=16,
                     key=jax.random.key(0), convention="strict", refine=5, repeats=2, level="auto")
    assert res.status == "converged" and res.delta_nn == pytest.approx(3.0, abs=0.2)
    up = res.diagnostics["window_upper"]
    assert up == pytest.approx([6.0 + 2 * 0.3 / 0.8] * 2) and res.diagnostics["window_upper_bracket"][-1] == [6.0, 8.0]
    assert "disappears again above δ ≈ 6.75" in res.message
    # a grid that starts inside the window: no lower bracket, and the hint names the upper end
    res = delta_star(pb, grid=[4.0, 6.0, 8.0], lr=0.5, steps=8, times=(4, 8), paths=16, key=jax.random.key(0),
                     convention="strict", refine=3, repeats=2, level="auto")
    assert res.status == "no-bracket" and "try smaller δ" in res.message and "disappears again above" in res.message


def test_fifty_percent_point():
    root, se = fifty_percent_point(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.25, 0.75]), seeds=8)
    assert root == pytest.approx(2.5)
    assert se == pytest.approx(np.sqrt(0.25 / 8) / 0.5)
    from dmft.success import no_bracket_reason
    g = np.array([2.0, 3.0, 4.0])
    assert np.isnan(fifty_percent_point(g, np.array([0.5, 0.25, 0.0]), seeds=8)[0])
    assert "at or below it (extend --grid downward)" in no_bracket_reason(g, np.array([0.5, 0.25, 0.0]))
    assert "extend --grid upward" in no_bracket_reason(g, np.array([0.0, 0.25, 0.375]))
    M = jnp.array([[0.6, 0.8]])
    assert float(hard_cosine(M, jnp.eye(2), (0,))) == pytest.approx(1.0 / np.sqrt(2.0))
    # session 50 user audit: an unsorted grid interpolated between non-neighbours (2.5 ± 0.53 for 2.0 ± 0.24)
    root, se = fifty_percent_point([2.5, 1.0, 4.0, 1.5], [0.875, 0.0, 1.0, 0.125], seeds=8)
    assert root == pytest.approx(2.0) and se == pytest.approx(np.sqrt(0.25 / 8) / 0.75)
    assert fifty_percent_point([2.0, 1.0, 3.0], [0.75, 0.0, 1.0], 8)[0] == pytest.approx(1 + 2 / 3)
    assert "smallest δ = 1" in no_bracket_reason([3.0, 1.0], [0.75, 0.5])
    with pytest.raises(dmft.ProblemError, match="repeat"):
        fifty_percent_point([1.0, 1.0, 2.0], [0.0, 0.25, 1.0], 8)
    with pytest.warns(RuntimeWarning, match="crosses 1/2 upward 2 times"):
        root, _ = fifty_percent_point([1.0, 2.0, 3.0, 4.0], [0.0, 0.625, 0.25, 1.0], 8)
    assert root == pytest.approx(1.8)


def test_fixed_shape_truncation_equals_dropping():
    key = jax.random.key(0)
    r = jax.random.normal(key, (3000, 1))
    z = jax.random.normal(jax.random.key(1), (3000, 1))
    D = 6 * r[:, :, None] ** 2 - 2 * z[:, :, None] ** 2  # quadratic student on phase retrieval at init
    law = spectral.law_from_samples(D, zeta=z, unbounded=("bottom",))
    a = spectral.outlier(spectral.truncate(law, 4000, "bottom"), 4.0, side="bottom", convention="strict", throw=False)
    b = spectral.outlier(truncate_fixed_shape(law, 4000), 4.0, side="bottom", convention="strict", throw=False)
    assert float(a.margin) == pytest.approx(float(b.margin), rel=1e-10)


def pr_problem():
    return dmft.Problem(
        teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
        student=dmft.TwoLayer(activation=lambda x: x**2, width=1, second_layer=jnp.ones(1)),
        loss=dmft.square_loss,
        init=dmft.Init(q0=jnp.eye(1), overlap=jnp.zeros((1, 1))),
    )


def test_delta_star_pipeline_and_initial_time():
    """At t = 0 the DMFT law of (ζ, D) does not depend on δ (r = ω ~ N(0, 1), y = z²), so
    δ*(0) from the sweep must equal the root of the margin computed directly from the same
    samples; later times are reported as a curve, and an unconverged first phase gives no δ_NN."""
    P = pr_problem()
    res = delta_star(P, grid=[2.0, 4.0, 8.0, 16.0], lr=0.05, steps=4, times=(0, 4), paths=1024,
                     key=jax.random.key(3), convention="finite-n", d=500, refine=4, repeats=2)
    assert res.status in ("converged", "not-converged")
    assert np.all(np.isfinite(res.delta_star))
    assert np.all((res.delta_star >= 2.0) & (res.delta_star <= 16.0))
    if res.status == "not-converged":
        # t = 4 is the only time in the last half: the trend cannot be tested, and the message says so
        assert res.delta_nn is None and "δ_NN not assessed" in res.message and "add times near steps=4" in res.message
    # local-stability diagnostics of the sweeps (η·λ_max(D)/δ > 2 on some paths), said in the message when > 0
    cu, fu = np.asarray(res.diagnostics["coarse_unstable_fraction"]), np.asarray(res.diagnostics["fine_unstable_fraction"])
    assert cu.shape == (4,) and fu.shape == (2, 4) and np.all((cu >= 0) & (cu <= 1)) and np.all((fu >= 0) & (fu <= 1))
    assert ("locally unstable" in res.message) == bool(fu.max() > 0)
    # an s.e. from two keys is said to be indicative only (1 degree of freedom)
    assert res.diagnostics["stderr_degrees_of_freedom"] == [1, 1] and "1 degree of freedom" in res.message
    # square loss on y = z²: D is unbounded below, so the finite-n truncation sets the edge, and with 1024
    # paths against n = δ*·500 ≈ 10³–10⁴ it removes (almost) nothing: said, with the paths it would need
    ppn = np.asarray(res.diagnostics["paths_per_n"], float)
    assert np.all(res.coarse.unbounded_bottom)
    np.testing.assert_allclose(ppn, 1024 / (res.delta_star * 500), rtol=1e-12)
    assert res.diagnostics["finite_n_resolved"] is False and "truncation is not resolved" in res.message
    assert f"use paths >= {int(np.ceil(20 * res.delta_star.max() * 500))}" in res.message
    # direct margin at t = 0 from the same samples (key of repeat 0), at the coarse grid
    tr = dmft.solve(P, delta=2.0, lr=0.05, steps=4, paths=1024, key=jax.random.fold_in(jax.random.key(3), 0), save_samples_at=(0,))
    for i, dv in enumerate([2.0, 4.0, 8.0, 16.0]):
        law = truncate_fixed_shape(spectral.law_from_dmft(P, tr, 0), int(round(dv * 500)))
        # default criterion: a negative outlier (level = −ridge = 0; the t = 0 edge is > 0 at large δ)
        m = float(spectral.outlier(law, dv, side="bottom", convention="strict", level=0.0, throw=False).margin)
        assert m == pytest.approx(res.coarse.margin[i, 0], rel=1e-8, abs=1e-10)


def test_grid_that_never_brackets_says_so():
    P = pr_problem()
    res = delta_star(P, grid=[0.2, 0.3], lr=0.05, steps=2, times=(2,), paths=256, key=jax.random.key(0),
                     convention="finite-n", d=200, repeats=1)
    assert res.status == "no-bracket" and "never brackets" in res.message and res.delta_nn is None


runner = CliRunner()


def test_cli_bad_activation_and_user_function():
    r = runner.invoke(app, ["delta-nn", "--activation", "nosuch"])
    assert r.exit_code == 2 and "does not exist" in r.output
    r = runner.invoke(app, ["delta-nn", "--activation", "jax.numpy:sqrt"])
    assert r.exit_code == 2 and "non-finite" in r.output
    r = runner.invoke(app, ["delta-nn", "--activation", "nosuchmodule:f"])
    assert r.exit_code == 2 and "cannot import" in r.output
    r = runner.invoke(app, ["delta-nn", "--criterion", "lowest"])
    assert r.exit_code == 2 and "--criterion" in r.output
    r = runner.invoke(app, ["delta-nn", "--ridge", "-0.1"])
    assert r.exit_code == 2 and "--ridge" in r.output


def test_cli_delta_nn_json(tmp_path):
    out = tmp_path / "o.json"
    args = ["delta-nn", "--steps", "4", "--times", "2,4", "--grid", "2,4,8,16", "--paths", "512", "--d", "500",
            "--repeats", "2", "--stationarity-tol", "100", "--json", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output

    def no_constant(c):
        raise ValueError(f"non-strict JSON token {c}")

    payload = json.loads(out.read_text(), parse_constant=no_constant)     # strict: no NaN / Infinity tokens
    assert payload["diagnostics"]["window_upper"] == [None, None]         # no upper root: null, was NaN
    for key in ("delta_nn", "delta_nn_stderr", "edge_convention", "setting", "diagnostics"):
        assert key in payload
    assert payload["edge_convention"] == "finite-n" and 2.0 <= payload["delta_nn"] <= 16.0
    assert payload["setting"]["outlier_solver"]["search"] == "secant"        # the outlier solves' options
    assert payload["setting"]["outlier_solver"]["bisections"] == 44
    prov = payload["provenance"]                                                # software and machine
    assert prov["jax"] == jax.__version__ and prov["x64"] is True and prov["deltann"]
    assert prov["threefry_cpu_lowering"] == dmft.THREEFRY_STATUS and prov["platform"] == jax.devices()[0].platform
    # an unconverged first phase still reports (exit 0, the contract): its JSON says why there
    # is no δ_NN (delta_nn null, complete false) next to the δ*(t) curve; --strict makes it exit 1
    out2 = tmp_path / "o2.json"
    r = runner.invoke(app, args[:-4] + ["--stationarity-tol", "1e-9", "--json", str(out2)])
    assert r.exit_code == 0 and "not reported" in r.output, r.output
    p2 = json.loads(out2.read_text(), parse_constant=no_constant)
    assert p2["complete"] is False and p2["delta_nn"] is None and p2["delta_nn_stderr"] is None
    assert p2["diagnostics"]["status"] == "not-converged" and len(p2["delta_star"]["value"]) > 0
    r = runner.invoke(app, args[:-4] + ["--stationarity-tol", "1e-9", "--strict", "--json", str(out2)])
    assert r.exit_code == 1 and "not reported" in r.output
    assert json.loads(out2.read_text())["complete"] is False


def test_cli_success_law_wiring(tmp_path, monkeypatch):
    """``--law-d``: a second δ*(t) run at that d with independent keys, and per time the law over runs
    (spectral.success_laws) in the output and the JSON. The δ*(t) runs are replaced by a synthetic one
    whose roots rise with d (this checks the wiring; tests/test_success_law.py the law)."""
    import spectral.thresholds as th

    keys = []

    def fake(problem, *, grid, times, paths, key, convention, d, repeats, **kw):
        keys.append(np.asarray(jax.random.key_data(key)).tolist())
        T = len(times)
        return th.DeltaStarResult(times=tuple(times), delta_star=np.full(T, 4.0 + 0.6 * np.log(d / 500)),
                                  delta_star_stderr=np.full(T, 0.05), per_repeat=np.zeros((repeats, T)),
                                  bracket=np.tile([3.0, 5.0], (T, 1)), delta_nn=None, delta_nn_stderr=None,
                                  status="not-converged", message="synthetic", convention=convention, coarse=None,
                                  setting=dict(d=d), diagnostics=dict(paths_per_n=[paths / (4.0 * d)] * T))

    monkeypatch.setattr(th, "delta_star", fake)
    out = tmp_path / "law.json"
    r = runner.invoke(app, ["delta-nn", "--times", "5,10", "--steps", "10", "--paths", "100000", "--d", "500",
                            "--law-d", "1000", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert len(keys) == 2 and keys[0] != keys[1]          # the second d has its own keys
    law = json.loads(out.read_text())["success_law"]
    assert law["ds"] == [500, 1000] and [p["t"] for p in law["per_time"]] == [5, 10]
    p = law["per_time"][0]
    assert p["ok"] and p["scale"] == pytest.approx(0.6, rel=1e-12) and p["loc"]["500"] == pytest.approx(4.0, rel=1e-12)
    assert p["median"]["1000"] == pytest.approx(4.0 + 0.6 * np.log(2) - 0.6 * np.log(np.log(2)), rel=1e-12)
    assert p["quantile_90"]["500"] == pytest.approx(4.0 - 0.6 * np.log(-np.log(0.9)), rel=1e-12)
    assert "which runs succeed" in r.output and "0.6000" in r.output
    # not resolved by the paths (paths/n = 100000 / 4 d < 20 at d = 2000): no law, and the reason
    r = runner.invoke(app, ["delta-nn", "--times", "5,10", "--steps", "10", "--paths", "100000", "--d", "500",
                            "--law-d", "2000", "--json", str(out)])
    law = json.loads(out.read_text())["success_law"]
    assert r.exit_code == 0 and not law["per_time"][0]["ok"] and "not resolved" in law["per_time"][0]["reason"]
    # bad input: before any DMFT run
    for bad in (["--law-d", "500"], ["--law-d", "1", ], ["--convention", "strict", "--law-d", "1000"]):
        r = runner.invoke(app, ["delta-nn", "--d", "500", *bad])
        assert r.exit_code == 2 and "--law-d" in r.output, r.output
    assert len(keys) == 4


def test_stationary_route_margins_and_no_bracket():
    """Route (a) of δ_NN (stationary DMFT + outlier equation on its law), in the converging
    "staircase" setting of benchmarks/two_route.json (softplus, Huber, ridge 0.3, separation
    criterion). Committed standard run: threshold ≈ 1.38; margins +0.09 at δ = 1 and −0.065 at
    δ = 2 (1024 paths; the spread over keys is ~0.01), so the signs are a sharp check."""
    from benchmarks.bench_two_route import problem
    from dmft.stationary import Warmup

    pb = problem("softplus", 0.3)
    warm = Warmup(0.5, 80, 512)
    out = spectral.margins_at_stationary(pb, [1.0, 2.0], paths=1024, key=jax.random.key(3), warmup=warm, level="edge",
                                         residual_tol=1e-3)
    assert np.all(out["accepted"]), out["notes"]
    assert out["margin"][0] > 0.03 and out["margin"][1] < -0.03
    assert np.isnan(out["eigenvalue"][0]) and out["eigenvalue"][1] < out["edge"][1]
    # a shorter grid padded to the same batch (the refinement of delta_nn_stationary does this) reuses
    # the compiled programs and gives the same fixed point: margins equal to rounding (measured 2e-10)
    one = spectral.margins_at_stationary(pb, [2.0], paths=1024, key=jax.random.key(3), warmup=warm, level="edge",
                                         residual_tol=1e-3, pad_to=2)
    assert one["margin"].shape == (1,) and abs(one["margin"][0] - out["margin"][1]) < 1e-8
    assert abs(one["edge"][0] - out["edge"][1]) < 1e-10
    # with ridge 0.3 the separated outlier is not a negative eigenvalue of H + 0.3 I: under THEORY's
    # criterion (level = −ridge) there is no outlier at δ = 2
    # (grids of length 2 throughout: one compilation of the vmapped warm-up and fixed-point solves)
    neg = spectral.margins_at_stationary(pb, [1.0, 2.0], paths=1024, key=jax.random.key(3), warmup=warm, residual_tol=1e-3)
    assert neg["margin"][1] > 0
    res = spectral.delta_nn_stationary(pb, grid=[2.0, 3.0], paths=1024, key=jax.random.key(4), warmup=warm, repeats=2,
                                       refine=2, level="edge", residual_tol=1e-3)
    assert res.status == "no-bracket" and res.delta_nn is None and "smaller δ" in res.message
    with pytest.raises(spectral.SpectralError, match="repeats"):
        spectral.delta_nn_stationary(pb, grid=[1.0, 2.0], paths=1024, key=jax.random.key(4), warmup=warm, repeats=1)


def test_delta_star_says_when_a_repeat_has_no_root(monkeypatch):
    """A repeat whose fine margins never change sign is dropped from the mean; the result must
    say so (diagnostics and message), not just print '± nan'. Setting measured to lose repeat 2
    at every time (designed separation activation of design.json at 256 paths, T = 40)."""
    import json
    import pathlib

    import dmft.families as fam
    c = json.loads((pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "design.json").read_text())
    P = fam.staircase_family("combination-normalized")(dict(c=jnp.asarray(c["diagnostics"]["design"]["params"], float),
                                                             width=jnp.asarray(1.0), ridge=jnp.asarray(0.3)))
    sizes, sweep = [], dmft.solve_sweep

    def recording_sweep(problem, deltas, **kw):
        sizes.append(len(deltas))
        return sweep(problem, deltas, **kw)

    monkeypatch.setattr(dmft, "solve_sweep", recording_sweep)
    res = delta_star(P, grid=[0.8, 1.0, 1.2, 1.4, 1.6], lr=0.5, steps=40, times=(10, 20, 40), paths=256,
                     key=jax.random.key(7), convention="strict", refine=2, repeats=2, level="edge")
    # the 2-point fine sweeps run padded to the coarse grid's 5 δ: one DMFT program, not two
    assert sizes == [5, 5, 5] and res.setting["refine_grid"] and len(res.setting["refine_grid"]) == 2
    lost = np.sum(~np.isfinite(res.per_repeat), axis=0)
    assert res.diagnostics["repeats_without_root"] == lost.tolist()
    assert lost[-1] == 1 and np.isfinite(res.delta_star[-1]) and np.isnan(res.delta_star_stderr[-1])
    assert "1 of 2 repeats have no root in the refine grid" in res.message and "no s.e." in res.message
    assert res.diagnostics["stderr_degrees_of_freedom"][-1] == 0 and "degree of freedom" not in res.message


def test_period_two_oscillation_flagged_where_gd_oscillates():
    """At η = 1 the bounded GeLU staircase (two_route's ridge-0.2 Huber row) sits at the edge of
    stability: finite-d GD (first phase, d = 400) and the DMFT both alternate every step (measured
    amplitude 0.4–2.5%); at η = 0.5 neither does (≤ 2e-5). delta_star must then refuse a δ_NN and
    say "reduce lr" instead of reading a limit off a flipping state."""
    from benchmarks.bench_two_route import problem
    from spectral.thresholds import period_two_oscillation

    pb = problem("gelu", 0.2)
    for lr, expect in ((1.0, True), (0.5, False)):
        tr = dmft.solve(pb, delta=2.0, lr=lr, steps=60, paths=1024, key=jax.random.key(3))
        sim = dmft.simulate(pb, d=400, delta=2.0, lr=lr, steps=60, seeds=2, key=jax.random.key(4), freeze_hard=True)
        assert period_two_oscillation(tr.train_error)[0].tolist() == [expect]
        assert period_two_oscillation(sim.train_error_seeds)[0].tolist() == [expect, expect]
    # a decaying oscillation (transient) and a monotone curve are not flagged
    t = np.arange(61)
    assert not period_two_oscillation(0.5 + 0.01 * (-1.0) ** t * 0.7 ** t)[0][0]
    assert not period_two_oscillation(0.5 + 0.1 / (1 + t))[0][0]
    res = delta_star(pb, grid=[1.5, 3.0], lr=1.0, steps=60, times=(30, 60), paths=512, key=jax.random.key(5),
                     convention="strict", refine=2, repeats=1)
    assert res.status == "not-converged" and res.delta_nn is None
    assert any(res.diagnostics["period_two_oscillation"]) and "reduce lr" in res.message and "period 2" in res.message


def test_cosine_cut_criterion():
    """``min_cosine2 = c``: the margin of an outlier whose hard cos² ≥ c (c − cos² where there is an outlier,
    c + margin where there is none), from the same sweep as the outlier margin; its root lies above δ*."""
    from spectral.thresholds import cosine_cut_margin, margin_curve

    m = np.array([0.3, 0.0, -0.2, -0.5, np.nan, np.inf])
    c2 = np.array([np.nan, np.nan, 0.1, 0.4, np.nan, np.nan])
    np.testing.assert_allclose(cosine_cut_margin(m, c2, 0.25), [0.55, 0.25, 0.15, -0.15, np.nan, np.inf])
    with pytest.raises(spectral.SpectralError, match="min_cosine2"):
        cosine_cut_margin(m, c2, 1.5)
    P = pr_problem()
    kw = dict(lr=0.05, steps=4, times=(4,), paths=2048, key=jax.random.key(3), convention="finite-n", d=100)
    grid = [2.0, 4.0, 6.0, 8.0, 12.0, 16.0]
    a = margin_curve(P, grid, **kw)
    b = margin_curve(P, grid, **kw, min_cosine2=0.1)
    np.testing.assert_array_equal(b.outlier_margin, a.margin)
    np.testing.assert_allclose(b.margin, cosine_cut_margin(a.margin, a.cosine2, 0.1))
    from spectral.thresholds import _root_on_grid
    r_out, r_cut = _root_on_grid(np.array(grid), a.margin[:, 0])[0], _root_on_grid(np.array(grid), b.margin[:, 0])[0]
    assert np.isfinite(r_out) and np.isfinite(r_cut) and r_cut > r_out, (a.margin[:, 0], a.cosine2[:, 0])
    with pytest.raises(spectral.SpectralError, match="min_cosine2"):
        margin_curve(P, grid, **kw, min_cosine2=0.0)
    from spectral.thresholds import _criterion
    assert _criterion(P, "auto", 0.1) == ("outlier below min(bulk edge, 0) (a negative eigenvalue of the Hessian incl. "
                                         "ridge 0) whose squared cosine with the hard subspace is >= 0.1")  # not "-0"


def test_cli_simulate_json_is_strict(tmp_path):
    """``deltann simulate``: a grid that never reaches 50% success gives null (not NaN, which is not JSON) and
    says so; the JSON carries the software provenance next to the per-d entries."""
    out = tmp_path / "s.json"
    r = runner.invoke(app, ["simulate", "--width", "4", "--train-second-layer", "--steps", "5", "--grid", "2,4", "--d", "50", "--seeds", "2", "--json", str(out)])
    assert r.exit_code == 0, r.output
    assert "no 50% point: success stays below 0.5 up to the largest δ = 4" in r.output
    text = out.read_text()
    assert "NaN" not in text
    payload = json.loads(text)
    assert payload["50"]["delta_50"] is None and payload["50"]["delta_50_stderr"] is None
    assert payload["50"]["success"] == [0.0, 0.0]
    assert payload["provenance"]["jax"] == jax.__version__ and payload["provenance"]["x64"] is True
    # the code's identity (session 49): the commit and whether tracked files differ from it, in a git checkout
    commit = payload["provenance"]["deltann_commit"]
    assert commit is None or (len(commit) == 40 and isinstance(payload["provenance"]["deltann_dirty"], bool))
    assert "fold_in(jax.random.key(seed), d)" in payload["setting"]["keys"]     # no key(seed + d) collisions


def test_cli_simulate_and_delta_nn_define_the_same_problem_by_default():
    """Session 51 audit: ``simulate`` defaulted to width 4 and a trained second layer, ``delta-nn`` to width 1 and a
    frozen one, so the same command line described two problems (issue #4: simulate runs GD "for the same setting")."""
    import inspect

    from dmft.cli import delta_nn, simulate_cmd

    def defaults(f):
        return {k: (v.default.default if hasattr(v.default, "default") else v.default)
                for k, v in inspect.signature(f).parameters.items()}

    a, b = defaults(delta_nn), defaults(simulate_cmd)
    for name in ("target", "activation", "width", "loss", "init_scale", "train_second_layer", "power", "ridge"):
        assert a[name] == b[name], name


def test_strict_json_writes_null_for_non_finite_numbers():
    """Every ``deltann --json`` file goes through dmft.cli.strict_json: NaN / ±inf (Python, numpy scalars,
    arrays, jax arrays) become null, numpy types become JSON numbers and booleans, nothing else changes."""
    from dmft.cli import strict_json

    text = strict_json(dict(a=float("nan"), b=[1.0, np.inf, -np.inf], c=np.array([[0.5, np.nan]]), d=np.float32(2.5),
                            e=np.int64(3), f=np.bool_(True), g=jnp.asarray(np.nan), h="nan", i=None, j=(1, 2)))
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == dict(a=None, b=[1.0, None, None], c=[[0.5, None]], d=2.5, e=3, f=True, g=None, h="nan",
                                    i=None, j=[1, 2])


def test_cli_bad_numeric_options_fail_before_compiling(monkeypatch):
    """Every numeric option of delta-nn / simulate is checked before any DMFT runs (exit 2, the flag named);
    a library error found later (ValueError) is exit 2 too, and a failed DMFT (DMFTError) exit 3, never a
    traceback (found by a user audit, session 44)."""
    import spectral.thresholds as th

    for args, flag in ((["--repeats", "0"], "--repeats"), (["--refine", "1"], "--refine"), (["--d", "0"], "--d"),
                       (["--d", "-5"], "--d"), (["--lr", "-1"], "--lr"), (["--paths", "1"], "--paths"),
                       (["--steps", "0"], "--steps"), (["--stationarity-tol", "-1"], "--stationarity-tol"),
                       (["--grid", "2,nan"], "--grid"), (["--loss", "huber:-1"], "width"), (["--loss", "huber:x"], "--loss"),
                       (["--activation", ":f"], "module:function"), (["--activation", "relu-power", "--power", "0"], "--power")):
        r = runner.invoke(app, ["delta-nn", *args])
        assert r.exit_code == 2 and flag in r.output, (args, r.output)
    for args, flag in ((["--seeds", "0"], "--seeds"), (["--d", "0"], "--d"), (["--d", "1,x"], "--d"),
                       (["--steps", "0"], "--steps"), (["--grid", "1,nan"], "--grid"), (["--lr", "0"], "--lr")):
        r = runner.invoke(app, ["simulate", *args])
        assert r.exit_code == 2 and flag in r.output, (args, r.output)

    def failing(exc):
        def f(*a, **k):
            raise exc
        return f

    monkeypatch.setattr(th, "delta_star", failing(dmft.DMFTError("non-finite kernels at step 7: reduce lr")))
    r = runner.invoke(app, ["delta-nn", "--steps", "8"])
    assert r.exit_code == 3 and "the DMFT failed" in r.output and "step 7" in r.output
    monkeypatch.setattr(th, "delta_star", failing(spectral.SpectralError("grid values (δ) must be finite")))
    r = runner.invoke(app, ["delta-nn", "--steps", "8"])
    assert r.exit_code == 2 and "grid values" in r.output


def test_refine_grid_covers_each_bracket_finely():
    """One bracket: linspace(lo − w/2, hi + w/2, refine) (the grid before session 44). Brackets of different
    times far apart: each gets its own points (at least 2), never a hull whose spacing exceeds the brackets."""
    from spectral.thresholds import refine_grid

    np.testing.assert_allclose(refine_grid([(4.0, 9.0)], 4), np.linspace(2.0, 11.5, 4))     # lo never below lo/2
    np.testing.assert_allclose(refine_grid([(4.0, 9.0), (4.0, 9.0)], 6), np.linspace(2.0, 11.5, 6))
    g = refine_grid([(1.5, 2.5), (9.0, 14.0)], 4)
    assert len(g) == 4 and set(np.round(g, 9)) == {1.0, 3.0, 6.5, 16.5}
    g = refine_grid([(1.5, 2.5), (9.0, 14.0)], 12)
    inside = lambda a, b: np.sum((g >= a) & (g <= b))
    assert inside(1.0, 3.0) >= 2 and inside(6.5, 16.5) >= 8 and len(g) == 12
    with pytest.raises(spectral.SpectralError, match="refine"):
        delta_star(pr_problem(), grid=[2.0, 4.0], lr=0.05, steps=2, times=(2,), paths=256, key=jax.random.key(0),
                   convention="finite-n", d=200, refine=1)
    with pytest.raises(spectral.SpectralError, match="needs the dimension d"):
        delta_star(pr_problem(), grid=[2.0, 4.0], lr=0.05, steps=2, times=(2,), paths=256, key=jax.random.key(0),
                   convention="finite-n", d=0)


def test_cli_refuses_kinked_activations_for_the_dmft(monkeypatch):
    """ReLU's σ'' is a Dirac mass that autodiff drops, so the DMFT (and δ*(t)) would be biased (docs/dmft.md,
    measured): delta-nn exits 2 naming the fix before any DMFT runs; --allow-kinks runs it anyway (stubbed
    here) and records the jump. GD (simulate) is unaffected and accepts ReLU."""
    import spectral.thresholds as th

    r = runner.invoke(app, ["delta-nn", "--activation", "relu"])
    assert r.exit_code == 2 and "jumps" in r.output and "--allow-kinks" in r.output, r.output

    def stub(*a, **k):
        raise dmft.DMFTError("stub: reached the DMFT")
    monkeypatch.setattr(th, "delta_star", stub)
    r = runner.invoke(app, ["delta-nn", "--activation", "relu", "--allow-kinks"])
    assert r.exit_code == 3 and "reached the DMFT" in r.output, r.output


def test_delta_star_setting_and_input_checks():
    """Session 49 user audit: a no-bracket δ*(t) returned setting={} and no result recorded its key or problem;
    a teacher without hard directions ran the whole sweep before failing with an internal message; times short of
    the run's last half said "δ*(t) changed inf%". Now: full setting on every path, checks before any solve."""
    P = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] ** 2, k=1, noise_dim=0),
                     student=dmft.TwoLayer(activation=jnp.square, width=1, second_layer=jnp.ones(1)),
                     init=dmft.Init(q0=jnp.eye(1), overlap=jnp.zeros((1, 1))))
    kw = dict(lr=0.05, steps=4, paths=512, key=jax.random.key(3), convention="finite-n", d=100)
    r = delta_star(P, grid=[40.0, 50.0], times=(2, 4), **kw)
    assert r.status == "no-bracket" and r.setting["key"] == [0, 3] and r.setting["problem"]["width"] == 1
    easy = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + 0.5 * z[1], k=2, noise_dim=0),
                        student=dmft.TwoLayer(activation=jnp.tanh, width=1, second_layer=jnp.ones(1)))
    with pytest.raises(spectral.SpectralError, match="no hard coordinates"):
        delta_star(easy, grid=[1.0, 2.0], times=(4,), **kw)
    with pytest.raises(spectral.SpectralError, match=r"0\.\.steps=4"):
        delta_star(P, grid=[1.0, 2.0], times=(2, 8), **kw)


def test_delta_star_names_a_diverging_gd_not_an_unbounded_law():
    """Session 50 user audit: lr = 40 on the bounded staircase (train error 1e21 at step 20) gave margins ±inf and
    the hint "the support of D is unbounded below … use convention='finite-n'". A blown-up state's margins are
    now nan with a note, and the no-bracket message names the divergence and the fix (reduce lr)."""
    from dmft import families as fam

    P = dmft.Problem(teacher=dmft.Teacher(link=lambda z, e: z[0] + z[1] ** 2 - 1.0, k=2, noise_dim=0),
                     student=dmft.TwoLayer(activation=fam.SoftplusT(1.0), width=2, second_layer=jnp.array([1.0, 0.5])),
                     loss=fam.PseudoHuber(1.0), ridge=0.3, init=dmft.Init(q0=jnp.eye(2), overlap=jnp.zeros((2, 2))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        r = delta_star(P, grid=[0.5, 3.0], lr=40.0, steps=12, times=(12,), paths=256, key=jax.random.key(0),
                       convention="strict", level="edge", repeats=2, refine=3)
    assert r.status == "no-bracket" and "GD diverges" in r.message and "reduce lr" in r.message
    assert "unbounded" not in r.message
    assert np.all(np.isnan(r.coarse.margin)) and "GD diverges" in r.coarse.notes[0]


def test_probit_fifty_percent_point_against_a_brute_force_likelihood():
    """dmft.success.probit_fifty_percent_point against an independent grid maximization of the binomial probit
    likelihood (μ on a 0.002 grid, s on a log grid): the MLE, and the profile interval's ends where
    2 Δ log L = 3.84; separated and constant curves give their statuses."""
    from scipy import stats

    from dmft.success import probit_fifty_percent_point

    x = np.array([1.0, 1.5, 2.0, 2.5, 3.0, 3.5])
    k = np.array([0, 1, 2, 5, 7, 8])
    res = probit_fifty_percent_point(x[::-1], (k / 8)[::-1], 8)          # order does not matter
    mus = np.arange(1.0, 4.0, 0.002)
    ss = np.exp(np.linspace(np.log(0.05), np.log(5.0), 400))
    Z = (x[None, None, :] - mus[:, None, None]) / ss[None, :, None]
    ll = np.sum(k * stats.norm.logcdf(Z) + (8 - k) * stats.norm.logsf(Z), axis=-1)
    prof = ll.max(axis=1)
    assert res["status"] == "ok"
    assert abs(res["delta_50"] - mus[np.argmax(prof)]) < 0.004
    inside = mus[2 * (prof.max() - prof) <= stats.chi2.ppf(0.95, 1)]
    assert abs(res["ci"][0] - inside.min()) < 0.005 and abs(res["ci"][1] - inside.max()) < 0.005
    assert res["stderr"] == pytest.approx((res["ci"][1] - res["ci"][0]) / (2 * 1.959964), rel=1e-6)
    sep = probit_fifty_percent_point([1.0, 2.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0], 8)
    assert sep["status"] == "separated" and sep["ci"] == (2.0, 3.0) and np.isnan(sep["delta_50"])
    assert probit_fifty_percent_point([1.0, 2.0], [1.0, 1.0], 8)["status"] == "no-information"
    assert probit_fifty_percent_point([2.0], [0.5], 8)["status"] == "no-information"      # one δ (was a scipy error)
    with pytest.raises(dmft.ProblemError, match="fractions of 8 runs"):
        probit_fifty_percent_point([1.0, 2.0], [0.3, 1.0], 8)
