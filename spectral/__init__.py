"""deltann.spectral — limiting Hessian spectra from the law of the per-sample Hessian
blocks (THEORY §2–§4) and their finite-d checks (Lanczos, SLQ, dense oracles).

Modules: ``law`` (the law of (ζ, D), truncation), ``stieltjes`` (bulk: block Stieltjes
equation, density, edges), ``outliers`` (hard-direction outliers and cos², with the
derivation), ``spectral_methods`` (m = 1 Lu–Li / Mondelli–Montanari, thresholds),
``quadrature``, ``hessian`` (HVPs, dense oracles), ``lanczos`` (extreme eigenpairs, SLQ),
``edge_law`` (the law of the finite-n edge over draws of the samples), ``success_law`` (the law over
runs of the finite-d threshold that follows from it),
``finite_state`` (the hard outlier at a finite-d GD state, with the equation on its own law),
``matrix_model`` (finite-d draws of the random-matrix model of a law: a run's spectrum and success from the
law alone),
``thresholds`` (δ*(t) from the dynamic DMFT), ``stationary_threshold`` (δ_NN from the stationary DMFT),
``threshold_gradient`` (dδ_NN/dθ by implicit differentiation), ``design`` (minimize δ_NN over a family).
"""

import jax

jax.config.update("jax_enable_x64", True)

from ._errors import (INVALID_DELTA, MAX_ITERS, NO_EDGE, NO_OUTLIER, NONFINITE, SUCCESS, UNBOUNDED_SUPPORT,  # noqa: E402
                      WRONG_BRANCH, SpectralError, message)
from .finite_state import StateOutlier, hard_outlier_at_state  # noqa: E402
from .matrix_model import MatrixModelDraws, matrix_model  # noqa: E402
from .hessian import (block_matvec, dense_block_matrix, dense_hessian, finite_blocks,  # noqa: E402
                      hessian_vector_product, risk_gradient)
from .lanczos import (LanczosResult, SLQResult, lanczos_extreme, stochastic_lanczos_quadrature,  # noqa: E402
                      subspace_overlap)
from .law import (BlockLaw, detect_unbounded, law_from_dmft, law_from_problem, law_from_samples,  # noqa: E402
                  sample_blocks, stratify, truncate, unbounded_through_labels,
                  unbounded_through_preactivations)
from .outliers import A_derivative, A_matrix, OutlierResult, all_outliers, outlier  # noqa: E402
from .quadrature import normal_nodes, teacher_nodes  # noqa: E402
from .spectral_methods import (SpectralMethodResult, spectral_method, spectral_method_law,  # noqa: E402
                               spectral_method_threshold, weak_recovery_threshold)
from .stationary_threshold import StationaryThreshold, delta_nn_stationary, margins_at_stationary  # noqa: E402
from .threshold_gradient import ThresholdGradient, ThresholdGradientError, threshold_gradient  # noqa: E402
from .design import DesignResult, design  # noqa: E402
from .edge_law import EdgeLaw, finite_n_edge_law  # noqa: E402
from .success_law import SuccessLaw, finite_n_success_law, success_laws  # noqa: E402
from .stieltjes import (EdgeResult, StieltjesResult, bulk_edge, density, fixed_point_map,  # noqa: E402
                        linearization, stieltjes)

__all__ = [
    "SpectralError", "message", "SUCCESS", "MAX_ITERS", "WRONG_BRANCH", "NO_EDGE", "NO_OUTLIER",
    "UNBOUNDED_SUPPORT", "NONFINITE", "INVALID_DELTA",
    "BlockLaw", "law_from_samples", "law_from_problem", "law_from_dmft", "sample_blocks", "stratify", "truncate",
    "detect_unbounded", "unbounded_through_labels", "unbounded_through_preactivations",
    "StieltjesResult", "EdgeResult", "stieltjes", "density", "bulk_edge", "EdgeLaw", "finite_n_edge_law", "fixed_point_map", "linearization",
    "SuccessLaw", "finite_n_success_law", "success_laws",
    "OutlierResult", "outlier", "all_outliers", "A_matrix", "A_derivative",
    "StationaryThreshold", "delta_nn_stationary", "margins_at_stationary",
    "ThresholdGradient", "ThresholdGradientError", "threshold_gradient", "DesignResult", "design",
    "SpectralMethodResult", "spectral_method", "spectral_method_threshold", "spectral_method_law",
    "weak_recovery_threshold", "normal_nodes", "teacher_nodes",
    "hessian_vector_product", "block_matvec", "dense_block_matrix", "dense_hessian", "finite_blocks",
    "risk_gradient",
    "StateOutlier", "hard_outlier_at_state", "MatrixModelDraws", "matrix_model",
    "LanczosResult", "SLQResult", "lanczos_extreme", "stochastic_lanczos_quadrature", "subspace_overlap",
]
