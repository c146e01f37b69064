"""The management API keeps its OpenAPI contract against a live ``serve``:

- schemathesis 4.32 (tests/interop/schemathesis.toml: fixed seed, every
  check, the coverage, fuzzing and stateful phases) with a team token, an
  operator token and no token finds nothing: no 5xx, no answer outside the
  schema, no schema-valid request rejected, no schema-violating one accepted;
  with a token it reaches every operation (each answers a 2xx at least once),
  without one every operation answers its declared 401;
- the docs' generated-client example (docs/management-api.md,
  openapi-python-client) runs as written: it uploads a model and sets a version label.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from schemathesis import GenerationMode
from schemathesis.core.parameters import ParameterLocation

from tests.conftest import EXECUTOR
from tests.support import onnx_models as m
from tests.support import stalls
from tests.support.live import bearer, multipart, people_with_tokens, request, token_server
from tests.support.server import ROOT

pytestmark = [
    pytest.mark.interop,
    pytest.mark.skipif(
        EXECUTOR != "inprocess", reason="the management API does not involve the inference executor: run once"
    ),
]

BIN = Path(sys.executable).parent
CONFIG = ROOT / "tests" / "interop" / "schemathesis.toml"
PHASES = ("coverage", "fuzzing", "stateful")
#: The ids given to :func:`schemathesis` that are body fields or query parameters (the others are path parameters).
BODY_IDS = {"canary_version"}
QUERY_IDS = {"a", "b"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server with one operator-owned model ("legacy", imported without a team)."""
    yield from token_server(tmp_path_factory, poll_seconds=0.5)


@pytest.fixture(scope="module")
def tokens(server):
    """API tokens: alice (team ml), root (superuser); bob (team ml) is the member the runs add and remove."""
    return people_with_tokens(server, alice="ml", root="superuser", bob="ml")


def _schema_url(server) -> str:
    return f"http://{server.http_url}/api/schema/?format=json"


#: The management API's operations (and paths): the registry's, the webhooks', the teams' members and service accounts.
OPERATIONS, PATHS = 45, 31
#: The model delete: the main runs leave it out (it would take the test's models along, the operator's
#: "legacy" too); a run of its own deletes a model prepared for it.
DELETE_MODEL = ("--exclude-operation-id", "models_destroy")


def schemathesis(
    server,
    report: Path,
    token: str | None,
    *options: str,
    ids: dict | None = None,
    operations: int = OPERATIONS,
    probability: float = 0.5,
) -> dict:
    """Run the schemathesis CLI against ``server`` (with ``token``, or none);
    its JSON run report (the requests it sent are in ``report`` .har).
    ``ids``: path parameter -> row ids that exist (a webhook and its
    deliveries), added to the configuration as dictionaries of those
    parameters, used with ``probability``."""
    config = CONFIG
    if ids:
        config = report.with_suffix(".toml")
        text = CONFIG.read_text()
        # the test's names (say a model's) rather than the configuration's
        given = tuple(f'"{_location(name)}.{name}"' for name in ids)
        text = "\n".join(line for line in text.splitlines() if not line.startswith(given))
        lines = [text]  # [parameters] is its last table: the first lines below extend it
        lines += [
            f'"{_location(name)}.{name}" = {{ dictionary = "{name}", probability = {probability} }}' for name in ids
        ]
        lines += [f"[dictionaries.{name}]\nvalues = {json.dumps(values)}" for name, values in ids.items()]
        config.write_text("\n".join(lines) + "\n")
    command = [
        str(BIN / "schemathesis"), "--config-file", str(config), "run", _schema_url(server), "--checks", "all",
        "--report", "json,har", "--report-json-path", str(report), "--report-har-path", str(report.with_suffix(".har")),
        *options, *(("--header", f"Authorization: Bearer {token}") if token else ()),
    ]  # fmt: skip
    result = stalls.run(command, timeout=300, cwd=ROOT)  # a busy machine
    output = result.stdout[-12000:] + result.stderr[-4000:]
    assert report.exists(), output
    summary = json.loads(report.read_text())
    assert result.returncode == 0 and summary["exit_code"] == 0, output
    assert summary["complete"] and summary["stop_reason"] == "completed", output
    assert summary["failures"] == [] and summary["errors"] == [], output
    assert summary["test_cases"]["with_failures"] == 0 and summary["test_cases"]["errored"] == 0, output
    assert summary["operations"]["tested"] == operations and summary["operations"]["total"] == OPERATIONS, output
    return summary


def _location(name: str) -> str:
    return "body" if name in BODY_IDS else "query" if name in QUERY_IDS else "path"


