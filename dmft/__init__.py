"""deltann.dmft — DMFT of full-batch gradient descent on two-layer networks, and the
finite-d GD simulator it is checked against (THEORY §0, §1, §3)."""

import jax

jax.config.update("jax_enable_x64", True)

from . import activations, families, success, sweep  # noqa: E402
from .simulate import SimulationResult, simulate, simulation_data  # noqa: E402
from .solve import DMFTError, Trajectory, solve, solve_sweep  # noqa: E402
from .stationary import Stationary, Warmup, stationary, stationary_sweep  # noqa: E402
from .data import empirical_risk, init_weights, sample_data  # noqa: E402
from .problem import (  # noqa: E402
    Init,
    Problem,
    ProblemError,
    Teacher,
    TwoLayer,
    check_finite_maps,
    committee_readout,
    huber_loss,
    logistic_loss,
    sample_grad,
    sample_grad_a,
    sample_hessian,
    square_loss,
)

__all__ = [
    "activations", "families", "success", "sweep", "SimulationResult", "simulate", "simulation_data", "DMFTError", "Trajectory", "solve", "solve_sweep",
    "Stationary", "Warmup", "stationary", "stationary_sweep",
    "empirical_risk", "init_weights", "sample_data",
    "Init", "Problem", "ProblemError", "Teacher", "TwoLayer", "check_finite_maps",
    "committee_readout", "huber_loss", "logistic_loss", "sample_grad", "sample_grad_a",
    "sample_hessian", "square_loss",
]
