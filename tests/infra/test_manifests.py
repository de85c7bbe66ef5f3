"""infra/: the Kubernetes manifests, rendered as kustomize would (tests/infra/kustomize.py), and
the image definition, checked for what can be checked without a cluster."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from factory_cli.main import COMMANDS, build_parser
from tests.conftest import REPO
from tests.infra.kustomize import build, containers, pod_specs

INFRA = REPO / "infra"
OVERLAYS = sorted(p.parent.name for p in (INFRA / "k8s" / "overlays").glob("*/kustomization.yaml"))

API = {
    "ConfigMap": "v1",
    "PersistentVolumeClaim": "v1",
    "ServiceAccount": "v1",
    "Role": "rbac.authorization.k8s.io/v1",
    "RoleBinding": "rbac.authorization.k8s.io/v1",
    "SparkApplication": "sparkoperator.k8s.io/v1beta2",
    "RayCluster": "ray.io/v1",
    "PyTorchJob": "kubeflow.org/v1",
    "Job": "batch/v1",
}
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|ACCESS_KEY|CREDENTIAL|PRIVATE|_URI$", re.IGNORECASE)
USERINFO = re.compile(r"://[^/@\s]+:[^/@\s]+@")  # user:password@host
ROLLOUTS = "factory-rollouts"  # the RayCluster whose pods run untrusted completions


def test_there_is_a_cpu_and_a_gpu_overlay():
    assert OVERLAYS == ["cpu", "gpu"]


@pytest.fixture(params=OVERLAYS)
def rendered(request) -> list[dict]:
    return build(INFRA / "k8s" / "overlays" / request.param)


def test_every_resource_is_valid_yaml_of_a_known_kind_and_api_version(rendered):
    for doc in rendered:
        assert API.get(doc["kind"]) == doc["apiVersion"], (doc["kind"], doc["apiVersion"])
        assert doc["metadata"]["namespace"] == "factory"
    names = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    assert {("SparkApplication", f"factory-{job}") for job in ("ingest", "dedup", "filter")} <= names
    assert {("RayCluster", "factory-loader"), ("PyTorchJob", "factory-train"), ("Job", "factory-eval")} <= names
    assert {("RayCluster", ROLLOUTS), ("Job", "factory-rl-build")} <= names
    # What kubectl would send is what was rendered: it survives a YAML round trip.
    assert list(yaml.safe_load_all(yaml.safe_dump_all(rendered))) == rendered


def test_every_pod_gets_the_same_catalog_settings(rendered):
    (config,) = [d for d in rendered if d["kind"] == "ConfigMap"]
    assert config["data"]["FACTORY_CATALOG"] == "lakehouse"
    assert config["data"]["PYICEBERG_CATALOG__LAKEHOUSE__WAREHOUSE"].startswith("s3://")
    pods = containers([d for d in rendered if d["metadata"]["name"] != ROLLOUTS])
    assert len(pods) >= 3 * 2 + 2 + 2 + 1 + 1
    expected = [{"configMapRef": {"name": config["metadata"]["name"]}}, {"secretRef": {"name": "factory-secrets"}}]
    for container in pods:
        assert container.get("envFrom") == expected, container.get("name")


def test_no_secret_value_appears_inline(rendered):
    assert not [d for d in rendered if d["kind"] == "Secret"]  # created by the operator of the cluster
    for doc in rendered:
        for key, value in (doc.get("data") or {}).items():
            assert not SECRET_NAME.search(key) and not USERINFO.search(str(value)), key
    for container in containers(rendered):
        for env in container.get("env", []):
            assert "valueFrom" in env or not SECRET_NAME.search(env["name"]), env
    text = "\n".join(p.read_text() for p in (INFRA / "k8s").rglob("*.yaml"))
    assert not USERINFO.search(text) and "AKIA" not in text  # no credentials anywhere in the files


def parse(argv: list[str]):
    """Parse a `factory` command line as the CLI would; a wrong command or flag fails the test."""
    argv = [re.sub(r"\$\((\w+)\)", "placeholder", a) for a in argv]  # Kubernetes' $(VAR) expansion
    try:
        return build_parser(argv[0]).parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"not a valid factory command line: {shlex.join(argv)}") from exc


def test_every_command_and_flag_exists_in_the_factory_cli(rendered):
    checked, pending = set(), set()
    for doc in rendered:
        if doc["kind"] == "SparkApplication":
            spec = doc["spec"]
            job_file = spec["mainApplicationFile"].removeprefix("local:///opt/factory/")
            assert (REPO / job_file).is_file(), job_file
            job = job_file.removeprefix("pipelines/").removesuffix(".py")
            parse([job, *spec["arguments"]])
            checked.add(job)
        for pod in pod_specs(doc):
            for container in pod.get("containers", []):
                if container.get("command") == ["factory"]:
                    if container["args"][0] not in COMMANDS:
                        pending.add(container["args"][0])
                        continue
                    parse(container["args"])
                    checked.add(container["args"][0])
    assert checked | pending == {"ingest", "dedup", "filter", "train", "eval", "rl"} and pending <= {"eval"}
    if pending:  # `factory eval` comes from another branch of issue 18's wave; checked once merged
        pytest.skip(f"not in the CLI on this branch yet: {sorted(pending)}")


def test_training_nodes_agree_on_their_rendezvous(rendered):
    (job,) = [d for d in rendered if d["kind"] == "PyTorchJob"]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    nodes = sum(r["replicas"] for r in replicas.values())
    commands = [parse(r["template"]["spec"]["containers"][0]["args"]) for r in replicas.values()]
    assert {(c.nnodes, c.rdzv_endpoint, c.rdzv_id, c.nproc) for c in commands} == {
        (nodes, "placeholder:29400", "factory-train", commands[0].nproc)
    }


def test_the_image_copies_every_package_and_the_job_files_path_exists():
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    packages = {p.parent.name for p in REPO.glob("*/__init__.py")} - {"tests", "benchmarks"}
    assert {m for m in re.findall(r"^COPY (\w+) \1$", dockerfile, re.MULTILINE)} == packages | {"configs"}
    assert "spark_classes" in dockerfile and "constraints.txt" in dockerfile
    ignored = (INFRA / "docker" / "Dockerfile.dockerignore").read_text()
    assert all(f"!{p}/**" in ignored for p in packages)


def sandbox_pods(rendered: list[dict]) -> dict[str, dict]:
    """The pod specs where the RL sandbox runs: the rollout workers and the environment's build."""
    (rollouts,) = [d for d in rendered if d["metadata"]["name"] == ROLLOUTS]
    (build_job,) = [d for d in rendered if d["metadata"]["name"] == "factory-rl-build"]
    workers = {f"rollouts/{g['groupName']}": g["template"]["spec"] for g in rollouts["spec"]["workerGroupSpecs"]}
    return workers | {"rl-build": build_job["spec"]["template"]["spec"]}


