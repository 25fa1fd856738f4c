"""Validation as an API server with strict field validation does it (kubectl's default
since Kubernetes 1.27): a CRD's or Argo's schema allows unknown fields unless told
otherwise, the server refuses them. Each object schema that lists `properties` and says
nothing about others gets `additionalProperties: false`, except where the schema opts
out (`x-kubernetes-preserve-unknown-fields`). A custom resource's `metadata` is checked
as ObjectMeta, which the server validates whatever the CRD says."""

from __future__ import annotations

import copy
import functools
import json
import os

import jsonschema
import yaml

SCHEMAS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "schemas")
OWN_SCHEMAS = os.path.join(os.path.dirname(__file__), "schemas")  # what the shared ones lack
OBJECT_META = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "properties": {
        k: {}
        for k in (
            "name",
            "generateName",
            "namespace",
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
            "selfLink",
        )
    },
}
CRDS = {
    ("serving.kserve.io/v1beta1", "InferenceService"): "kserve-v0.20.0-inferenceservices.crd.yaml",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "gateway-api-v1.6.1-httproutes.crd.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "kubeflow-trainer-v2.3.0-trainjobs.crd.yaml",
    ("ray.io/v1", "RayJob"): "kuberay-v1.7.0-rayjobs.crd.yaml",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): "kubeflow-trainer-v2.3.0-trainingruntimes.crd.json",
    ("pipelines.kubeflow.org/v2beta1", "Pipeline"): "kfp-pipelines.kubeflow.org_pipelines.crd.yaml",
    ("pipelines.kubeflow.org/v2beta1", "PipelineVersion"): "kfp-pipelines.kubeflow.org_pipelineversions.crd.yaml",
}
ARGO = "argo-workflows-v4.1.2.schema.json"


def closed(schema):
    """The schema with every listed-properties object closed to unknown fields."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: (closed(v) if k not in ("enum", "required", "default", "example") else v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _crd(file: str, version: str) -> dict:
    folder = OWN_SCHEMAS if os.path.exists(os.path.join(OWN_SCHEMAS, file)) else SCHEMAS
    crd = yaml.load(open(os.path.join(folder, file)), Loader=yaml.CSafeLoader)  # libyaml: 5x faster on 2 MB
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = closed(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
    schema["properties"]["metadata"] = OBJECT_META
    return schema


@functools.cache
def _argo(kind: str) -> dict:
    full = json.load(open(os.path.join(SCHEMAS, ARGO)))
    return {"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{kind}", "definitions": closed(full["definitions"])}


def knows(doc: dict) -> bool:
    return (
        (doc.get("apiVersion"), doc.get("kind")) in CRDS
        or doc.get("apiVersion") == "argoproj.io/v1alpha1"
        and doc.get("kind") in ("WorkflowTemplate", "Workflow", "CronWorkflow")
    )


@functools.cache
def _validator(api_version: str, kind: str):
    """One validator per kind `knows`, its schema checked once: `jsonschema.validate`
    checks a 2 MB CRD schema against the metaschema on every call."""
    key = (api_version, kind)
    schema = _crd(CRDS[key], api_version.split("/")[1]) if key in CRDS else _argo(kind)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate(doc: dict) -> None:
    """Raise jsonschema.ValidationError as the server would refuse `doc`."""
    if not knows(doc):
        import kubernetes_validate

        kubernetes_validate.validate(doc, "1.32", strict=True)
        return
    error = jsonschema.exceptions.best_match(_validator(doc["apiVersion"], doc["kind"]).iter_errors(doc))
    if error is not None:
        raise error
