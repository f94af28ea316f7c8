"""Triton kernels with their PyTorch references: sum-tree, n-step returns, V-trace.

Dispatch (docs/architecture.md): Triton on CUDA tensors, the reference on CPU tensors, and Triton
on CPU tensors when TRITON_INTERPRET=1 is set before this package is imported. Every public
function takes impl="auto" | "triton" | "torch" to force one. See docs/kernels.md.
"""

from pql.kernels._dispatch import INTERPRETING, select_impl, triton_runs_on
from pql.kernels.nstep import nstep_returns
from pql.kernels.sumtree import SumTree
from pql.kernels.vtrace import vtrace

__all__ = ["INTERPRETING", "SumTree", "nstep_returns", "select_impl", "triton_runs_on", "vtrace"]
