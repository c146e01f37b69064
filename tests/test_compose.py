"""docker-compose.yml cannot run here (no Docker engine): check its structure
against the project's real commands, settings and devices."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tritonclient.grpc  # noqa: F401  (registers inference.* protobuf names: commands must not import ours eagerly)
import yaml
from django.core.management import load_command_class

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]
#: The long-running services of the project's image (worker-certs is a one-shot job).
APP_SERVICES = {
    name: s for name, s in SERVICES.items() if s.get("image", "").startswith("modelhost") and name != "worker-certs"
}
SETTINGS_TEXT = "".join(p.read_text() for p in sorted((ROOT / "hosting" / "settings").glob("*.py")))
COMMAND_APPS = {"serve": "hosting", "rungrpc": "hosting", "runworker": "hosting",
                "grpc_health": "hosting", "worker_health": "hosting", "make_worker_certs": "hosting"}  # fmt: skip


def test_services_of_a_gpu_server():
    assert {"postgres", "redis", "minio", "rest", "grpc", "worker-cpu"} <= set(SERVICES)
    gpu_workers = [n for n in SERVICES if n.startswith("worker-gpu")]
    assert len(gpu_workers) >= 2
    assert set(APP_SERVICES) == {"rest", "grpc", "worker-cpu", *gpu_workers}
    redis = SERVICES["redis"]  # a password: whoever can write heartbeats can at least delay requests
    assert "--requirepass" in " ".join(redis["command"]) and "REDISCLI_AUTH" in " ".join(redis["healthcheck"]["test"])


def _manage_args(command: list[str]) -> list[str]:
    assert command[:2] == ["python", "manage.py"], command
    return command[2:]


@pytest.mark.parametrize("name", sorted(APP_SERVICES))
def test_commands_are_real_and_parse(name):
    """The command and each health check run a manage.py command whose own
    argument parser accepts the arguments given."""
    service = APP_SERVICES[name]
    for command in (service["command"], service["healthcheck"]["test"][1:]):
        if command[0] == "curl":
            assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v2/health/ready", command[-1])
            continue
        subcommand, *args = _manage_args(command)
        instance = load_command_class(COMMAND_APPS[subcommand], subcommand)
        parser = instance.create_parser("manage.py", subcommand)
        parser.parse_args(args)  # SystemExit on an unknown option


@pytest.mark.parametrize("name", sorted(APP_SERVICES))
def test_environment_names_are_settings(name):
    environment = APP_SERVICES[name]["environment"]
    for key in environment:
        assert re.search(rf'"{key}"', SETTINGS_TEXT), f"{name}: {key} is not read by hosting/settings/"
    assert environment["INFERENCE_EXECUTOR"] == "workers"
    assert environment["REDIS_URL"] == "redis://:${REDIS_PASSWORD:?set REDIS_PASSWORD}@redis:6379/0"  # a password
    assert environment["MODEL_STORAGE"] == "s3" and environment["MODEL_STORAGE_ENDPOINT"] == "http://minio:9000"
    assert environment["DATABASE_URL"].startswith("postgres://")


def test_every_long_running_service_has_a_health_check():
    for name, service in SERVICES.items():
        if name == "minio-bucket":
            assert "mc mb" in service["command"][0]
            continue
        if name == "worker-certs":
            _parse_command(service["command"])
            continue
        assert service["healthcheck"]["test"], name


def test_workers_have_time_to_drain():
    """SIGTERM drains a worker for up to WORKER_DRAIN_SECONDS: Docker waits longer before it kills."""
    drain = float(re.search(r'"WORKER_DRAIN_SECONDS", default=([\d.]+)', SETTINGS_TEXT).group(1))
    workers = {n: s for n, s in APP_SERVICES.items() if "runworker" in s["command"]}
    assert len(workers) >= 3
    for name, service in workers.items():
        assert float(service["stop_grace_period"].removesuffix("s")) >= drain + 5, name


def test_gpu_workers_are_pinned_to_their_device():
    for name, service in SERVICES.items():
        if not name.startswith("worker-gpu"):
            continue
        device = service["command"][service["command"].index("--device") + 1]
        index = re.fullmatch(r"cuda:(\d+)", device).group(1)
        (reservation,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert reservation["driver"] == "nvidia" and reservation["device_ids"] == [index]
        assert "gpu" in reservation["capabilities"]
        assert service["build"]["args"]["ONNXRUNTIME"] == "onnxruntime-gpu"
        assert service["build"]["dockerfile"] == "Dockerfile.gpu"
        # One GPU reserved: inside the container it is ordinal 0, whichever GPU the label names.
        assert service["environment"]["WORKER_GPU_ORDINAL"] == "0"
        assert "WORKER_GPU_MEMORY_BUDGET_MB" in service["environment"]
        health = service["healthcheck"]["test"]
        assert health[health.index("--device") + 1] == device


def test_dependencies_wait_for_healthy_infrastructure():
    for name, service in APP_SERVICES.items():
        depends = service["depends_on"]
        for infra in ("postgres", "redis"):
            assert depends[infra]["condition"] == "service_healthy", name
        assert depends["minio-bucket"]["condition"] == "service_completed_successfully"
        assert depends["worker-certs"]["condition"] == "service_completed_successfully"
        if name != "rest":
            assert depends["rest"]["condition"] == "service_healthy"  # rest migrates first
    assert "store" in COMPOSE["volumes"] and any(v.startswith("store:") for v in SERVICES["rest"]["volumes"])


def test_dockerfile_builds_both_variants():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG ONNXRUNTIME=onnxruntime" in dockerfile and "ARG BASE=" in dockerfile
    assert "requirements.txt" in dockerfile


def test_gpu_image_matches_onnxruntime_gpu():
    """Dockerfile.gpu: Python 3.11 (the CPU image's, a cp311 wheel of the
    pinned onnxruntime-gpu), CUDA and cuDNN from onnxruntime-gpu's own
    extras (its CUDA major by construction), NVML, and a smoke step that
    fails the build without the CUDA provider."""
    gpu = (ROOT / "Dockerfile.gpu").read_text()
    assert "FROM python:3.11-slim" in gpu and "nvidia/cuda" not in gpu.split("FROM python")[1]
    assert '"${ONNXRUNTIME}[cuda,cudnn]==$(grep -oP' in gpu and "nvidia-ml-py==" in gpu
    assert "assert cuda.CUDA in available" in gpu and "useradd --create-home --uid 1000" in gpu


WORKERS = {name: s for name, s in APP_SERVICES.items() if name.startswith("worker-")}


def test_workers_validate_uploads_with_what_validation_needs():
    """Every runworker consumes the validation queue unless told not to
    (--no-control): at least one must, with the database, Redis and the
    artifact storage it fetches from; the broker is the same Redis as the
    front ends'. SECRET_KEY is the same everywhere (one deployment)."""
    takers = []
    for name, service in WORKERS.items():
        _, args = _parse_command(service["command"])
        if not args.no_control:
            takers.append(name)
        environment = service["environment"]
        for key in ("DATABASE_URL", "REDIS_URL", "MODEL_STORAGE", "MODEL_STORAGE_ENDPOINT", "MODEL_STORAGE_BUCKET",
                    "MODEL_STORAGE_ACCESS_KEY", "MODEL_STORAGE_SECRET_KEY"):  # fmt: skip
            assert environment[key] == APP_SERVICES["rest"]["environment"][key], (name, key)
        assert service["depends_on"]["minio-bucket"]["condition"] == "service_completed_successfully"
    assert takers, "no worker consumes the validation queue: uploads would stay UPLOADED"
    keys = {service["environment"]["SECRET_KEY"] for service in APP_SERVICES.values()}
    assert keys == {"${SECRET_KEY:?set SECRET_KEY}"}


