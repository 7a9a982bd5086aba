"""Relax in, a fused module or an executable out, with no search: lowering, layout, convolution forms, Winograd."""
