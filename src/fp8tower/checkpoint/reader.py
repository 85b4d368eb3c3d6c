"""A local safetensors checkpoint directory, read lazily, tensor by tensor.

What is read when:
- at open: config.json, hf_quant_config.json (when present), the index
  (``model.safetensors.index.json``, when present), and each shard's *header* (8-byte length +
  JSON: dtype, shape, offsets of every tensor). No tensor data.
- which files: those the index maps; without an index, ``model.safetensors`` when it exists
  (as transformers reads it: another ``*.safetensors`` beside it, e.g. a Mistral repo's
  ``consolidated.safetensors``, is not read), else every ``*.safetensors`` in the folder.
- ``load(name)``: that one tensor, through ``safetensors.safe_open(..., framework="pt")``
  (memory-mapped; one handle per shard, kept open).
"""

from __future__ import annotations

import json
import math
import os
import struct
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

INDEX_NAME = "model.safetensors.index.json"

# Bits per element of every dtype name the safetensors format defines (safetensors 0.8.0:
# the Rust Dtype enum, whose F4 / F6_* are sub-byte, plus the Python binding's FNUZ types).
ITEM_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
             "F8_E4M3": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8, "I16": 16,
             "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64,
             "F64": 64, "I64": 64, "U64": 64}
FLOAT_DTYPES = ("BF16", "F16", "F32")


