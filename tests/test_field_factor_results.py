"""Committed results of benchmarks/bench_field_factor.py (issue #2): the rows follow from the
stored per-key data, and the claims they carry still hold in the committed numbers."""

import json
import pathlib

import numpy as np
from helpers import assert_same_json

RES = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "field_factor.json"


def test_committed_field_factor_rows_reproduce_and_hold():
    from benchmarks.bench_field_factor import JITTERS, accuracy_rows, paired_stats

    res = json.loads(RES.read_text())
    diag = res["diagnostics"]
    for c in diag["statistics"]:
        per = c["per_key"]
        assert len(per[str(JITTERS[0])]) == len(per[str(JITTERS[1])]) == c["keys"] >= 16
        for o, s in c["paired"].items():   # the paired statistics follow from the per-key values
            again = paired_stats([p[o] for p in per[str(JITTERS[0])]], [p[o] for p in per[str(JITTERS[1])]])
            assert again == s
            # no bias: mean paired difference within 3 s.e., and the re-shuffle is smaller than a new key
            assert abs(s["mean_diff"]) < 3 * s["se_diff"] and s["sd_diff"] < s["sd_keys"]
        for j in JITTERS:                  # the factor is exact for the jittered covariance
            assert abs(c["max_residual"][str(j)] - j) <= 0.05 * j
    reg = diag["regression"]
    a, b = reg[str(JITTERS[0])], reg[str(JITTERS[1])]
    assert 0 <= a["breakdown_step"] <= a["failed_step"] and b["failed_step"] == -1
    assert np.isfinite(a["hard_cos"][5]) and abs(a["hard_cos"][5] - b["hard_cos"][5]) < 0.01   # step 550: sound
    assert_same_json(accuracy_rows(diag), res["accuracy"])
    assert all(r["agree"] for r in res["accuracy"])
