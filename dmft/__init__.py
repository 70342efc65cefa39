"""deltann.dmft — DMFT of full-batch gradient descent on two-layer networks, and the
finite-d GD simulator it is checked against (THEORY §0, §1, §3)."""

from .xla_flags import fast_cpu_compile as _fast_cpu_compile

# before any JAX computation: XLA's older CPU emitters (dmft/xla_flags.py). Measured session 41: with the
# default emitters a width-4 DMFT runs 3.4x (dmft.solve) to 5x (a 4-point solve_sweep) slower (width 2: same)
XLA_FLAGS_STATUS = _fast_cpu_compile()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from .threefry_cpu import fenced_threefry_on_cpu as _fenced_threefry  # noqa: E402

# Threefry's fenced straight-line lowering on CPU: the same bits, less compile time per random draw
# (dmft/threefry_cpu.py, measured session 43)
THREEFRY_STATUS = _fenced_threefry()

from . import activations, families, success, sweep  # noqa: E402
from .simulate import SimulationResult, simulate, simulation_data  # noqa: E402
from .replica import step_gradients, trajectory_replica, trajectory_span  # noqa: E402
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
    "activations", "families", "success", "sweep", "SimulationResult", "simulate", "simulation_data", "step_gradients", "trajectory_replica", "trajectory_span", "DMFTError", "Trajectory", "solve", "solve_sweep",
    "Stationary", "Warmup", "stationary", "stationary_sweep",
    "empirical_risk", "init_weights", "sample_data",
    "Init", "Problem", "ProblemError", "Teacher", "TwoLayer", "check_finite_maps",
    "committee_readout", "huber_loss", "logistic_loss", "sample_grad", "sample_grad_a",
    "sample_hessian", "square_loss",
]
