"""GPU memory in the model runner's budget (:mod:`inference.runtime.runner`).

On a GPU worker the budget counts the GPU's memory, not the process's
resident memory: the CUDA context and cuBLAS/cuDNN's host memory would
inflate every host-side charge while the GPU itself runs out. Two ways to
charge a version, both per load:

- **measured**: the growth of the GPU's used memory across the load, read
  through a seam (``read()`` -> bytes): :class:`Nvml` (``nvidia-ml-py``,
  NVIDIA's NVML bindings) in a worker, any callable in a test;
- **declared**: ``gpu_mem_limit`` x instances (:class:`GpuCosts`), when the
  CUDA provider's arena is bounded (``ORT_CUDA_MEM_LIMIT_MB``): each
  session may grow its arena up to the limit, so that is what it may take.

A version is charged the larger of the two. The CUDA context is created by
the worker's probe session before any model loads (:mod:`inference.runtime.cuda`),
so it is in the reading before the first load and never charged to a model;
:func:`budget_bytes` leaves it out of the budget.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping

from inference.runtime.residency import Costs

logger = logging.getLogger(__name__)


class GpuCosts(Costs):
    """Costs on a GPU: at least ``per_instance`` bytes (``gpu_mem_limit``; 0:
    none) per instance, else what the load measured (:class:`Costs`)."""

    def __init__(self, per_instance: int = 0, cost_factor: float = 2.0):
        super().__init__(cost_factor)
        self.per_instance = per_instance

    def estimate(self, key: Hashable, size: int, instances: int) -> int:
        return max(super().estimate(key, size, instances), self.per_instance * instances)

    def charge(self, key: Hashable, size: int, instances: int, grown: int) -> int:
        return max(super().charge(key, size, instances, grown), self.per_instance * instances)


def budget_bytes(setting_mb: int, total: int, context: int, reserve: float = 0.1) -> int:
    """The GPU budget: ``setting_mb`` MiB when set, else the GPU's ``total``
    bytes less the CUDA ``context`` and a ``reserve`` share (cuDNN and cuBLAS
    workspaces, fragmentation); 0 (no budget) when neither is known."""
    if setting_mb > 0:
        return setting_mb * 2**20
    if total <= 0:
        return 0
    return max(0, int(total * (1 - reserve)) - max(0, context))


def nvml_index(ordinal: int, environ: Mapping[str, str]) -> int | str:
    """NVML's handle of the GPU a process sees as ``ordinal``: NVML ignores
    ``CUDA_VISIBLE_DEVICES`` and counts every GPU of the machine (in PCI bus
    order, as CUDA_DEVICE_ORDER=PCI_BUS_ID does), so a listed number is
    NVML's index and a listed UUID (``GPU-...``) is looked up by UUID."""
    listed = [e.strip() for e in environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if e.strip()]
    if not listed or "CUDA_VISIBLE_DEVICES" not in environ:
        return ordinal
    entry = listed[ordinal]
    return int(entry) if entry.isdigit() else entry


class Nvml:
    """Readings of one GPU through NVML (``pip install nvidia-ml-py``, in the
    GPU image). Raises ImportError without the package, and NVML's errors
    without a driver."""

    def __init__(self, index: int | str):
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        if isinstance(index, str):
            self._handle = pynvml.nvmlDeviceGetHandleByUUID(index)
        else:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def used(self) -> int:
        """Bytes of the GPU's memory in use (every process's)."""
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def total(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).total)

    def name(self) -> str:
        name = self._nvml.nvmlDeviceGetName(self._handle)
        return name.decode() if isinstance(name, bytes) else str(name)

    @staticmethod
    def count() -> int:
        """GPUs on the machine (NVML's count, regardless of CUDA_VISIBLE_DEVICES)."""
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetCount())


def open_nvml(ordinal: int, environ: Mapping[str, str]) -> Nvml | None:
    """NVML for the GPU this process sees as ``ordinal``, or None (logged)
    when ``nvidia-ml-py`` or the driver is missing: then the budget charges
    ``gpu_mem_limit`` x instances only."""
    try:
        return Nvml(nvml_index(ordinal, environ))
    except Exception as exc:  # ImportError, NVMLError, IndexError
        logger.warning("GPU memory is not measured (NVML: %s); versions are charged gpu_mem_limit x instances", exc)
        return None
