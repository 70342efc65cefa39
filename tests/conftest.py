import os
import shutil
import tempfile

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402

from dmft.xla_flags import fast_cpu_compile  # noqa: E402

jax.config.update("jax_enable_x64", True)
fast_cpu_compile()  # before any computation (dmft/xla_flags.py); workers inherit XLA_FLAGS

CACHE_ENV = "DELTANN_TEST_XLA_CACHE"


def pytest_configure(config):
    """One persistent XLA compilation cache per test session, in a fresh temporary directory
    shared by the pytest-xdist workers (they inherit the environment variable the controller sets
    here before it starts them) and removed at the end: identical programs compiled by several
    tests, or rebuilt by a library route on every call (``benchmarks/runner.py``,
    ``_process_compile_cache``), are compiled once per session. Every session starts cold, so a
    clean checkout (CI) measures what a user's first run costs."""
    d = os.environ.get(CACHE_ENV)
    if not d:
        d = tempfile.mkdtemp(prefix="deltann_test_xla_")
        os.environ[CACHE_ENV] = d
        config._deltann_cache_owner = d
    jax.config.update("jax_compilation_cache_dir", d)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


def pytest_unconfigure(config):
    d = getattr(config, "_deltann_cache_owner", None)
    if d:
        shutil.rmtree(d, ignore_errors=True)
        os.environ.pop(CACHE_ENV, None)
