"""Reads a compiled pipeline the way the KFP v2 driver will, before any cluster does.

The driver resolves each task's inputs from its *enclosing* DAG's inputs (a
`componentInputParameter` the parent does not declare fails the task: "parent DAG does
not have input parameter"), platform settings (PVC, Secret names) from the same parent
DAG, and `{{$.inputs.parameters[...]}}` placeholders in the executor (resources, image)
from the task's own inputs. The SDK can compile IR that breaks these rules (kubeflow/
pipelines #11957, #12617), so `llmops compile` runs `problems` on everything it writes.
"""
from __future__ import annotations

import re

_PLACEHOLDER = re.compile(r"\{\{\$\.inputs\.parameters\['([^']+)'\]\}\}")
_CONDITION = re.compile(r"inputs\.(parameter_values|artifacts)\['([^']+)'\]")


def _walk(node, key: str):
    """Every value stored under `key` anywhere in `node`."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key:
                yield v
            yield from _walk(v, key)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v, key)


def _strings(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for v in node.values():
            yield from _strings(v)
    elif isinstance(node, list):
        for v in node:
            yield from _strings(v)


def _declared(component: dict, kind: str) -> dict:
    return component.get("inputDefinitions", {}).get(kind, {}) or {}


def _outputs(component: dict, kind: str) -> dict:
    return component.get("outputDefinitions", {}).get(kind, {}) or {}


def problems(spec: dict, platform: dict | None = None) -> list[str]:
    """Everything the driver would fail on, one line each (empty: resolvable)."""
    components = spec.get("components", {})
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    k8s = ((platform or {}).get("platforms", {}).get("kubernetes", {})
           .get("deploymentSpec", {}).get("executors", {}))
    out: list[str] = []
    dags = {"root": spec["root"], **{n: c for n, c in components.items() if "dag" in c}}
    for dag_name, dag in dags.items():
        params, artifacts = _declared(dag, "parameters"), _declared(dag, "artifacts")
        tasks = dag["dag"].get("tasks", {})
        for task_name, task in tasks.items():
            where = f"{dag_name}/{task_name}"
            ref = task.get("componentRef", {}).get("name")
            comp = components.get(ref)
            if comp is None:
                out.append(f"{where}: component {ref!r} does not exist")
                continue
            given_p = task.get("inputs", {}).get("parameters", {}) or {}
            given_a = task.get("inputs", {}).get("artifacts", {}) or {}
            for name, src in given_p.items():
                out += _parameter_source(where, name, src, params, tasks, components, given_p)
            for name, src in given_a.items():
                out += _artifact_source(where, name, src, artifacts, tasks, components)
            for kind, given in (("parameters", given_p), ("artifacts", given_a)):
                for name, d in _declared(comp, kind).items():
                    if name not in given and not d.get("isOptional") and "defaultValue" not in d:
                        out.append(f"{where}: required input {kind[:-1]} {name!r} of {ref} is not given")
            for dep in task.get("dependentTasks", []) or []:
                if dep not in tasks:
                    out.append(f"{where}: depends on {dep!r}, which is not in {dag_name}")
            condition = task.get("triggerPolicy", {}).get("condition", "")
            for kind, name in _CONDITION.findall(condition):
                if name not in (given_p if kind == "parameter_values" else given_a):
                    out.append(f"{where}: condition reads {name!r}, which the task is not given")
            label = comp.get("executorLabel")
            if label is None:
                continue
            executor = executors.get(label)
            if executor is None:
                out.append(f"{where}: executor {label!r} does not exist")
                continue
            for text in _strings(executor):
                for name in _PLACEHOLDER.findall(text):
                    if name not in given_p and name not in _declared(comp, "parameters"):
                        out.append(f"{where}: {label} uses {{{{$.inputs.parameters['{name}']}}}}, "
                                   "which the task is not given")
            for name in _walk(k8s.get(label, {}), "componentInputParameter"):
                if name not in params:
                    out.append(f"{where}: kubernetes setting of {label} reads {name!r}, "
                               f"which its parent DAG {dag_name} does not have")
            for src in _walk(k8s.get(label, {}), "taskOutputParameter"):
                if src.get("producerTask") not in tasks:
                    out.append(f"{where}: kubernetes setting of {label} reads task {src.get('producerTask')!r}, "
                               f"which is not in {dag_name}")
        for name, src in (dag["dag"].get("outputs", {}).get("parameters", {}) or {}).items():
            for sel in src.get("valueFromParameter", {}) and [src["valueFromParameter"]] or []:
                if sel.get("producerSubtask") not in tasks:
                    out.append(f"{dag_name}: output {name!r} comes from missing task {sel.get('producerSubtask')!r}")
        for name, src in (dag["dag"].get("outputs", {}).get("artifacts", {}) or {}).items():
            for sel in src.get("artifactSelectors", []) or []:
                if sel.get("producerSubtask") not in tasks:
                    out.append(f"{dag_name}: output {name!r} comes from missing task {sel.get('producerSubtask')!r}")
    return out


def _producer_output(where, src, tasks, components, kind, key_field) -> list[str]:
    producer = src.get("producerTask")
    if producer not in tasks:
        return [f"{where}: reads an output of {producer!r}, which is not in the same DAG"]
    comp = components.get(tasks[producer]["componentRef"]["name"], {})
    key = src.get(key_field)
    if key not in _outputs(comp, kind):
        return [f"{where}: task {producer!r} has no output {kind[:-1]} {key!r}"]
    return []


def _parameter_source(where, name, src, params, tasks, components, given) -> list[str]:
    if "componentInputParameter" in src:
        if src["componentInputParameter"] not in params:
            return [f"{where}: input {name!r} reads {src['componentInputParameter']!r}, "
                    "which its parent DAG does not have"]
    elif "taskOutputParameter" in src:
        return _producer_output(where, src["taskOutputParameter"], tasks, components, "parameters",
                                "outputParameterKey")
    elif "taskFinalStatus" in src:
        if src["taskFinalStatus"].get("producerTask") not in tasks:
            return [f"{where}: final status of missing task {src['taskFinalStatus'].get('producerTask')!r}"]
    elif "runtimeValue" in src:
        return [f"{where}: input {name!r} uses {{{{$.inputs.parameters['{ref}']}}}}, which the task is not given"
                for text in _strings(src["runtimeValue"]) for ref in _PLACEHOLDER.findall(text) if ref not in given]
    return []


def _artifact_source(where, name, src, artifacts, tasks, components) -> list[str]:
    if "componentInputArtifact" in src:
        if src["componentInputArtifact"] not in artifacts:
            return [f"{where}: input artifact {name!r} reads {src['componentInputArtifact']!r}, "
                    "which its parent DAG does not have"]
    elif "taskOutputArtifact" in src:
        return _producer_output(where, src["taskOutputArtifact"], tasks, components, "artifacts", "outputArtifactKey")
    return []


def check_documents(docs: list[dict]) -> list[str]:
    """A compiled file's documents: KFP IR (+ platform spec) or Pipeline/PipelineVersion."""
    out = []
    if docs and "pipelineInfo" in docs[0]:
        return problems(docs[0], docs[1] if len(docs) > 1 else None)
    for doc in docs:
        if doc.get("kind") == "PipelineVersion":
            out += problems(doc["spec"]["pipelineSpec"], {"platforms": doc["spec"].get("platformSpec", {}).get(
                "platforms", {})} if doc["spec"].get("platformSpec") else None)
    return out