def operations_answered(har: Path, schema: dict, statuses: range) -> set[str]:
    """The operations (``METHOD /path/{param}/``) of ``schema`` that answered
    a status in ``statuses`` to a request recorded in ``har``."""
    patterns = [
        (
            method.upper(),
            re.compile(re.sub(r"\\{\w+\\}", "[^/]+", re.escape(path)) + r"(\?.*)?"),
            f"{method.upper()} {path}",
        )
        for path, operations in schema["paths"].items()
        for method in operations
    ]
    answered = set()
    for entry in json.loads(har.read_text())["log"]["entries"]:
        if entry["response"]["status"] in statuses:
            path = "/" + entry["request"]["url"].split("/", 3)[3]
            for method, pattern, name in patterns:
                if entry["request"]["method"] == method and pattern.fullmatch(path):
                    answered.add(name)
    return answered


def test_schemathesis_finds_no_contract_violation(server, tokens, tmp_path):
    def prepare(scale: float) -> dict[str, list[int]]:
        """A version of "affine" (team ml; the fuzzer also creates its own
        models) for the team token to change, with the labels the traffic
        split's promote (canary) and rollback (stable) look for, and a webhook
        of team ml with deliveries: each run starts with them, whatever the
        run before deleted."""
        # alice owns team ml again, whatever role the operator's run gave her (it learns her name from the members list)
        status, answer = request(
            server, "PUT", "/api/teams/ml/members/alice/", json.dumps({"role": "owner"}).encode(),
            {**bearer(tokens["root"]), "Content-Type": "application/json"},
        )  # fmt: skip
        assert status == 200, answer
        # A webhook of team ml, subscribed before the labels move: its deliveries (label.moved) are
        # there for the deliveries list and the redeliver to reach (nothing listens: they are retried).
        status, answer = request(
            server, "POST", "/api/teams/ml/webhooks/",
            json.dumps({"url": "http://127.0.0.1:9/hooks", "events": ["label.moved"]}).encode(),
            {**bearer(tokens["alice"]), "Content-Type": "application/json"},
        )  # fmt: skip
        assert status == 201, answer
        webhook = answer["id"]
        body, kind = multipart({"team": "ml"}, m.affine(scale, 1.0))
        headers = {**bearer(tokens["alice"]), "Content-Type": kind}
        status, version = request(server, "POST", "/api/models/affine/versions/", body, headers)
        assert status == 201, version
        for label in ("stable", "canary"):
            status, answer = request(
                server, "PUT", f"/api/models/affine/labels/{label}/", json.dumps({"version": version["number"]}).encode(),
                {**bearer(tokens["alice"]), "Content-Type": "application/json"},
            )  # fmt: skip
            assert status == 200, answer
        status, page = request(
            server, "GET", f"/api/teams/ml/webhooks/{webhook}/deliveries/", b"", bearer(tokens["alice"])
        )
        assert status == 200 and page["count"] == 2, page  # label.moved twice
        # A retired version, for the restore to find (whatever the seed's order of operations does first).
        body, kind = multipart({}, m.affine(scale + 0.25, 1.0))
        status, retired = request(
            server, "POST", "/api/models/affine/versions/", body, {**headers, "Content-Type": kind}
        )
        assert status == 201, retired
        status, answer = request(
            server, "POST", f"/api/models/affine/versions/{retired['number']}/retire", b"", bearer(tokens["alice"])
        )
        assert status == 200, answer
        # A held version (its input is wider than any before: it breaks the default route's callers), to promote:
        # under the latest policy without a split (whatever the run before set), so that the policy would choose it.
        for method, path, change in (
            ("PUT", "/api/models/affine/traffic/", {"weights": {}, "force": True}),
            ("PATCH", "/api/models/affine/", {"version_policy": "latest", "latest_versions": 1, "force": True}),
        ):
            status, answer = request(
                server, method, path, json.dumps(change).encode(),
                {**bearer(tokens["alice"]), "Content-Type": "application/json"},
            )  # fmt: skip
            assert status == 200, answer
        body, kind = multipart({}, m.affine(scale + 0.75, 1.0, width=4 + int(scale * 2)))
        status, held = request(server, "POST", "/api/models/affine/versions/", body, {**headers, "Content-Type": kind})
        assert status == 201 and held["held"], held
        # A running rollout (a version of its own, steps an hour long: never judged during the run) for the
        # rollout operations to find, and a READY version the fuzzer may start one with once it has ended.
        status, rollouts = request(server, "GET", "/api/models/affine/rollouts/", b"", bearer(tokens["alice"]))
        for earlier in rollouts.get("results", []) if status == 200 else []:
            if earlier["state"] in ("running", "paused"):  # the run before left it going
                path = f"/api/models/affine/rollouts/{earlier['id']}/abort"
                assert request(server, "POST", path, b"", bearer(tokens["alice"]))[0] == 200
        rollout_versions = []
        for extra in (0.5, 0.75):
            body, kind = multipart({}, m.affine(scale + extra, 7.0))
            status, answer = request(
                server, "POST", "/api/models/affine/versions/", body, {**headers, "Content-Type": kind}
            )
            assert status == 201, answer
            rollout_versions.append(answer["number"])
        status, rollout = request(
            server, "POST", "/api/models/affine/rollouts/",
            json.dumps({"canary_version": rollout_versions[0], "steps": [50, 100], "pause_seconds": 3600}).encode(),
            {**bearer(tokens["alice"]), "Content-Type": "application/json"},
        )  # fmt: skip
        assert status == 201, rollout
        return {
            "webhook": [webhook], "delivery": [d["id"] for d in page["results"]], "number": [retired["number"]],
            "username": ["bob"], "held": [held["number"]], "rollout": [rollout["id"]],
            "canary_version": rollout_versions, **service_account(scale),
        }  # fmt: skip

    def service_account(scale: float) -> dict[str, list[int]]:
        """A service account of team ml with a token, for the runs to reach (and deactivate, and revoke)."""
        headers = {**bearer(tokens["alice"]), "Content-Type": "application/json"}
        status, account = request(
            server, "POST", "/api/teams/ml/service-accounts/", json.dumps({"name": f"app-{scale}"}).encode(), headers
        )
        assert status == 201, account
        body = json.dumps({"name": "prod", "role": "viewer", "expires_in_days": 30}).encode()
        status, token = request(
            server, "POST", f"/api/teams/ml/service-accounts/{account['id']}/tokens/", body, headers
        )
        assert status == 201, token
        return {"account": [account["id"]], "token_id": [token["id"]]}

    def scratch(name: str) -> str:
        """A model of team ml with two versions and nothing that forbids its delete, for the delete's run."""
        for scale in (0.25, 0.5):
            body, kind = multipart({"team": "ml"}, m.affine(scale, 9.0))
            status, answer = request(
                server, "POST", f"/api/models/{name}/versions/", body, {**bearer(tokens["alice"]), "Content-Type": kind}
            )
            assert status == 201, answer
        return name

    # The ensembles' one step (tests/support/schemathesis_hooks.py: the uploads without a file name it).
    body, kind = multipart({"team": "ml"}, m.affine(1.5, 0.5))
    status, answer = request(
        server, "POST", "/api/models/steps/versions/", body, {**bearer(tokens["alice"]), "Content-Type": kind}
    )
    assert status == 201, answer
    status, schema = request(server, "GET", "/api/schema/?format=json")
    schema = schema if isinstance(schema, dict) else json.loads(schema)  # application/vnd.oai.openapi+json
    assert status == 200 and len(schema["paths"]) == PATHS
    every_operation = {
        f"{method.upper()} {path}" for path, operations in schema["paths"].items() for method in operations
    }
    phases = ("--phases", ",".join(PHASES))
    for who, scale in (("alice", 2.0), ("root", 3.0)):
        ids = prepare(scale)
        ids.pop("held")  # for the promote's own run, below
        summary = schemathesis(
            server, tmp_path / f"{who}.json", tokens[who], *phases, *DELETE_MODEL, ids=ids, operations=OPERATIONS - 1
        )
        assert {phase: summary["phases"][phase]["status"] for phase in PHASES} == dict.fromkeys(PHASES, "success")
        assert summary["seed"] == 18 and summary["test_cases"]["generated"] > 500
        # The run deletes the webhook it was given before it redelivers (the operations go in path order):
        # the redeliver gets a run of its own, on a fresh webhook with deliveries.
        # So does a service account's new token: the run deactivates the account first (path order).
        ids = prepare(scale + 0.5)
        held = ids.pop("held")
        alone = ("--phases", "fuzzing", "--include-path-regex", "redeliver$")
        schemathesis(server, tmp_path / f"{who}-redeliver.json", tokens[who], *alone, ids=ids, operations=1)
        alone = ("--phases", "fuzzing", "--include-path-regex", "service-accounts/[^/]+/tokens/$")
        schemathesis(server, tmp_path / f"{who}-tokens.json", tokens[who], *alone, ids=ids, operations=1)
        # Likewise a rollout's pause and resume, then its promote (the operations go in path order, and each
        # changes what the next may do), on the fresh running rollout of "affine" that prepare() started; then,
        # with none running, the start of one (the main run found the prepared one running: 409); and a held
        # version's promote (2xx with ?force=true; the main run's versions are not held).
        rollout_ids = {"name": ["affine"], "rollout": ids["rollout"]}
        runs = (
            ("rollout", r"rollouts/\{rollout\}/(pause|resume)$", rollout_ids, 2),
            ("promote", r"rollouts/\{rollout\}/promote$", rollout_ids, 1),
            ("start", "rollouts/$", {"name": ["affine"], "canary_version": ids["canary_version"]}, 2),
            ("held", r"versions/\{number\}/promote$", {"name": ["affine"], "number": held}, 1),
            # Two versions that exist side by side, and a team's service accounts (list and a new one): the main
            # run reaches them only when its draws name an existing model's versions or the test's team.
            ("compare", "versions/compare$", {"name": ["affine"], "a": held, "b": ids["canary_version"]}, 1),
            ("accounts", "service-accounts/$", {"team": ["ml"]}, 2),
        )
        for run, paths, run_ids, count in runs:
            alone = ("--phases", "fuzzing", "--include-path-regex", paths)
            if run == "accounts":  # new names: the first run's seed would draw the names its accounts now hold (409)
                alone += ("--seed", str(int(scale * 10)))
            report = tmp_path / f"{who}-{run}.json"
            schemathesis(server, report, tokens[who], *alone, ids=run_ids, operations=count, probability=1.0)
        # The model delete, on a model of its own: the first request deletes it (204), the others find none (404).
        doomed = scratch(f"scratch-{who}")
        alone = ("--phases", "fuzzing", "--include-operation-id", "models_destroy")
        report = tmp_path / f"{who}-delete.json"
        schemathesis(server, report, tokens[who], *alone, ids={"name": [doomed]}, operations=1, probability=1.0)
        assert request(server, "GET", f"/api/models/{doomed}/", headers=bearer(tokens["root"]))[0] == 404
        # The links and the test's names let it reach every operation, not only its refusals.
        answered = operations_answered(tmp_path / f"{who}.har", schema, range(200, 300))
        for run in ("redeliver", "tokens", "rollout", "promote", "start", "held", "compare", "accounts", "delete"):
            answered |= operations_answered(tmp_path / f"{who}-{run}.har", schema, range(200, 300))
        assert answered == every_operation
    # No token: every operation answers its declared 401 (error body, WWW-Authenticate) and nothing else.
    anonymous = ("--phases", "fuzzing", "--mode", "positive", "--max-examples", "5")
    summary = schemathesis(server, tmp_path / "anonymous.json", None, *anonymous)
    assert summary["phases"]["fuzzing"]["status"] == "success"
    assert len(summary["warnings"]["missing_auth"]) == OPERATIONS
    assert operations_answered(tmp_path / "anonymous.har", schema, range(401, 402)) == every_operation

    # The registry after the runs: the test's models still listed, the operator-owned one without a team.
    teams = {}
    for name in ("affine", "legacy", "steps"):  # by name: the fuzzer's own models may fill pages before them
        status, model = request(server, "GET", f"/api/models/{name}/", headers=bearer(tokens["root"]))
        assert status == 200, model
        teams[name] = model["team"]
    assert teams == {"affine": "ml", "legacy": None, "steps": "ml"}


