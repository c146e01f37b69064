"""A GPU worker's start: which GPU it serves and which one it runs on, and
the proof that its sessions are on it.

The **label** is the device a worker serves (``--device cuda:1``: queue
``infer.cuda1``, its heartbeat, instance groups' ``gpus: [1]``); the
**ordinal** is the ``device_id`` its ONNX Runtime sessions get, the GPU's
number among those the process sees. They differ whenever a process sees
fewer GPUs than the machine has, so :func:`pin` derives one from the other
in one place:

- ``WORKER_GPU_ORDINAL`` set (>= 0): that ordinal, ``CUDA_VISIBLE_DEVICES``
  left alone (a container that reserves one GPU sees it as 0, whatever the
  label);
- else, without ``CUDA_VISIBLE_DEVICES`` (bare metal): the worker makes
  GPU <label> the only one it sees (``CUDA_VISIBLE_DEVICES=<label>``,
  numbered in PCI bus order as ``nvidia-smi`` shows them) and uses ordinal 0;
- else the label's position in ``CUDA_VISIBLE_DEVICES``; a list that does
  not name the label is refused (it would run on another GPU than it says).

:func:`start` then creates the probe session (:func:`inference.runtime.cuda.probe`)
and the worker refuses to start when it is not on its GPU, naming the cause.
"""

from __future__ import annotations

import logging
import os
from collections.abc import MutableMapping
from dataclasses import dataclass

from inference.runtime import cuda
from inference.runtime.gpu_memory import Nvml
from inference.workers.placement import DeviceError, parse_device

logger = logging.getLogger(__name__)


class PinningError(ValueError):
    """The label and CUDA_VISIBLE_DEVICES / WORKER_GPU_ORDINAL disagree."""


@dataclass(frozen=True)
class Pinning:
    label: str  # the device served: cuda:<n>
    ordinal: int  # device_id inside this process
    visible: str | None  # CUDA_VISIBLE_DEVICES to set before CUDA starts (None: as it is)


def pin(device: str, environ: MutableMapping[str, str], ordinal: int | None = None) -> Pinning:
    """The pinning of a worker of ``device`` (``cuda:<n>``) in a process
    with ``environ``; ``ordinal``: WORKER_GPU_ORDINAL (None: unset). Raises
    DeviceError (not a GPU), PinningError (module doc)."""
    kind, number = parse_device(device)
    if kind != "cuda" or number is None:
        raise DeviceError(f"{device} is not a GPU")
    label = f"cuda:{number}"
    if ordinal is not None:
        if ordinal < 0:
            raise PinningError(f"WORKER_GPU_ORDINAL must be >= 0, not {ordinal}")
        return Pinning(label, ordinal, None)
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return Pinning(label, 0, str(number))
    entries = [e.strip() for e in listed.split(",") if e.strip()]
    if str(number) in entries:
        return Pinning(label, entries.index(str(number)), None)
    raise PinningError(
        f"--device {label} names GPU {number}, which CUDA_VISIBLE_DEVICES={listed!r} does not list: unset "
        f"CUDA_VISIBLE_DEVICES (the worker then sees GPU {number} only), or set WORKER_GPU_ORDINAL to the "
        "GPU's number in this process (0 in a container that reserves one GPU)"
    )


@dataclass(frozen=True)
class GpuStart:
    """What a GPU worker runs on: its pinning, the providers its sessions
    get, those its probe session got (``on_gpu`` false: WORKER_CPU_FALLBACK)."""

    pinning: Pinning
    providers: list
    got: list[str]
    on_gpu: bool


def start(
    device: str, options: cuda.CudaOptions, ordinal: int | None = None, fallback: bool = False,
    environ: MutableMapping[str, str] = os.environ, count_devices=None,
) -> GpuStart:  # fmt: skip
    """Pin (setting CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER before CUDA
    starts), then probe. Raises PinningError, and GpuUnavailable naming the
    cause unless ``fallback`` (WORKER_CPU_FALLBACK: a development machine
    without a GPU), which runs on the CPU and says so."""
    pinning = pin(device, environ, ordinal)
    environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # numbers as nvidia-smi shows them
    if pinning.visible is not None:
        environ["CUDA_VISIBLE_DEVICES"] = pinning.visible
    providers = cuda.gpu_providers(pinning.ordinal, options)
    try:  # the GPUs NVML counts (a container's reserved ones) name an ordinal out of range
        got = cuda.probe(pinning.ordinal, providers, count_devices or Nvml.count)
    except cuda.GpuUnavailable as exc:
        reason = f"{device} (ordinal {pinning.ordinal} in this process): {exc}"
        if not fallback:
            raise cuda.GpuUnavailable(
                f"{reason}; the worker does not start (WORKER_CPU_FALLBACK runs it on the CPU)"
            ) from None
        logger.warning("%s; running on the CPU (WORKER_CPU_FALLBACK)", reason)
        return GpuStart(pinning, [cuda.CPU], [cuda.CPU], False)
    return GpuStart(pinning, providers, got, True)
