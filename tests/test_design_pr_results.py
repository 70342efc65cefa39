"""benchmarks/bench_design_pr.py (issue #7, phase retrieval): the family, the paired shift, and the
committed rows."""

import json
import pathlib

import jax.numpy as jnp
import numpy as np
from helpers import assert_same_json
import pytest

RES = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "design_pr.json"


def test_family_is_norm_matched_gelu_plus_he2():
    """σ_0 is GeLU itself; every σ_α has GeLU's Gaussian norm (no scale advantage); the He2
    coefficient E[σ_α He2] grows with α while the He1 coefficient shrinks (Gauss–Hermite, closed form
    for GeLU: E[GeLU·Z] = 1/2)."""
    from benchmarks.bench_design_pr import GELU, family, he2
    from dmft.families import gaussian_norm

    r = jnp.linspace(-4.0, 4.0, 41)
    np.testing.assert_allclose(family(0.0)(r), GELU(r), rtol=1e-12, atol=1e-14)
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    norms = [float(gaussian_norm(family(a))) for a in (0.0, 0.5, 2.0)]
    np.testing.assert_allclose(norms, norms[0], rtol=1e-10)
    c1 = [float(np.sum(w * np.asarray(family(a)(jnp.asarray(x))) * x)) for a in (0.0, 1.0, 4.0)]
    c2 = [float(np.sum(w * np.asarray(family(a)(jnp.asarray(x))) * np.asarray(he2(jnp.asarray(x))))) for a in (0.0, 1.0, 4.0)]
    assert c1[0] == pytest.approx(0.5, rel=1e-10)
    assert c1[0] > c1[1] > c1[2] > 0 and c2[0] < c2[1] < c2[2]


def test_paired_fifty_shift():
    """A curve shifted by exactly one grid step has a paired shift of −1 with zero bootstrap spread;
    a curve that never crosses gives nan and says so."""
    from benchmarks.bench_design_pr import paired_fifty_shift

    g = [1.0, 2.0, 3.0, 4.0]
    b = np.array([[0.1] * 4, [0.1] * 4, [0.9] * 4, [0.9] * 4])     # success 0, 0, 1, 1: 50% at δ = 2.5
    a = np.array([[0.1] * 4, [0.9] * 4, [0.9] * 4, [0.9] * 4])     # one step earlier: 1.5
    sh = paired_fifty_shift(g, a, b, boot=200)
    assert sh["shift"] == pytest.approx(-1.0) and sh["bootstrap_nan_fraction"] == 0.0
    assert sh["shift_stderr"] == pytest.approx(0.0, abs=1e-12)
    b2 = b.copy()
    b2[2] = [0.9, 0.9, 0.9, 0.1]                                    # one seed fails at δ = 3: the spread is > 0
    assert paired_fifty_shift(g, a, b2, boot=200)["shift_stderr"] > 0
    never = paired_fifty_shift(g, np.full((4, 4), 0.1), b, boot=50)
    assert np.isnan(never["shift"]) and never["bootstrap_nan_fraction"] == 1.0


def test_committed_design_pr_rows_reproduce():
    """The designed α is the argmin of the committed scan, and every accuracy row recomputes from the
    stored per-key roots and per-seed cos (so the rows cannot drift from the data)."""
    if not RES.exists():
        pytest.skip("no committed design_pr.json")
    from benchmarks.bench_design_pr import accuracy_rows

    res = json.loads(RES.read_text())
    S, dg = res["setting"], res["diagnostics"]
    last = {a: dg["scan"][str(float(a))]["delta_star"][-1] for a in S["alphas"]}
    stable = {a: dg["scan"][str(float(a))]["stable"] for a in S["alphas"]}
    for a in S["alphas"]:
        assert stable[a] == (np.max(dg["scan"][str(float(a))]["fine_unstable_fraction"]) == 0)
    assert dg["alpha_opt"] == min((a for a in S["alphas"] if np.isfinite(last[a]) and stable[a]), key=lambda a: last[a])
    for rec in dg["scan"].values():
        k = np.asarray(rec["per_key"], float)
        assert k.shape == (S["dmft"]["repeats"], len(S["dmft"]["times"]))
        np.testing.assert_allclose(np.nanmean(k, 0), rec["delta_star"], rtol=1e-12)
    theory = dict(gelu=dg["scan"]["0.0"], designed=dg["scan"][str(float(dg["alpha_opt"]))])
    assert_same_json(accuracy_rows(S, theory, dg["gd"], dg["alpha_opt"]), res["accuracy"])


def test_committed_delta_alg_recomputes():
    """δ_alg next to the designs (issue #7 item 3) is computed, not typed: the committed values equal the
    quadratures now, and noiseless phase retrieval gives its closed form 1/2."""
    from benchmarks import bench_design, bench_design_pr

    pr = bench_design_pr.delta_alg()
    assert pr["value"] == pytest.approx(0.5, rel=1e-6)
    for name, fresh in (("design_pr", pr), ("design", bench_design.delta_alg())):
        p = RES.parent / f"{name}.json"
        if p.exists():
            assert_same_json(fresh, json.loads(p.read_text())["diagnostics"]["delta_alg"])
