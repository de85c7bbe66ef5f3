"""`kustomize build`, for the features infra/k8s uses, in plain Python: kustomize is not
installed here (nor anywhere the tests run), and the manifests must still be checked as
rendered. Supported: resources (files and folders with a kustomization.yaml), namespace,
images (newName/newTag), patches (strategic merge, by the patch's kind and name or by a
target kind). Anything else in a kustomization fails loudly, so the manifests cannot drift
into features this renderer would silently ignore.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

SUPPORTED = {"apiVersion", "kind", "resources", "namespace", "images", "patches"}
# Lists merged item by item on this key (Kubernetes' strategic merge keys); others are replaced.
MERGE_KEYS = ("name", "groupName", "containerPort", "mountPath")


def build(folder: Path) -> list[dict]:
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - SUPPORTED
    if unknown:
        raise ValueError(f"{folder}: kustomization fields this renderer does not support: {sorted(unknown)}")
    docs: list[dict] = []
    for resource in kustomization.get("resources", []):
        path = folder / resource
        docs += build(path) if path.is_dir() else [d for d in yaml.safe_load_all(path.read_text()) if d]
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load((folder / patch["path"]).read_text())
        target = patch.get("target")
        matched = [
            d
            for d in docs
            if (target and d["kind"] == target["kind"])
            or (not target and (d["kind"], d["metadata"]["name"]) == (body["kind"], body["metadata"]["name"]))
        ]
        if not matched:
            raise ValueError(f"{folder / patch['path']}: the patch matches no resource")
        for doc in matched:
            merged = merge(doc, {k: v for k, v in body.items() if k != "metadata"})
            doc.clear()
            doc.update(merged)
    for image in kustomization.get("images", []):
        for container in containers(docs):
            name, _, tag = container.get("image", "").partition(":")
            if name == image["name"]:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
        for doc in docs:  # SparkApplication names its image outside any container
            spec = doc.get("spec", {})
            if doc["kind"] == "SparkApplication" and spec.get("image", "").partition(":")[0] == image["name"]:
                spec["image"] = f"{image.get('newName', image['name'])}:{image.get('newTag', 'latest')}"
    if "namespace" in kustomization:
        for doc in docs:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


def merge(base, patch):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = copy.deepcopy(base)
        for key, value in patch.items():
            out[key] = merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if isinstance(base, list) and isinstance(patch, list) and base and isinstance(base[0], dict):
        key = next((k for k in MERGE_KEYS if k in base[0]), None)
        if key is not None:
            out = copy.deepcopy(base)
            for item in patch:
                found = next((i for i, b in enumerate(out) if b.get(key) == item.get(key)), None)
                if found is None:
                    out.append(copy.deepcopy(item))
                else:
                    out[found] = merge(out[found], item)
            return out
    return copy.deepcopy(patch)


def pod_specs(doc: dict) -> list[dict]:
    """The pod specs a resource makes (for a SparkApplication: its driver and executor)."""
    spec = doc.get("spec", {})
    kind = doc["kind"]
    if kind == "SparkApplication":
        return [spec["driver"], spec["executor"]]
    if kind == "RayCluster":
        return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    if kind == "PyTorchJob":
        return [r["template"]["spec"] for r in spec["pytorchReplicaSpecs"].values()]
    if kind == "Job":
        return [spec["template"]["spec"]]
    return []


def containers(docs: list[dict]) -> list[dict]:
    """Every container, with a SparkApplication's driver and executor standing for theirs."""
    found = []
    for doc in docs:
        for pod in pod_specs(doc):
            found += pod.get("containers", [pod])
    return found
