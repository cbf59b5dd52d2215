"""Conversion between torch dtypes/devices and the core's."""
import torch

from thunder import _core

_TO_CORE = {getattr(torch, d.name): d for d in _core.DType.__members__.values()}
_TO_TORCH = {v: k for k, v in _TO_CORE.items()}


def to_core(dtype: torch.dtype) -> "_core.DType":
    """The core DType for a torch.dtype. Raises KeyError for dtypes the core lacks (e.g. float8)."""
    return _TO_CORE[dtype]


def to_torch(dtype: "_core.DType") -> torch.dtype:
    return _TO_TORCH[dtype]


def is_core_dtype(dtype) -> bool:
    return dtype in _TO_CORE


def device_str(device) -> str:
    """'cpu', 'cuda:0', ... for a torch.device or string."""
    return str(torch.device(device))
