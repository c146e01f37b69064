"""The Kubernetes manifests (deploy/kubernetes): every kustomization renders
(``kubectl kustomize``), every object validates against the Kubernetes
schemas offline (kubernetes-validate, strict: no unknown fields), and the
objects agree with the project: commands and probes are real manage.py
commands whose parsers accept their arguments, ports agree between
commands, containers, probes and Services, every environment name is a
setting, every Secret reference resolves, pods share no disk, GPU workers
hold one GPU each, and every worker Deployment has an autoscaler on its
own pool's depth (HPA through Prometheus Adapter, or KEDA's Redis scaler
on the list the front ends keep).

Hardening (issue 22 F16), asserted on every workload, not only validated:
a read-only root file system with an emptyDir for every path the app
writes, no privilege escalation, no capabilities, a non-root uid (the
image's), the runtime's seccomp profile, no service account token; a
NetworkPolicy that lets only the front-end pods reach the workers' port;
Redis with a password (for KEDA too); concrete ALLOWED_HOSTS that the
probes do not need; a SECRET_KEY that is obviously a placeholder; and the
worker link's mutual TLS files, each side its own Secret, mounted read-only."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import tritonclient.grpc  # noqa: F401  (registers inference.* protobuf names: commands must not import ours eagerly)
import yaml
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import load_command_class
from django.test import override_settings
from django.urls import resolve

from hosting.wsgi_dispatch import PROTOCOL_PREFIXES, PROTOCOL_URLCONF, Dispatcher, ProtocolHandler
from inference.workers.placement import pool_depth_key
from tests.support import stalls

ROOT = Path(__file__).resolve().parents[1]
KUSTOMIZE = ROOT / "deploy" / "kubernetes"
KUSTOMIZATIONS = ["base", "overlays/gpu", "overlays/keda"]
SETTINGS_TEXT = "".join(p.read_text() for p in sorted((ROOT / "hosting" / "settings").glob("*.py")))
KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
COMMAND_APPS = {"serve": "hosting", "rungrpc": "hosting", "runworker": "hosting",
                "grpc_health": "hosting", "worker_health": "hosting"}  # fmt: skip
#: Environment variables that are not settings: only used to build others.
HELPER_ENV = {"POD_IP"}
#: The worker link's mutual TLS files (issue 22 item 2, another branch): checked as settings once
#: hosting/settings/ reads them; until then only their values and mounts are.
WORKER_TLS_DIR = "/etc/modelhost/worker-tls"
WORKER_TLS_ENV = {"WORKER_TLS_CA": "ca.crt", "WORKER_TLS_CERT": "tls.crt", "WORKER_TLS_KEY": "tls.key"}
TLS_SECRETS = {"worker": "modelhost-worker-tls", "frontend": "modelhost-frontend-tls", "grpc": "modelhost-frontend-tls"}
SECRET_KEY_PLACEHOLDER = "CHANGE-ME-generate-with-python-secrets-token-urlsafe-50"
DOCKERFILE = (ROOT / "Dockerfile").read_text()
WORKER_PORT = 7070
K8S_VERSION = "1.33.0"


def render(name: str) -> list[dict]:
    if not Path(KUBECTL).exists():
        pytest.skip("kubectl (for kustomize) is not installed")
    done = stalls.run([KUBECTL, "kustomize", str(KUSTOMIZE / name)], 60)
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
    assert frontend["ports"] == [
        {"name": "http", "containerPort": args.http_port},
        {"name": "metrics", "containerPort": args.metrics_port},
    ]
    assert frontend["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert frontend["livenessProbe"]["httpGet"] == {"path": "/v2/health/live", "port": "http"}
    http_port, metrics_port = services["modelhost"]["spec"]["ports"]
    assert (http_port["port"], http_port["targetPort"]) == (args.http_port, "http") == (8000, "http")
    assert (metrics_port["port"], metrics_port["targetPort"]) == (args.metrics_port, "metrics") == (8002, "metrics")
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
        assert re.search(rf'"{key}"', SETTINGS_TEXT), f"ConfigMap key {key} is not read by hosting/settings/"
    assert config["INFERENCE_EXECUTOR"] == "workers" and config["MODEL_STORAGE"] == "s3"
    secret_sources = set()
    for deployment in _of(objects, "Deployment"):
        container = _container(deployment)
        assert container["envFrom"] == [{"configMapRef": {"name": "modelhost-config"}}]
        for name, entry in _env(container).items():
            pending = name in WORKER_TLS_ENV and '"WORKER_TLS_CA"' not in SETTINGS_TEXT
            if name not in HELPER_ENV and not pending:
                assert re.search(rf'"{name}"', SETTINGS_TEXT), f"{name} is not read by hosting/settings/"
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
            if "secret" in volume:  # read-only files of the pod's own side (test_worker_link_tls)
                assert set(volume) == {"name", "secret"} and volume["name"] == "worker-tls", volume
            else:
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
            env = {e["name"]: e.get("value") for e in container["env"]}
            assert env["WORKER_GPU_ORDINAL"] == "0" and run.device == "cuda:0"  # one GPU per pod: ordinal 0
            assert int(env["WORKER_GPU_MEMORY_BUDGET_MB"]) > 0 and "WORKER_MEMORY_BUDGET_MB" not in env
            assert container["image"].split("/")[-1].startswith("modelhost-gpu")
            assert deployment["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/gpu.product"]
        else:
            assert run.device == "cpu" and "nvidia.com/gpu" not in limits
        # SIGTERM drains the worker for up to WORKER_DRAIN_SECONDS: the kubelet waits longer before it kills
        drain = float(re.search(r'"WORKER_DRAIN_SECONDS", default=([\d.]+)', SETTINGS_TEXT).group(1))
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= drain + 5, name
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


# -- hardening (issue 22 F16) ------------------------------------------------------------------
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}


def _component(deployment) -> str:
    return deployment["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"]


def _image_env() -> dict[str, str]:
    """The image's ENV settings (Dockerfile ``ENV A=1 B=2`` lines)."""
    env = {}
    for line in re.findall(r"^ENV (.+)$", DOCKERFILE, re.MULTILINE):
        env.update(pair.split("=", 1) for pair in line.split())
    return env


