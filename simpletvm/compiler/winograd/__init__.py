"""Winograd F(m, 3) for NHWC 3x3 stride-1 convolutions, weights transformed at import.

TVM 0.27's own precomputed-weight Winograd raises "LEGACY-FLOW", and its other Winograd
transforms the weights inside the kernel on every inference. Here the weight transform
U = G g G^T runs once, in numpy, while the module is rewritten, and the operator reads U
as a constant. Tuned, 3x3 layers with many output tiles (ResNet-18's at 28x28 and
56x56) run faster in this form than as tuned direct NHWC convolutions (BENCHMARKS.md).

The operator keeps the block names of ``topi.nn.conv2d._conv2d_winograd_nhwc_impl``
(data_pad, input_tile, data_pack, bgemm, inverse) but computes each transform as two 1-D
passes (B^T d, then (B^T d) B) whose coefficients are the matrices' nonzero entries as
constants: TOPI's 2-D sums cost more multiply-adds and reach each entry through a
36-way Select that every unrolled statement carries into the build, so each candidate's
TIR passes take many times a direct convolution's and a search measures fewer
candidates in its time (BENCHMARKS.md). Its transform
blocks name SimpleTVM's own schedule rules (:func:`register_schedule_rules`): per tile
and channel chunk (both sampled), the points unrolled and the channels vectorized, where
TVM's rules unroll the body of a scalar channel loop. The operator is marked
out-elementwise-fusable so FuseOps folds bias, activation and residual add into it, as it
does for a direct convolution.
"""

from simpletvm.compiler.winograd.compute import winograd_conv2d_nhwc
from simpletvm.compiler.winograd.policy import (
    ConvSignature,
    forms_for,
    second_form_built,
    tile_size_for,
)
from simpletvm.compiler.winograd.rewrite import apply_winograd, contested_layers, winograd_eligible
from simpletvm.compiler.winograd.schedule_rules import register_schedule_rules
from simpletvm.compiler.winograd.transform import transform_weight

__all__ = [
    "ConvSignature",
    "apply_winograd",
    "contested_layers",
    "forms_for",
    "register_schedule_rules",
    "second_form_built",
    "tile_size_for",
    "transform_weight",
    "winograd_conv2d_nhwc",
    "winograd_eligible",
]
