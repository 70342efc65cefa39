"""Shared test helpers (importable from test modules: pytest puts ``tests/`` on ``sys.path``)."""
import json
import math


def assert_same_json(got, want, rel=1e-9, path="$"):
    """``got`` (freshly recomputed rows) equals ``want`` (a committed JSON value) as JSON: same keys,
    same strings and booleans, and floats equal to ``rel`` relative (NaN equals NaN, ±inf exactly).

    Exact float equality is not portable: the recomputations call LAPACK (``np.linalg.inv`` in the
    weighted fits), whose last digits depend on the CPU's code path (measured: 1e-13 relative between
    two machines of the same kind). ``rel`` = 1e-9 is far above that and far below any printed digit."""
    got = json.loads(json.dumps(got))          # tuples → lists, numpy scalars → Python, as committed
    _compare(got, want, rel, path)


def _compare(a, b, rel, path):
    if isinstance(b, dict):
        assert isinstance(a, dict) and set(a) == set(b), f"{path}: keys {sorted(a) if isinstance(a, dict) else a!r} vs {sorted(b)}"
        for k in b:
            _compare(a[k], b[k], rel, f"{path}.{k}")
    elif isinstance(b, list):
        assert isinstance(a, list) and len(a) == len(b), f"{path}: {a!r} vs {b!r}"
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, rel, f"{path}[{i}]")
    elif isinstance(b, bool) or b is None or isinstance(b, str):
        assert a == b and type(a) is type(b), f"{path}: {a!r} vs {b!r}"
    elif isinstance(b, (int, float)):
        assert isinstance(a, (int, float)) and not isinstance(a, bool), f"{path}: {a!r} vs {b!r}"
        if math.isnan(b) or math.isinf(b):
            assert (math.isnan(a) and math.isnan(b)) or a == b, f"{path}: {a!r} vs {b!r}"
        else:
            assert math.isclose(a, b, rel_tol=rel, abs_tol=1e-300), f"{path}: {a!r} vs {b!r} (rel {rel})"
    else:
        raise TypeError(f"{path}: unexpected JSON value {b!r}")
