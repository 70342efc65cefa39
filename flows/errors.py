"""The single exception class of the flows package."""


class FlowError(ValueError):
    """Bad input or a failed premise of the Kumar–Haupt theory (THEORY §5).

    The message always names the offending parameter and says how to fix it.
    """


def check_data(X, y, loss=None):
    """``X`` (n, d) and ``y`` (n,) finite, with matching n (a user audit found a raw dot_general TypeError for a
    length mismatch, and NaN labels returning KKT points of value NaN); ``loss="logistic"`` needs y ∈ {−1, +1}
    (0/1 labels gave e_y = 0 on every y = 0 row, so N came from the positive rows only: session 49)."""
    import numpy as np

    Xa, ya = np.asarray(X), np.asarray(y)
    if Xa.ndim != 2:
        raise FlowError(f"X must be a 2-d array (n samples, d features); got shape {Xa.shape}.")
    if ya.ndim != 1 or ya.shape[0] != Xa.shape[0]:
        raise FlowError(f"y must be a 1-d array with one label per row of X: X has {Xa.shape[0]} rows, y has shape "
                        f"{ya.shape}.")
    if not (np.all(np.isfinite(Xa)) and np.all(np.isfinite(ya))):
        raise FlowError(f"X and y must be finite ({int(np.sum(~np.isfinite(Xa)))} non-finite entries in X, "
                        f"{int(np.sum(~np.isfinite(ya)))} in y).")
    if isinstance(loss, str) and loss == "logistic":
        bad = ~np.isin(ya, (-1.0, 1.0))
        if bad.any():
            raise FlowError(f"y: loss='logistic' (ln(1 + e^(−p·y))) takes labels in {{−1, +1}}; {int(bad.sum())} labels are "
                            f"not (e.g. {ya[bad][:3].tolist()}). Map 0/1 labels with y = 2y − 1, or pass a callable loss.")
