"""The Kubernetes manifests (deploy/kubernetes): every kustomization renders
(``kubectl kustomize``), every object validates against the Kubernetes
schemas offline (kubernetes-validate, strict: no unknown fields), and the
objects agree with the project: commands and probes are real manage.py
commands whose parsers accept their arguments, ports agree between
commands, containers, probes and Services, every environment name is a
setting, every Secret reference resolves, pods share no disk, GPU workers
hold one GPU each, and every worker Deployment has an autoscaler on its
own pool's depth (HPA through Prometheus Adapter, or KEDA's Redis scaler
on the list the front ends keep)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import tritonclient.grpc  # noqa: F401  (registers inference.* protobuf names: commands must not import ours eagerly)
import yaml
from django.core.management import load_command_class
from django.urls import resolve

from inference.runtime.placement import pool_depth_key

ROOT = Path(__file__).resolve().parents[1]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ["base", "overlays/gpu", "overlays/keda"]
SETTINGS_TEXT = (ROOT / "hosting" / "settings.py").read_text()
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
COMMAND_APPS = {"serve": "hosting", "rungrpc": "hosting", "runworker": "hosting",
                "grpc_health": "hosting", "worker_health": "hosting"}  # fmt: skip
#: Environment variables that are not settings: only used to build others.
HELPER_ENV = {"POD_IP"}
K8S_VERSION = "1.33.0"


def render(name: str) -> list[dict]:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl (for kustomize) is not installed")
    done = subprocess.run([KUBECTL, "kustomize", str(KUSTOMIZE / name)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@pytest.fixture(scope="module", params=KUSTOMIZATIONS)
def objects(request) -> list[dict]:
    return render(request.param)


def _of(objects, kind):
    return [o for o in objects if o["kind"] == kind]


def _by_name(objects, kind) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in _of(objects, kind)}


def _container(deployment) -> dict:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return container


def _env(container) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def _parse(command: list[str]):
    """The manage.py command's own parser accepts the arguments (SystemExit otherwise)."""
    assert command[:2] == ["python", "manage.py"], command
    subcommand, *args = command[2:]
    instance = load_command_class(COMMAND_APPS[subcommand], subcommand)
    return subcommand, instance.create_parser("manage.py", subcommand).parse_args(args)


def test_every_object_validates_against_the_kubernetes_schemas(objects):
    for obj in objects:
        if obj["apiVersion"].startswith("keda.sh/"):
            continue  # a CRD: checked in test_autoscaling
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_commands_and_probes_are_real(objects):
    for deployment in _of(objects, "Deployment"):
        container = _container(deployment)
        _parse(container["command"])
        for probe in ("readinessProbe", "livenessProbe"):
            spec = container[probe]
            if "exec" in spec:
                _parse(spec["exec"]["command"])
            elif "httpGet" in spec:
                resolve(spec["httpGet"]["path"])  # a route of the server (Resolver404 otherwise)
            else:
                assert "tcpSocket" in spec, (deployment["metadata"]["name"], probe)


