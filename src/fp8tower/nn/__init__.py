"""torch modules and the custom op: Fp8Linear / fp8_linear (linear.py), MergedFp8Linear
(merged.py), ``torch.ops.fp8tower.fp8_linear`` (ops.py). Imports run ops <- linear <- merged."""