#: The page of the documentation site that holds the generated-client example.
MANAGEMENT_API_DOC = ROOT / "docs" / "management-api.md"


def _docs_block(marker: str, language: str) -> str:
    """The first ``language`` code block after ``marker`` in docs/management-api.md."""
    page = MANAGEMENT_API_DOC.read_text()
    found = re.search(re.escape(marker) + r".*?```" + language + r"\n(.*?)```", page, re.S)
    assert found, f"no {language} block after {marker!r} in {MANAGEMENT_API_DOC.relative_to(ROOT)}"
    return found.group(1)


def test_generated_client_example_from_the_docs(server, tokens, tmp_path):
    command = _docs_block("<!-- generate-client -->", "")
    assert "openapi-python-client generate" in command and "--meta none" in command
    generate = [
        str(BIN / "openapi-python-client"), "generate", "--url", _schema_url(server), "--meta", "none",
    ]  # fmt: skip
    client_dir = tmp_path / "var" / "client"
    client_dir.mkdir(parents=True)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    result = stalls.run(generate, timeout=120, env=env, cwd=client_dir)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (client_dir / "modelhost_management_api_client" / "api" / "models" / "models_versions_create.py").exists()

    example = tmp_path / "upload_and_label.py"
    example.write_text(_docs_block("<!-- generated-client-example -->", "python"))
    model_file = tmp_path / "var" / "demo_repository" / "iris" / "1" / "model.onnx"
    model_file.parent.mkdir(parents=True)
    model_file.write_bytes(m.affine(3.0, 0.5))
    run_env = dict(
        env,
        PYTHONPATH=str(client_dir),
        MODELHOST_URL=f"http://{server.http_url}",
        MODELHOST_TOKEN=tokens["alice"],
    )
    result = subprocess.run(
        [sys.executable, example.name], cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines() == ["uploaded version 1 of my-iris: READY", "labels of my-iris: {'stable': 1}"]

    status, model = request(server, "GET", "/api/models/my-iris/", headers=bearer(tokens["root"]))
    assert status == 200 and model["team"] == "ml" and model["labels"] == {"stable": 1}
    assert model["versions"][0]["uploaded_by"] == "alice"


def _judged(
    team: str, *, code: str = "ST201", negative: tuple[str, ...] = ("BODY",), answer: tuple[int, dict] = (201, {})
) -> bool:
    """Whether the hooks keep a failure ``code`` of an upload whose multipart
    body sent ``team`` (and a file), ``negative`` naming what was generated
    schema-violating, answered ``answer`` (status, body)."""
    from drf_spectacular.generators import SchemaGenerator

    from tests.support import schemathesis_hooks

    schema = SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]["UploadRequest"]
    body, content_type = multipart({"team": team}, b"\x08\x08 not text")
    media = "multipart/form-data"
    case = SimpleNamespace(
        media_type=media,
        operation=SimpleNamespace(body=[SimpleNamespace(media_type=media, optimized_schema=schema)]),
        meta=SimpleNamespace(
            components={ParameterLocation[name]: SimpleNamespace(mode=GenerationMode.NEGATIVE) for name in negative}
        ),
    )
    response = SimpleNamespace(
        request=SimpleNamespace(headers={"Content-Type": content_type}, body=body),
        status_code=answer[0],
        content=json.dumps(answer[1]).encode(),
    )
    return schemathesis_hooks.keep_failure(None, SimpleNamespace(code=code), case, response)