def image_uid() -> int:
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    (uid,) = re.findall(r"useradd .*--uid (\d+)", dockerfile)
    assert f"USER {uid}" in dockerfile
    return int(uid)


def test_the_sandbox_pods_get_what_bubblewrap_needs_and_no_more(rendered):
    images = {c["image"] for c in containers(rendered) if c.get("name") == "ray-worker"}
    assert len(images) == 1  # the rollout workers run the factory's image, as the loader's readers do
    for name, pod in sandbox_pods(rendered).items():
        # bubblewrap's user-namespace mode, as the image's own non-root user (rl/sandbox.py runs it so when
        # not root); the pod's user namespace is what allows an unmasked /proc for the rollouts' PID namespaces.
        assert pod["hostUsers"] is False, name
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] == image_uid(), name
        assert pod["automountServiceAccountToken"] is False, name
        (container,) = pod["containers"]
        assert container["image"] in images, name
        context = container["securityContext"]
        assert context["procMount"] == "Unmasked", name
        assert context["seccompProfile"]["type"] in {"Unconfined", "Localhost"}, name
        assert context["appArmorProfile"]["type"] in {"Unconfined", "Localhost"}, name
        # ...and no more: no privilege, no capability, no setuid path to one.
        assert context["allowPrivilegeEscalation"] is False and not context.get("privileged"), name
        assert context["capabilities"] == {"drop": ["ALL"]}, name
        # A guaranteed pod: the rollouts' timeouts are measured against CPU the pod owns.
        resources = container["resources"]
        assert resources["requests"] == resources["limits"] and {"cpu", "memory"} <= set(resources["limits"]), name
        assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}, name


def test_the_rollout_workers_hold_no_credentials_and_the_head_runs_no_rollout(rendered):
    (rollouts,) = [d for d in rendered if d["metadata"]["name"] == ROLLOUTS]
    for pod in pod_specs(rollouts):
        for container in pod["containers"]:
            assert "envFrom" not in container and "env" not in container, container["name"]
        assert not any("secret" in volume for volume in pod.get("volumes", []))
    assert rollouts["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    worker = rollouts["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_image_installs_the_rl_sandbox_tools():
    dockerfile = (INFRA / "docker" / "Dockerfile").read_text()
    (install,) = re.findall(r"apt-get install[^\n]*", dockerfile)
    assert {"bubblewrap", "util-linux"} <= set(install.split())  # bwrap; prlimit and setpriv
