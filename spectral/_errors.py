"""Errors and result codes (optimistix/diffrax style: a status code plus a message;
``throw=True`` raises :class:`SpectralError`, ``throw=False`` returns the status)."""

from __future__ import annotations

import numpy as np


class SpectralError(ValueError):
    """Bad input to, or failure of, a spectral computation (the message names the
    parameter and the fix)."""


# Result codes carried by every result as an int (traceable) ------------------------
SUCCESS = 0
MAX_ITERS = 1          # fixed point / Newton did not reach the tolerance
WRONG_BRANCH = 2       # converged, but to a non-physical branch (Im S not > 0, S not definite, rho(L) >= 1)
NO_EDGE = 3            # no real solution below/above the support found (edge search failed)
NO_OUTLIER = 4         # no outlier on the requested side (not an error: a valid answer)
UNBOUNDED_SUPPORT = 5  # the support is unbounded on that side (strict convention)
NONFINITE = 6          # NaN/inf appeared
INVALID_DELTA = 7      # a traced δ (inside jit / vmap) that is ≤ 0 or non-finite: it cannot be refused before the run

MESSAGES = {
    SUCCESS: "success",
    MAX_ITERS: "the fixed-point/Newton iteration did not converge to the tolerance within "
               "max_steps; increase max_steps, eps (distance from the real axis) or damping",
    WRONG_BRANCH: "the iteration converged to a non-physical branch (Im S > 0 above the axis / "
                  "S definite and rho(dF/dS) < 1 on the real axis violated); the point is probably "
                  "inside the support",
    NO_EDGE: "no real solution outside the support was found; the law may have unbounded "
             "support on that side (use convention='strict' or 'finite-n')",
    NO_OUTLIER: "no outlier: det A(lambda) has no root between the bulk edge and infinity",
    UNBOUNDED_SUPPORT: "the support of the spectrum is unbounded on this side (strict limit): "
                       "there is no edge and no outlier; use convention='finite-n' with n=... "
                       "for the truncated law",
    NONFINITE: "NaN or inf appeared in the computation",
    INVALID_DELTA: "delta (= n/d) must be finite and > 0; inside jit / vmap a traced delta cannot be refused before "
                   "the run, so this point's result is not valid: pass the sample ratio delta = n/d > 0",
}


def invalid_delta_status(status, delta):
    """``status`` with :data:`INVALID_DELTA` where a traced δ is ≤ 0 or non-finite (session 51 audit: under
    ``vmap`` δ = −1 came back as NO_EDGE, "the law may have unbounded support", which points at the wrong cause).
    A concrete δ is refused before the run instead."""
    import jax.numpy as jnp

    if is_concrete(delta):
        return status
    d = jnp.asarray(delta)
    return jnp.where(~(jnp.isfinite(d) & (d > 0)), INVALID_DELTA, status)


def message(code) -> str:
    return MESSAGES.get(int(code), f"unknown status {int(code)}")


def check_status(status, what: str, throw: bool, ok=(SUCCESS,), messages=None):
    """Raise :class:`SpectralError` if ``throw`` and ``status`` (concrete) is not in ``ok``.
    ``messages``: per-code texts that replace the default ones for this caller (e.g. Lanczos,
    whose MAX_ITERS fix is ``max_iters``/``tol``, not the fixed point's ``max_steps``/``eps``)."""
    if not throw:
        return
    try:
        s = np.asarray(status)
    except Exception:  # traced: cannot raise
        return
    bad = [int(c) for c in np.ravel(s) if int(c) not in ok]
    if bad:
        text = (messages or {}).get(bad[0]) or message(bad[0])
        raise SpectralError(f"{what}: {text} (status {bad[0]}; {len(bad)} of {s.size} "
                            "points failed). Pass throw=False to get the status instead.")


def is_concrete(x) -> bool:
    from dmft.problem import Tracer

    return not isinstance(x, Tracer)