def test_the_hooks_drop_only_false_reports_of_multipart_bodies():
    # "12" (schemathesis meant the integer 12) is a valid team name as sent: a false report.
    assert _judged("12") is False
    # Really schema-violating as sent, other failures, other violating parts: kept.
    assert _judged("no spaces in team names") is True
    assert _judged("12", code="ST202") is True
    # A schema-valid upload refused for its config: the schema cannot say which strings are config.pbtxt.
    assert _judged("12", code="ST202", answer=(400, {"error": "config.pbtxt: 1:1: ModelConfig has no field"})) is False
    assert _judged("12", code="ST202", answer=(400, {"error": "the file is empty"})) is True
    assert _judged("12", negative=("BODY", "PATH")) is True
    # An upload without a file is no exemption: the schema's oneOf says a file or an ensemble's config (a
    # schema-valid body refused for it is kept; _judged's body has a file, as the first branch wants).
    assert _judged("12", code="ST202", answer=(400, {"error": "no model file in the upload: send ..."})) is True
    # A body that the schema itself refuses as sent (no valid team) was no schema-valid request.
    assert _judged("no spaces in team names", code="ST202", answer=(400, {"error": "team: ..."})) is False


def test_the_hooks_drop_only_refusals_of_what_a_webhook_host_resolves_to():
    from tests.support import schemathesis_hooks

    def kept(answer: dict, path: str = "/api/teams/{team}/webhooks/") -> bool:
        case = SimpleNamespace(media_type="application/json", operation=SimpleNamespace(path=path))
        response = SimpleNamespace(status_code=400, content=json.dumps(answer).encode())
        return schemathesis_hooks.keep_failure(None, SimpleNamespace(code="ST202"), case, response)

    assert (
        kept({"error": "the host 'nowhere.invalid' does not resolve ([Errno -2] Name or service not known)"}) is False
    )
    assert kept({"error": "the host '10.0.0.1' resolves to 10.0.0.1, a private address: ..."}) is False
    # The URL's shape (a host label over 63 characters, not http(s), ...) is the schema's: kept.
    assert kept({"error": "url: a webhook URL is http:// or https:// ...", "fields": {"url": ["..."]}}) is True
    assert kept({"error": "a webhook URL is http:// or https:// with a host name ..."}) is True
    assert kept({"error": "the host 'x' does not resolve"}, path="/api/models/{name}/versions/") is True
