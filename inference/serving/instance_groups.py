"""Instance groups (Triton's ``instance_group``): the one place that reads
them, with one set of defaults.

A model's instance groups say where worker mode runs it and how many model
instances (ONNX Runtime sessions) run. Stored as Triton's JSON form, a list
of ``{"name", "kind", "count", "gpus"}``; every reader goes through
:func:`read`, every writer through :func:`validate`.

Semantics (Triton's `Instance Groups
<https://github.com/triton-inference-server/server/blob/main/docs/user_guide/model_configuration.md#instance-groups>`_,
and core ``NormalizeInstanceGroup``):

- ``kind`` defaults to ``KIND_AUTO``: the GPUs when there are any (worker
  mode: live GPU workers), else the CPU, never both;
  ``KIND_GPU`` with ``gpus`` lists GPU numbers (none: every GPU);
  ``KIND_CPU`` is the CPU. ``KIND_MODEL`` (a config.pbtxt may say it) is
  placed as ``KIND_AUTO`` and reported as it is.
- ``count`` is the number of instances per listed GPU for ``KIND_GPU``,
  per group otherwise; 0 or missing is 1. (Triton's ONNX Runtime backend
  would start 2 instances of a ``KIND_CPU`` group without a count; this
  server stores and runs 1, and reports what it runs.)
- no group at all is one ``KIND_AUTO`` group of 1 instance, named after the
  model; a group without a name is ``<model>_<index>``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

AUTO, GPU, CPU, MODEL = "KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"
#: The kinds the web UI and the management API set.
SETTABLE_KINDS = (AUTO, GPU, CPU)
DEFAULT_KIND = AUTO
DEFAULT_COUNT = 1
CPU_DEVICE = "cpu"
GPU_DEVICE_PREFIX = "cuda:"


class InstanceGroupError(ValueError):
    """An instance group that cannot be stored (the message names its index)."""


@dataclass(frozen=True)
class InstanceGroup:
    name: str = ""
    kind: str = DEFAULT_KIND
    count: int = DEFAULT_COUNT
    gpus: tuple[int, ...] = ()

    def as_dict(self) -> dict:
        """The stored (Triton JSON) form."""
        return {"name": self.name, "kind": self.kind, "count": self.count, "gpus": list(self.gpus)}


def _one(group: dict) -> InstanceGroup:
    return InstanceGroup(
        name=group.get("name") or "",
        kind=group.get("kind") or DEFAULT_KIND,
        count=group.get("count") or DEFAULT_COUNT,
        gpus=tuple(group.get("gpus") or ()),
    )


def read(groups: Iterable[dict] | None) -> tuple[InstanceGroup, ...]:
    """Stored groups with the defaults filled in (never raises on what
    :func:`validate` let through)."""
    return tuple(_one(group) for group in groups or ())


def validate(groups: Iterable[dict], kinds: tuple[str, ...] = SETTABLE_KINDS) -> list[dict]:
    """The stored form of ``groups`` to write (defaults filled in); raises
    InstanceGroupError for a kind outside ``kinds``, a count that is not a
    positive integer, GPU numbers that are not whole numbers >= 0, or GPUs
    on a group that is not ``KIND_GPU``."""
    clean = []
    for index, group in enumerate(groups):
        kind = group.get("kind", DEFAULT_KIND)
        if kind not in kinds:
            raise InstanceGroupError(f"instance group {index}: kind must be one of {', '.join(kinds)}")
        count = group.get("count", DEFAULT_COUNT)
        if type(count) is not int or count < 1:
            raise InstanceGroupError(f"instance group {index}: count must be a positive integer")
        gpus = group.get("gpus", [])
        if not isinstance(gpus, list | tuple) or any(type(g) is not int or g < 0 for g in gpus):
            raise InstanceGroupError(f"instance group {index}: gpus must be a list of GPU numbers")
        if gpus and kind != GPU:
            raise InstanceGroupError(f"instance group {index}: gpus are only for {GPU}")
        clean.append(InstanceGroup(group.get("name") or "", kind, count, tuple(gpus)).as_dict())
    return clean


def total_instances(groups) -> int:
    """Model instances of the groups in one process that has every device
    (in-process mode): ``count`` per group, per listed GPU for KIND_GPU; 1
    without a group."""
    total = 0
    for group in read(groups):
        total += group.count * max(1, len(group.gpus)) if group.kind == GPU else group.count
    return max(1, total)


def gpu_device(number: int) -> str:
    """The device name of GPU ``number`` (``cuda:<n>``)."""
    return f"{GPU_DEVICE_PREFIX}{number}"


def gpu_number(device: str) -> int | None:
    """The GPU number of a device name (``cuda:<n>``), None for the CPU."""
    return int(device[len(GPU_DEVICE_PREFIX) :]) if device.startswith(GPU_DEVICE_PREFIX) else None


def allowed_devices(groups, live: set[str]) -> list[str]:
    """The live devices (``cpu``, ``cuda:<n>``) a model with these groups
    may run on, in order. KIND_AUTO (and no group) as Triton means it: the
    GPUs when any GPU worker is live (by number; all of its listed GPUs
    when it lists some), the CPU only when none is; never both, so no
    request of a GPU model runs on the CPU while a GPU serves it (and the
    configuration extension, :func:`triton_form`, reports what runs)."""
    gpus = sorted((d for d in live if d.startswith(GPU_DEVICE_PREFIX)), key=gpu_number)
    cpu = [CPU_DEVICE] if CPU_DEVICE in live else []
    parsed = read(groups) or (InstanceGroup(),)
    out: list[str] = []
    for group in parsed:
        if group.kind == GPU:
            wanted = [gpu_device(g) for g in group.gpus] or gpus
            out += [d for d in wanted if d in live]
        elif group.kind == CPU:
            out += cpu
        else:
            listed = [gpu_device(g) for g in group.gpus]
            on_gpus = bool(gpus) and all(d in live for d in listed)
            out += (listed or gpus) if on_gpus else cpu
    return list(dict.fromkeys(out))


def instances_on(device: str, groups, cpu_default: int = 1) -> int:
    """Model instances a worker of ``device`` (``cpu``, ``cuda:<n>``) runs
    for a model with these groups: ``count`` of each group that covers the
    device; without a group 1 on a GPU (the GPU runs one session's kernels)
    and ``cpu_default`` on the CPU (a worker's cores: :func:`cpu_instances`),
    so that a CPU worker fills the cores it is given as a GPU worker fills
    its GPU; 1 when no group covers the device."""
    if not groups and device == CPU_DEVICE:
        return max(1, cpu_default)
    number = gpu_number(device)
    total = 0
    for group in read(groups):
        if group.kind == GPU:
            if number is not None and (not group.gpus or number in group.gpus):
                total += group.count
        elif group.kind == CPU:
            total += group.count if device == CPU_DEVICE else 0
        else:
            total += group.count
    return max(1, total)


def describe(groups) -> str:
    """Where the groups run, in words (the web UI)."""
    parsed = read(groups)
    if not parsed:
        return "any device"
    parts = []
    for group in parsed:
        if group.kind == GPU:
            parts.append(", ".join(f"cuda:{g}" for g in group.gpus) or "any GPU")
        elif group.kind == CPU:
            parts.append("cpu")
        else:
            parts.append("any device")
    return "; ".join(parts)


def triton_form(model_name: str, groups, gpus: Iterable[int] = ()) -> list[dict]:
    """The groups as Triton's model configuration reports them after its
    normalization, given the GPU numbers this server runs on (``gpus``: none
    means CPU only): every group named, KIND_AUTO resolved (KIND_GPU on the
    available GPUs when there are any and the group's listed GPUs are among
    them, else KIND_CPU), KIND_GPU without GPUs given every available GPU,
    the count that runs. Without a group: one, named after the model.
    Only ``name``, ``kind``, ``count`` and ``gpus``; the caller adds Triton's
    other fields."""
    available = sorted(set(gpus))
    parsed = read(groups) or (InstanceGroup(name=model_name),)
    out = []
    for index, group in enumerate(parsed):
        kind, listed = group.kind, list(group.gpus)
        if kind == AUTO:
            kind = GPU if available and all(g in available for g in listed) else CPU
        if kind == GPU and not listed:
            listed = available
        if kind != GPU:
            listed = []
        out.append({"name": group.name or f"{model_name}_{index}", "kind": kind, "count": group.count, "gpus": listed})
    return out


def cpu_instances(intra_op_threads: int = 1) -> int:
    """Model instances that fill this process's CPUs (those it may run on:
    ``os.sched_getaffinity``, e.g. a container's cpuset) with sessions of
    ``intra_op_threads`` threads each; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, intra_op_threads))