def test_ports_agree(objects):
    deployments = _by_name(objects, "Deployment")
    services = _by_name(objects, "Service")
    frontend = _container(deployments["modelhost-frontend"])
    subcommand, args = _parse(frontend["command"])
    assert subcommand == "serve" and args.host == "0.0.0.0" and args.grpc_port is None
    assert frontend["ports"] == [{"name": "http", "containerPort": args.http_port}]
    assert frontend["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert frontend["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    (http_port,) = services["modelhost"]["spec"]["ports"]
    assert (http_port["port"], http_port["targetPort"]) == (args.http_port, "http") == (8000, "http")
    grpc = _container(deployments["modelhost-grpc"])
    subcommand, args = _parse(grpc["command"])
    assert subcommand == "rungrpc" and args.port == 8001 and args.host == "0.0.0.0"
    assert grpc["ports"] == [{"name": "grpc", "containerPort": 8001}]
    _, health = _parse(grpc["readinessProbe"]["exec"]["command"])
    assert health.port == 8001 and grpc["livenessProbe"]["tcpSocket"]["port"] == "grpc"
    (service_port,) = services["modelhost-grpc"]["spec"]["ports"]
    assert (service_port["port"], service_port["targetPort"]) == (8001, "grpc")
    assert (
        services["modelhost"]["spec"]["selector"]
        == deployments["modelhost-frontend"]["spec"]["selector"]["matchLabels"]
    )
    assert (
        services["modelhost-grpc"]["spec"]["selector"]
        == deployments["modelhost-grpc"]["spec"]["selector"]["matchLabels"]
    )
    for name, deployment in deployments.items():
        if not name.startswith("modelhost-worker-"):
            continue
        worker = _container(deployment)
        env = _env(worker)
        listen = env["WORKER_LISTEN"]["value"]
        assert listen == "0.0.0.0:7070"
        assert env["WORKER_ADVERTISE"]["value"] == "$(POD_IP):7070"  # the pod's own IP, from the downward API
        assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
        names = list(env)
        assert names.index("POD_IP") < names.index("WORKER_ADVERTISE")  # $(POD_IP) expands only when defined before
        assert worker["ports"] == [{"name": "worker", "containerPort": 7070}]
        assert worker["livenessProbe"]["tcpSocket"]["port"] == "worker"
        _, run = _parse(worker["command"])
        _, health = _parse(worker["readinessProbe"]["exec"]["command"])
        assert health.device == run.device


def test_environment_names_are_settings_and_secrets_resolve(objects):
    config = _by_name(objects, "ConfigMap")["modelhost-config"]["data"]
    secrets = _by_name(objects, "Secret")
    for key in config:
        assert re.search(rf'"{key}"', SETTINGS_TEXT), f"ConfigMap key {key} is not read by hosting/settings.py"
    assert config["INFERENCE_EXECUTOR"] == "workers" and config["MODEL_STORAGE"] == "s3"
    secret_sources = set()
    for deployment in _of(objects, "Deployment"):
        container = _container(deployment)
        assert container["envFrom"] == [{"configMapRef": {"name": "modelhost-config"}}]
        for name, entry in _env(container).items():
            if name not in HELPER_ENV:
                assert re.search(rf'"{name}"', SETTINGS_TEXT), f"{name} is not read by hosting/settings.py"
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref is not None:
                assert ref["key"] in secrets[ref["name"]]["stringData"], ref
                if name == "SECRET_KEY":
                    secret_sources.add((ref["name"], ref["key"]))
        env = _env(container)
        for needed in (
            "SECRET_KEY",
            "DATABASE_URL",
            "REDIS_URL",
            "MODEL_STORAGE_ACCESS_KEY",
            "MODEL_STORAGE_SECRET_KEY",
        ):
            assert "secretKeyRef" in env[needed]["valueFrom"], (deployment["metadata"]["name"], needed)
    # One SECRET_KEY for every pod: it keys the front ends' connections to the workers.
    assert len(secret_sources) == 1
    # PostgreSQL, Redis and S3 are external services with stable in-cluster names.
    services = _by_name(objects, "Service")
    for name in ("modelhost-postgres", "modelhost-redis", "modelhost-s3"):
        assert services[name]["spec"]["type"] == "ExternalName"
    assert config["MODEL_STORAGE_ENDPOINT"].startswith("http://modelhost-s3:")


def test_pods_share_no_disk(objects):
    for deployment in _of(objects, "Deployment"):
        for volume in deployment["spec"]["template"]["spec"].get("volumes", []):
            assert set(volume) == {"name", "emptyDir"}, volume  # only the pod's own scratch
    assert not _of(objects, "PersistentVolumeClaim")


def test_workers_per_device_and_pool(objects):
    deployments = _by_name(objects, "Deployment")
    workers = {n: d for n, d in deployments.items() if n.startswith("modelhost-worker-")}
    assert "modelhost-worker-cpu" in workers
    pools = set()
    for name, deployment in workers.items():
        container = _container(deployment)
        _, run = _parse(container["command"])
        pool = _env(container)["WORKER_POOL"]["value"]
        pools.add(pool)
        assert deployment["spec"]["template"]["metadata"]["labels"]["modelhost/pool"] == pool
        limits = container["resources"]["limits"]
        if name.startswith("modelhost-worker-gpu"):
            assert run.device == "cuda:0"  # the pod's one GPU, whichever it is on the node
            assert limits["nvidia.com/gpu"] == 1
            assert container["image"].split("/")[-1].startswith("modelhost-gpu")
            assert deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        else:
            assert run.device == "cpu" and "nvidia.com/gpu" not in limits
    assert len(pools) == len(workers)  # each Deployment its own pool, so each scales on its own depth


def test_autoscaling(objects):
    deployments = _by_name(objects, "Deployment")
    workers = {n: d for n, d in deployments.items() if n.startswith("modelhost-worker-")}
    hpas, scaled = _of(objects, "HorizontalPodAutoscaler"), _of(objects, "ScaledObject")
    assert bool(hpas) != bool(scaled)  # one mechanism per overlay
    config = _by_name(objects, "ConfigMap")["modelhost-config"]["data"]
    targets = {}
    for hpa in hpas:
        spec = hpa["spec"]
        assert spec["scaleTargetRef"]["kind"] == "Deployment"
        (metric,) = spec["metrics"]
        assert metric["type"] == "External"
        assert metric["external"]["metric"]["name"] == "modelhost_worker_pool_depth"
        targets[spec["scaleTargetRef"]["name"]] = metric["external"]["metric"]["selector"]["matchLabels"]["pool"]
    for obj in scaled:
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        spec = obj["spec"]
        assert set(spec) <= {"scaleTargetRef", "minReplicaCount", "maxReplicaCount", "cooldownPeriod", "triggers"}
        assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
        (trigger,) = spec["triggers"]
        assert trigger["type"] == "redis"
        meta = trigger["metadata"]
        assert set(meta) <= {"address", "databaseIndex", "listName", "listLength", "activationListLength"}
        assert meta["address"] == "modelhost-redis:6379" and int(meta["listLength"]) > 0
        assert meta["listName"].startswith(pool_depth_key(""))
        targets[spec["scaleTargetRef"]["name"]] = meta["listName"][len(pool_depth_key("")) :]
        assert config["QUEUE_DEPTH_KEYS"] == "true"  # the front ends keep the lists KEDA reads
    assert set(targets) == set(workers)
    for name, pool in targets.items():
        assert _env(_container(workers[name]))["WORKER_POOL"]["value"] == pool
    metrics_paths = {
        d["spec"]["template"]["metadata"].get("annotations", {}).get("prometheus.io/path") for d in deployments.values()
    }
    assert "/metrics" in metrics_paths
    resolve("/metrics")