class CheckpointError(ValueError):
    """A checkpoint we cannot load as it is; the message names the file, the tensor or field,
    and what was expected."""


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:  # e.g. saved as UTF-16: name the file
        raise CheckpointError(f"{path}: not UTF-8 text ({e}); expected a UTF-8 JSON "
                              "file") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_header(file: Path) -> dict[str, dict]:
    """The safetensors header of one file: {name: {"dtype", "shape", "data_offsets"}}."""
    try:
        with open(file, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise CheckpointError(f"{file}: too short for a safetensors file")
            (n,) = struct.unpack("<Q", raw)
            size = os.fstat(f.fileno()).st_size
            if n > size - 8:  # not safetensors: reading n bytes was a bare MemoryError
                raise CheckpointError(
                    f"{file}: not a safetensors file: its first 8 bytes give a header length "
                    f"of {n} bytes, the file has {size} (a Git LFS pointer, an HTML error "
                    "page or a partial download? fetch the real file, e.g. git lfs pull)")
            header = json.loads(f.read(n))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{file}: unreadable safetensors header ({e})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{file}: the safetensors header is not a JSON object")
    header.pop("__metadata__", None)
    ends = [e["data_offsets"][1] for e in header.values() if isinstance(e, dict)
            and isinstance(e.get("data_offsets"), list) and len(e["data_offsets"]) == 2
            and isinstance(e["data_offsets"][1], int)]
    need = 8 + n + max(ends, default=0)
    if size < need:  # a copy cut short: safetensors' own error named no file
        raise CheckpointError(f"{file}: truncated: its header describes {need} bytes, the file "
                              f"has {size}")
    return header


class TensorInfo:
    __slots__ = ("dtype", "file", "name", "shape")

    def __init__(self, name: str, file: Path, dtype: str, shape: tuple[int, ...]):
        self.name, self.file, self.dtype, self.shape = name, file, dtype, shape

    @property
    def nbytes(self) -> int:
        return -(-math.prod(self.shape) * ITEM_BITS[self.dtype] // 8)

    def where(self) -> str:
        return f"{self.file.name}: tensor {self.name!r}"


class CheckpointReader:
    """The directory, its JSON files and every tensor's metadata; tensors load on demand."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        if not self.path.exists():
            # a Hub id ("Qwen/Qwen3-8B-FP8") lands here too: nothing is downloaded
            raise CheckpointError(f"{self.path}: no such file or directory (expected a local "
                                  "checkpoint folder with config.json and *.safetensors; "
                                  "fp8tower downloads nothing: fetch a Hub model first, e.g. "
                                  "with `hf download`)")
        if not self.path.is_dir():
            raise CheckpointError(f"{self.path}: not a directory (expected a checkpoint folder "
                                  "with config.json and *.safetensors)")
        cfg = self.path / "config.json"
        if not cfg.is_file():
            raise CheckpointError(f"{cfg}: missing (every checkpoint needs its config.json)")
        self.config = read_json(cfg)
        hq = self.path / "hf_quant_config.json"
        self.hf_quant_config = read_json(hq) if hq.is_file() else None
        self.tensors: dict[str, TensorInfo] = {}
        self.read: set[str] = set()  # the names load / load_rows read (from_pretrained's report)
        self._handles: dict[Path, object] = {}
        self._read_index()

    def _read_index(self) -> None:
        index = self.path / INDEX_NAME
        if index.is_file():
            weight_map = read_json(index).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index}: field 'weight_map' must map tensor names to "
                                      "shard files")
            by_file: dict[str, list[str]] = {}
            for name, fname in weight_map.items():
                if not isinstance(fname, str):
                    raise CheckpointError(f"{index}: weight_map[{name!r}]: expected a shard file "
                                          f"name (a string), got {fname!r}")
                by_file.setdefault(fname, []).append(name)
            for fname, names in by_file.items():
                file = self.path / fname
                if not file.is_file():
                    raise CheckpointError(
                        f"{index}: shard {fname!r} (holding {len(names)} tensor(s), e.g. "
                        f"{names[0]!r}) is missing from {self.path}")
                header = read_header(file)
                for name in names:
                    if name not in header:
                        raise CheckpointError(f"{index}: tensor {name!r} is mapped to {fname!r}, "
                                              "which does not hold it")
                    self._add(name, file, header[name])
        else:
            # model.safetensors alone when it is there, as transformers reads it (a Mistral
            # repo's consolidated.safetensors beside it is another copy, in other names)
            single = self.path / "model.safetensors"
            files = [single] if single.is_file() else sorted(self.path.glob("*.safetensors"))
            if not files:
                raise CheckpointError(f"{self.path}: no *.safetensors files and no {INDEX_NAME}")
            for file in files:
                for name, meta in read_header(file).items():
                    if name in self.tensors:
                        raise CheckpointError(f"{file.name}: tensor {name!r} is also in "
                                              f"{self.tensors[name].file.name}")
                    self._add(name, file, meta)

    def _add(self, name: str, file: Path, meta: dict) -> None:
        try:
            start, end = (int(x) for x in meta["data_offsets"])
            info = TensorInfo(name, file, str(meta["dtype"]), tuple(int(d) for d in meta["shape"]))
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(f"{file.name}: tensor {name!r}: header entry must have dtype, "
                                  f"shape and data_offsets [start, end], got {meta!r}") from None
        if info.dtype not in ITEM_BITS:
            raise CheckpointError(f"{info.where()}: unknown dtype {info.dtype!r}; safetensors "
                                  f"defines {', '.join(ITEM_BITS)}")
        if end - start != info.nbytes:
            raise CheckpointError(f"{info.where()}: {info.dtype} of shape {list(info.shape)} "
                                  f"is {info.nbytes} bytes, its data_offsets span {end - start}")
        self.tensors[name] = info

    def info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise CheckpointError(f"{self.path}: no tensor {name!r} in the checkpoint") from None

    def has(self, name: str) -> bool:
        return name in self.tensors

    def load(self, name: str, device=None, dtype: torch.dtype | None = None) -> torch.Tensor:
        """One tensor, read from its shard (memory-mapped), then moved/cast if asked."""
        t = self._handle(self.info(name)).get_tensor(name)
        self.read.add(name)
        if device is not None or dtype is not None:
            t = t.to(device=device, dtype=dtype)
        return t

    def _handle(self, info: TensorInfo):
        handle = self._handles.get(info.file)
        if handle is None:
            try:
                handle = safe_open(str(info.file), framework="pt")
            except (SafetensorError, OSError) as e:  # name the file
                raise CheckpointError(f"{info.file}: cannot open as safetensors ({e})") from None
            self._handles[info.file] = handle
        return handle

    def load_rows(self, name: str, start: int, stop: int, device=None) -> torch.Tensor:
        """Rows [start, stop) of a tensor (its first dimension), reading only those bytes."""
        t = self._handle(self.info(name)).get_slice(name)[start:stop]
        self.read.add(name)
        return t if device is None else t.to(device)

    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tensors.values())

    def close(self) -> None:
        self._handles.clear()
