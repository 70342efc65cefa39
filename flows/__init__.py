"""deltann.flows — gradient flow of homogeneous networks from small initialization
(Kumar–Haupt; THEORY §5): NCF, KKT points, limiting trajectory p(t), first saddle, sparsity.

Models are callables H(params, X) -> (n,) over parameter pytrees; use the constructors
(`feedforward`, `two_layer`, `deep_linear`, `diagonal_linear`) which also carry
`init(key, d_in)` for random starts, or wrap your own with `Model(fn, params_like)` /
pass `params_like=` to the tools.
"""
import dmft as _dmft  # noqa: F401  (before any computation: the CPU compile settings of dmft/xla_flags.py, dmft/threefry_cpu.py)
import jax

jax.config.update("jax_enable_x64", True)

from .errors import FlowError  # noqa: E402
from .models import (  # noqa: E402
    DiagonalLinear, FeedForward, Model, activation_fn, as_model, check_degree, deep_linear,
    diagonal_linear, feedforward, measure_degree, require_theory, two_layer)
from .ncf import get_loss, label_vector, logistic_loss, make_loss, make_ncf, square_loss  # noqa: E402
from .linalg import hessian_eigs, lanczos, tangent_hessian_eigs  # noqa: E402
from .kkt import KKTList, KKTPoint, analyze_kkt, kkt_from, kkt_points  # noqa: E402
from .flow import FlowResult, SaddleResult, first_saddle, gradient_flow, log_times, residual_ncf  # noqa: E402
from .limiting import (  # noqa: E402
    LimitingResult, escape_time, limiting_trajectory, ncf_blowup_time, p_asymptote, time_shift)

from .sparsity import (  # noqa: E402
    SparsityScaling, ZeroPreserving, check_zero_preserved, sparsity_scaling, zero_preserving_subset)

__all__ = [
    "SparsityScaling", "ZeroPreserving", "check_zero_preserved", "sparsity_scaling",
    "zero_preserving_subset",
    "FlowError", "DiagonalLinear", "FeedForward", "Model", "activation_fn", "as_model",
    "check_degree", "deep_linear", "diagonal_linear", "feedforward", "measure_degree",
    "require_theory", "two_layer", "get_loss", "label_vector", "logistic_loss", "make_loss",
    "make_ncf", "square_loss", "hessian_eigs", "lanczos", "tangent_hessian_eigs", "KKTList",
    "KKTPoint", "analyze_kkt", "kkt_from", "kkt_points", "FlowResult", "SaddleResult",
    "first_saddle", "gradient_flow", "log_times", "residual_ncf", "LimitingResult", "limiting_trajectory",
    "escape_time", "ncf_blowup_time", "p_asymptote", "time_shift",
]