def _image_uid() -> int:
    return int(re.search(r"useradd .*--uid (\d+) modelhost", DOCKERFILE)[1])


def test_every_workload_is_a_hardened_deployment(objects):
    workloads = [o for o in objects if o["kind"] in WORKLOAD_KINDS]
    assert workloads and {o["kind"] for o in workloads} == {"Deployment"}  # one pod template shape to check
    assert _image_uid() != 0
    for deployment in workloads:
        name, pod = deployment["metadata"]["name"], deployment["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, name
        assert not {"hostNetwork", "hostPID", "hostIPC"} & set(pod), name
        pod_context = pod["securityContext"]
        containers = pod["containers"] + pod.get("initContainers", [])
        for container in containers:
            context = container["securityContext"]
            effective = {**pod_context, **context}  # a container's own values win
            assert effective["runAsNonRoot"] is True and effective["runAsUser"] == _image_uid(), name
            assert effective["seccompProfile"] == {"type": "RuntimeDefault"}, name
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["readOnlyRootFilesystem"] is True, name
            assert context["capabilities"] == {"drop": ["ALL"]}, name  # and none added
            assert context.get("privileged", False) is False, name


def test_every_path_the_app_writes_is_a_writable_empty_dir(objects):
    """With a read-only root, each directory the app writes to is an emptyDir
    mount: VAR_DIR (secret key, SQLite, run/: settings, beacons, sockets, the
    gRPC ready file; metrics/: Prometheus' multiprocess files), MODEL_STORE_DIR,
    WORKER_CACHE_DIR, PROMETHEUS_MULTIPROC_DIR, and the temporary directory
    (Django spools uploads over 2.5 MB there)."""
    config = _by_name(objects, "ConfigMap")["modelhost-config"]["data"]
    for deployment in _of(objects, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        scratch = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
        container = _container(deployment)
        env = {**_image_env(), **config, **{k: e["value"] for k, e in _env(container).items() if "value" in e}}
        var_dir = env["VAR_DIR"]
        writes = {
            "VAR_DIR": var_dir,
            "MODEL_STORE_DIR": env.get("MODEL_STORE_DIR", f"{var_dir}/models"),
            "WORKER_CACHE_DIR": env.get("WORKER_CACHE_DIR", f"{var_dir}/worker-cache"),
            "PROMETHEUS_MULTIPROC_DIR": env.get("PROMETHEUS_MULTIPROC_DIR", f"{var_dir}/metrics"),
            "TMPDIR": env.get("TMPDIR", "/tmp"),
        }
        mounts = [m for m in container["volumeMounts"] if m["name"] in scratch and not m.get("readOnly")]
        for what, path in writes.items():
            assert any(PurePosixPath(path).is_relative_to(m["mountPath"]) for m in mounts), (
                f"{deployment['metadata']['name']}: {what}={path} is on the read-only root"
            )
        if "PROMETHEUS_MULTIPROC_DIR" not in env:  # serve empties it with rmtree: never a mount point itself
            assert all(m["mountPath"] != writes["PROMETHEUS_MULTIPROC_DIR"] for m in mounts)


def _selects(selector: dict, labels: dict) -> bool:
    """Kubernetes' label selector semantics (matchLabels and matchExpressions)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        match = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not match:
            return False
    return True


def test_only_front_ends_reach_the_workers_port(objects):
    deployments = _of(objects, "Deployment")
    workers = [d for d in deployments if _component(d) == "worker"]
    front_ends = [d for d in deployments if _component(d) in ("frontend", "grpc")]
    assert workers and {_component(d) for d in front_ends} == {"frontend", "grpc"}
    assert len(workers) + len(front_ends) == len(deployments)
    for worker in workers:
        assert _container(worker)["ports"] == [{"name": "worker", "containerPort": WORKER_PORT}]

    def labels(deployment):
        return deployment["spec"]["template"]["metadata"]["labels"]

    policies = _of(objects, "NetworkPolicy")
    guarding = [p for p in policies if any(_selects(p["spec"]["podSelector"], labels(w)) for w in workers)]
    assert [p["metadata"]["name"] for p in guarding] == ["modelhost-worker-ingress"]
    (policy,) = guarding
    spec = policy["spec"]
    assert all(_selects(spec["podSelector"], labels(w)) for w in workers)  # every worker pod, GPU ones too
    assert not any(_selects(spec["podSelector"], labels(f)) for f in front_ends)
    assert "Ingress" in spec["policyTypes"]  # isolated for ingress: what no rule allows is denied
    assert spec["ingress"], "an empty list would deny the front ends too"
    strangers = [{}, {"app.kubernetes.io/component": "other"}, {"app.kubernetes.io/name": "modelhost"}]
    for rule in spec["ingress"]:
        assert rule["ports"] == [{"protocol": "TCP", "port": WORKER_PORT}]
        assert rule["from"], "a rule without peers allows every source"
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, peer  # pods of this namespace only: no ipBlock, no namespaces
            assert not any(_selects(peer["podSelector"], labels(w)) for w in workers)
            assert not any(_selects(peer["podSelector"], other) for other in strangers)
    for front_end in front_ends:  # each front-end pod is allowed by some rule
        assert any(_selects(peer["podSelector"], labels(front_end)) for r in spec["ingress"] for peer in r["from"])


def test_redis_has_a_password_and_keda_uses_it(objects):
    redis_secret = _by_name(objects, "Secret")["modelhost-redis"]["stringData"]
    url = urlsplit(redis_secret["REDIS_URL"])
    assert url.scheme in ("redis", "rediss") and url.hostname == "modelhost-redis"
    assert url.password and url.password == redis_secret["REDIS_PASSWORD"]
    authentications = {o["metadata"]["name"]: o for o in objects if o["kind"] == "TriggerAuthentication"}
    for scaled in _of(objects, "ScaledObject"):
        (trigger,) = scaled["spec"]["triggers"]
        auth = authentications[trigger["authenticationRef"]["name"]]
        assert auth["apiVersion"] == "keda.sh/v1alpha1"
        assert {"parameter": "password", "name": "modelhost-redis", "key": "REDIS_PASSWORD"} in auth["spec"][
            "secretTargetRef"
        ]
        assert trigger["metadata"].get("enableTLS", "false") == ("true" if url.scheme == "rediss" else "false")


def _wsgi_status(path: str, host: str) -> int:
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": path, "SERVER_NAME": host.split(":")[0], "SERVER_PORT": "8000",
               "HTTP_HOST": host, "wsgi.input": io.BytesIO(), "wsgi.url_scheme": "http"}  # fmt: skip
    status = []
    Dispatcher(ProtocolHandler(), WSGIHandler())(environ, lambda line, headers: status.append(line))
    return int(status[0].split()[0])


@pytest.mark.django_db  # Django's request_started signal checks open connections
def test_allowed_hosts_are_concrete_and_the_probes_need_none(objects):
    config = _by_name(objects, "ConfigMap")["modelhost-config"]["data"]
    hosts = [h.strip() for h in config["ALLOWED_HOSTS"].split(",")]
    assert hosts and "*" not in hosts and all(re.fullmatch(r"\.?[a-z0-9.-]+", h) for h in hosts), hosts
    # The kubelet's probes and Prometheus send the pod's IP as Host. The protocol routes (the
    # lean handler, no middleware) answer whatever the Host; the site refuses a host not listed.
    pod_ip = "10.1.2.3:8000"
    for deployment in _of(objects, "Deployment"):
        for probe in ("readinessProbe", "livenessProbe"):
            if "httpGet" in _container(deployment)[probe]:
                path = _container(deployment)[probe]["httpGet"]["path"]
                assert path.startswith(PROTOCOL_PREFIXES) and resolve(path, urlconf=PROTOCOL_URLCONF), path
    with override_settings(ALLOWED_HOSTS=hosts):
        assert _wsgi_status("/metrics", pod_ip) == 200  # through the protocol handler, as the probes
        assert _wsgi_status("/accounts/login/", pod_ip) == 400  # DisallowedHost
        assert _wsgi_status("/accounts/login/", hosts[0]) == 200


def test_secret_key_is_an_obvious_placeholder(objects):
    secrets = _by_name(objects, "Secret")
    assert secrets["modelhost-secret-key"]["stringData"] == {"SECRET_KEY": SECRET_KEY_PLACEHOLDER}
    for secret in secrets.values():  # every other secret value is a placeholder too, or has one in it
        for key, value in secret["stringData"].items():
            assert "REPLACE_ME" in value or value == SECRET_KEY_PLACEHOLDER, (secret["metadata"]["name"], key)


def test_worker_link_tls_each_side_its_own_secret(objects):
    secrets = _by_name(objects, "Secret")
    for name in set(TLS_SECRETS.values()):
        assert secrets[name]["type"] == "kubernetes.io/tls"
        assert set(secrets[name]["stringData"]) == {"ca.crt", "tls.crt", "tls.key"}  # as cert-manager writes them
    for deployment in _of(objects, "Deployment"):
        name, pod = deployment["metadata"]["name"], deployment["spec"]["template"]["spec"]
        container = _container(deployment)
        env = _env(container)
        assert {k: env[k]["value"] for k in WORKER_TLS_ENV} == {
            k: f"{WORKER_TLS_DIR}/{file}" for k, file in WORKER_TLS_ENV.items()
        }, name
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == WORKER_TLS_DIR]
        assert mount["readOnly"] is True, name
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == TLS_SECRETS[_component(deployment)], name
        assert volume["secret"]["defaultMode"] == 0o440  # the key readable by the pod's group (fsGroup) only
        assert "items" not in volume["secret"]  # every key of the Secret, under its own name
