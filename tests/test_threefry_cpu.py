"""dmft.threefry_cpu: ``import dmft`` selects Threefry's fenced straight-line CPU lowering where it is safe,
and it draws exactly the bits of JAX's own (looped) one."""

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dmft
from dmft.threefry_cpu import OPT_OUT_ENV, VERIFIED_JAX, fenced_threefry_on_cpu, reference_draws, register_cpu_lowering


def _lowered(key=None) -> str:
    jax.clear_caches()
    return jax.jit(lambda k: jax.random.bits(k, (4,))).lower(jax.random.key(0) if key is None else key).as_text()


def test_status_only_where_safe():
    assert fenced_threefry_on_cpu({OPT_OUT_ENV: "0"}) == "opted out"
    assert fenced_threefry_on_cpu({}, jax_version="0.11.0") == "jax 0.11.0 not verified"
    assert fenced_threefry_on_cpu({}, jax_version=VERIFIED_JAX[0] + "2") == "applied"


@pytest.mark.skipif(not jax.__version__.startswith(VERIFIED_JAX), reason="jax series not verified: rule not applied")
def test_import_dmft_selects_the_fenced_rule_with_the_same_bits():
    if dmft.THREEFRY_STATUS != "applied":
        pytest.skip(f"not applied here ({dmft.THREEFRY_STATUS})")
    key = jax.random.key(20261206)
    got = {}
    try:
        text = _lowered()                            # import dmft registered the fenced rule: no loop, one fence
        assert "stablehlo.while" not in text and "stablehlo.case" in text
        for rule in ("fenced", "straight", "looped"):
            register_cpu_lowering(rule)
            text = _lowered()
            assert ("stablehlo.while" in text) == (rule == "looped")      # (so the checks above can fail)
            got[rule] = jax.tree.map(np.asarray, jax.jit(reference_draws)(key))
        with pytest.raises(ValueError, match="rule must be one of"):
            register_cpu_lowering("unrolled")
    finally:
        register_cpu_lowering("fenced")
        jax.clear_caches()
    for rule in ("fenced", "straight"):
        for name in got["looped"]:
            assert got[rule][name].dtype == got["looped"][name].dtype
            assert got[rule][name].tobytes() == got["looped"][name].tobytes(), (rule, name)


@pytest.mark.skipif(not jax.__version__.startswith(VERIFIED_JAX), reason="jax series not verified: rule not applied")
def test_import_flows_alone_applies_it():
    """A script that imports only flows compiles its random starts with the fenced rule too (flows imports
    dmft first); with the opt-out, JAX's looped rule stays."""
    code = ("import flows, jax, dmft; t = jax.jit(lambda k: jax.random.bits(k, (4,))).lower(jax.random.key(0)).as_text(); "
            "print(dmft.THREEFRY_STATUS, 'stablehlo.while' in t)")
    env = {k: v for k, v in os.environ.items() if k != OPT_OUT_ENV}
    for extra, want in (({}, "applied False"), ({OPT_OUT_ENV: "0"}, "opted out True")):
        out = subprocess.run([sys.executable, "-c", code], env=dict(env, **extra), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stdout.strip().splitlines()[-1] == want
