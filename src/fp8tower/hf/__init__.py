"""Hugging Face transformers models and checkpoints in FP8.

- ``conversion``: :func:`convert` swaps a model's linears for ``Fp8Linear`` in place and
  merges sibling projections (the merged modules ``MergedProjection`` / ``MergedShard``).
- ``families``: per ``config.model_type``, which siblings merge and how checkpoint names map
  onto the model's (Qwen3.5: ``model.language_model.*`` -> ``model.*``).
- ``pretrained``: :func:`from_pretrained` (a local checkpoint -> a converted model, weights
  never materialized in bf16) and :func:`describe` (what a checkpoint holds).
- ``write``: :func:`write_merged` (a checkpoint -> fp8tower's own, merged);
  ``save``: :func:`save_pretrained` (a converted model -> fp8tower's own checkpoint, also
  the converted model's ``save_pretrained``).

``fp8tower.convert`` and ``fp8tower.from_pretrained`` are these functions. Importing this
package imports torch, not transformers.
"""

from .conversion import ConvertError, convert, default_filter
from .pretrained import describe, from_pretrained
from .save import save_pretrained
from .write import write_merged

__all__ = ["ConvertError", "convert", "default_filter", "describe", "from_pretrained",
           "save_pretrained", "write_merged"]