def test_workers_share_no_disk_with_the_front_ends():
    """No data volume in common (only the worker link's certificates, read-only)."""
    front = {v.split(":")[0] for name in ("rest", "grpc") for v in SERVICES[name].get("volumes", [])}
    for name, service in WORKERS.items():
        volumes = {v.split(":")[0] for v in service.get("volumes", [])}
        assert volumes & front == {"worker-tls"}, (name, volumes & front)
        assert all(v.endswith(":ro") for v in service["volumes"] if v.startswith("worker-tls:"))


def test_the_worker_link_is_mutual_tls_with_one_ca():
    """Workers listen on TCP with a worker certificate, front ends present a
    front-end certificate, all from the worker-certs job's CA; no ALLOWED_HOSTS "*"."""
    certs = SERVICES["worker-certs"]
    (target,) = [v.split(":")[1] for v in certs["volumes"] if v.startswith("worker-tls:")]
    assert certs["command"][-1] == target
    for name, service in APP_SERVICES.items():
        environment = service["environment"]
        role = "worker" if name.startswith("worker-") else "frontend"
        assert environment["WORKER_TLS_CA"] == f"{target}/ca.crt", name
        assert environment["WORKER_TLS_CERT"] == f"{target}/{role}.crt", name
        assert environment["WORKER_TLS_KEY"] == f"{target}/{role}.key", name
        assert f"worker-tls:{target}:ro" in service["volumes"], name
        assert ("WORKER_LISTEN" in environment) == (role == "worker"), name
        assert "*" not in environment["ALLOWED_HOSTS"]


def _parse_command(command: list[str]):
    subcommand, *args = _manage_args(command)
    instance = load_command_class(COMMAND_APPS[subcommand], subcommand)
    return subcommand, instance.create_parser("manage.py", subcommand).parse_args(args)
