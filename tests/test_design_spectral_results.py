"""benchmarks/bench_design_spectral.py (issue #7): helpers and the committed rows."""

import json
import pathlib

import numpy as np
from helpers import assert_same_json
import pytest

RES = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "design_spectral.json"


def test_crossing_and_paired_area():
    from benchmarks.bench_design_spectral import crossing, crossing_stats, paired_area

    g = [1.0, 1.5, 2.0, 2.5]
    assert crossing(g, [0.2, 0.1, -0.1, -0.3]) == pytest.approx(1.75)
    assert np.isnan(crossing(g, [0.2, 0.1, 0.05, 0.01]))            # never crosses: nan, not a number
    m = np.array([[0.2, 0.2], [0.1, 0.1], [-0.1, -0.1], [-0.3, -0.3]])
    c = crossing_stats(g, m, other=m + 0.1)                          # other crosses later
    assert c["crossing"] == pytest.approx(1.75) and c["diff"] < 0 and c["crossing_stderr"] == pytest.approx(0.0, abs=1e-12)
    a, se = paired_area(g, np.zeros((4, 3)), np.ones((4, 3)) * np.array([1.0, 2.0, 3.0]))
    assert a == pytest.approx(3.0) and se == pytest.approx(np.std([1.5, 3.0, 4.5], ddof=1) / np.sqrt(3))


def test_committed_design_spectral_rows_reproduce():
    from benchmarks.bench_design_spectral import accuracy_rows

    res = json.loads(RES.read_text())
    S, data = res["setting"], res["data"]
    for name in ("softplus", "designed"):
        assert np.asarray(data[name]["hw"]).shape == (len(S["grid"]), S["seeds"])
    assert_same_json(accuracy_rows(S, data, S["reference"]), res["accuracy"])


def test_committed_design_reference_rows_and_gelu_against_finite_d():
    """bench_design_reference: its rows recompute from its data and design.json; and GeLU's DMFT
    δ*(t·η = 200) (dynamic route) agrees within 3 combined s.e. with GeLU's finite-d threshold from
    the GD states of design_spectral.json (two committed runs, compared here)."""
    from benchmarks.bench_design_reference import accuracy_rows
    from benchmarks.bench_design_spectral import crossing_stats

    ref = json.loads((RES.parent / "design_reference.json").read_text())
    design = json.loads((RES.parent / "design.json").read_text())
    assert_same_json(accuracy_rows(ref["setting"], ref["data"], design), ref["accuracy"])
    assert all(r["agree"] for r in ref["accuracy"])
    spec = json.loads(RES.read_text())
    g = spec["data"]["gelu"]
    c = crossing_stats(g["grid"], np.asarray(g["margin"]))
    th, th_se = ref["data"]["gelu"]["delta_star"][-1], ref["data"]["gelu"]["delta_star_stderr"][-1]
    assert abs(th - c["crossing"]) <= 3 * np.hypot(th_se, c["crossing_stderr"])
