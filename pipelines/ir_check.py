"""Reads a compiled pipeline the way the KFP v2 driver will, before any cluster does.

The driver resolves each task's inputs from its *enclosing* DAG's inputs (a
`componentInputParameter` the parent does not declare fails the task: "parent DAG does
not have input parameter"), platform settings (PVC, Secret names) from the same parent
DAG, and `{{$.inputs.parameters[...]}}` placeholders in the executor (resources, image)
from the task's own inputs. The SDK can compile IR that breaks these rules (kubeflow/
pipelines #11957, #12617), so `llmops compile` runs `problems` on everything it writes,
and `cache_problems`: cached tasks whose key the driver would build without what they read.
"""

from __future__ import annotations

import json
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
    k8s = (platform or {}).get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {}).get("executors", {})
    out: list[str] = []
    dags = {"root": spec["root"], **{n: c for n, c in components.items() if "dag" in c}}
    for dag_name, dag in dags.items():
        tasks = dag["dag"].get("tasks", {})
        for task_name, task in tasks.items():
            where = f"{dag_name}/{task_name}"
            ref = task.get("componentRef", {}).get("name")
            comp = components.get(ref)
            if comp is None:
                out.append(f"{where}: component {ref!r} does not exist")
                continue
            out += _task_problems(where, dag_name, dag, task, comp, components)
            label = comp.get("executorLabel")
            if label is None:
                continue
            if label not in executors:
                out.append(f"{where}: executor {label!r} does not exist")
                continue
            given_p = task.get("inputs", {}).get("parameters", {}) or {}
            out += _executor_problems(where, dag_name, dag, comp, label, executors[label], k8s.get(label, {}), given_p)
        out += _dag_output_problems(dag_name, dag)
    return out


def _task_problems(where: str, dag_name: str, dag: dict, task: dict, comp: dict, components: dict) -> list[str]:
    """A task's inputs (each source resolvable, every required one given), its
    dependencies and its condition."""
    params, artifacts = _declared(dag, "parameters"), _declared(dag, "artifacts")
    tasks = dag["dag"].get("tasks", {})
    ref = task.get("componentRef", {}).get("name")
    given_p = task.get("inputs", {}).get("parameters", {}) or {}
    given_a = task.get("inputs", {}).get("artifacts", {}) or {}
    out: list[str] = []
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
    return out


def _executor_problems(
    where: str, dag_name: str, dag: dict, comp: dict, label: str, executor: dict, k8s: dict, given_p: dict
) -> list[str]:
    """The placeholders the executor's command uses, and what its Kubernetes settings read."""
    params = _declared(dag, "parameters")
    tasks = dag["dag"].get("tasks", {})
    out: list[str] = []
    for text in _strings(executor):
        for name in _PLACEHOLDER.findall(text):
            if name not in given_p and name not in _declared(comp, "parameters"):
                out.append(f"{where}: {label} uses {{{{$.inputs.parameters['{name}']}}}}, which the task is not given")
    for name in _walk(k8s, "componentInputParameter"):
        if name not in params:
            out.append(
                f"{where}: kubernetes setting of {label} reads {name!r}, which its parent DAG {dag_name} does not have"
            )
    for src in _walk(k8s, "taskOutputParameter"):
        if src.get("producerTask") not in tasks:
            out.append(
                f"{where}: kubernetes setting of {label} reads task {src.get('producerTask')!r}, "
                f"which is not in {dag_name}"
            )
    return out


def _dag_output_problems(dag_name: str, dag: dict) -> list[str]:
    """A DAG's outputs each come from one of its tasks."""
    tasks = dag["dag"].get("tasks", {})
    out: list[str] = []
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
            return [
                f"{where}: input {name!r} reads {src['componentInputParameter']!r}, which its parent DAG does not have"
            ]
    elif "taskOutputParameter" in src:
        return _producer_output(
            where, src["taskOutputParameter"], tasks, components, "parameters", "outputParameterKey"
        )
    elif "taskFinalStatus" in src:
        if src["taskFinalStatus"].get("producerTask") not in tasks:
            return [f"{where}: final status of missing task {src['taskFinalStatus'].get('producerTask')!r}"]
    elif "runtimeValue" in src:
        return [
            f"{where}: input {name!r} uses {{{{$.inputs.parameters['{ref}']}}}}, which the task is not given"
            for text in _strings(src["runtimeValue"])
            for ref in _PLACEHOLDER.findall(text)
            if ref not in given
        ]
    return []


def _artifact_source(where, name, src, artifacts, tasks, components) -> list[str]:
    if "componentInputArtifact" in src:
        if src["componentInputArtifact"] not in artifacts:
            return [
                f"{where}: input artifact {name!r} reads {src['componentInputArtifact']!r}, "
                "which its parent DAG does not have"
            ]
    elif "taskOutputArtifact" in src:
        return _producer_output(where, src["taskOutputArtifact"], tasks, components, "artifacts", "outputArtifactKey")
    return []


def check_documents(docs: list[dict]) -> list[str]:
    """A compiled file's documents: KFP IR (+ platform spec) or Pipeline/PipelineVersion."""
    out = []
    if docs and "pipelineInfo" in docs[0]:
        return problems(docs[0], docs[1] if len(docs) > 1 else None) + cache_problems(docs[0])
    for doc in docs:
        if doc.get("kind") == "PipelineVersion":
            out += cache_problems(doc["spec"]["pipelineSpec"])
            out += problems(
                doc["spec"]["pipelineSpec"],
                {"platforms": doc["spec"].get("platformSpec", {}).get("platforms", {})}
                if doc["spec"].get("platformSpec")
                else None,
            )
    return out


# --- Cache keys -------------------------------------------------------------------------
# The driver keys a cached task by its input parameter values, its input artifacts' *names*,
# its image, command and PVC names (api/v2alpha1/cache_key.proto). An importer with
# reimport off hands out the same artifact name for a URI whatever bytes are there now, and
# a value with a per-run placeholder is a new key every run.
_PER_RUN = re.compile(r"\{\{\$\.pipeline_(job|task)_[a-z_]+\}\}")


def _parents(spec: dict) -> dict[str, tuple[str, dict]]:
    """DAG component -> (the DAG it is called from, the calling task)."""
    components = spec.get("components", {})
    out = {}
    for dag_name, dag in {"root": spec["root"], **{n: c for n, c in components.items() if "dag" in c}}.items():
        for task in dag["dag"].get("tasks", {}).values():
            ref = task.get("componentRef", {}).get("name")
            if "dag" in components.get(ref, {}):
                out[ref] = (dag_name, task)
    return out


def _origin(spec: dict, parents: dict, dag_name: str, src: dict, kind: str) -> tuple:
    """Where an input really comes from: ("pipeline", name), ("task", dag, task), ("constant", value)."""
    inner = "componentInputParameter" if kind == "parameters" else "componentInputArtifact"
    output = "taskOutputParameter" if kind == "parameters" else "taskOutputArtifact"
    while inner in src:
        name = src[inner]
        if dag_name == "root":
            return ("pipeline", name)
        dag_name, caller = parents[dag_name]
        src = (caller.get("inputs", {}).get(kind, {}) or {}).get(name, {})
    if output in src:
        return ("task", dag_name, src[output].get("producerTask"))
    if "runtimeValue" in src:
        return ("constant", json.dumps(src["runtimeValue"]))
    return ("unknown",)


def cache_problems(spec: dict) -> list[str]:
    """Cached tasks whose key would not change when what they read changes (a stale result
    reused), or would change every run (never reused); one line each."""
    components = spec.get("components", {})
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    parents = _parents(spec)
    dags = {"root": spec["root"], **{n: c for n, c in components.items() if "dag" in c}}

    def task_of(origin):
        return dags[origin[1]]["dag"]["tasks"][origin[2]]

    def importer(task) -> bool:
        label = components.get(task["componentRef"]["name"], {}).get("executorLabel")
        return "importer" in executors.get(label, {})

    def origins(dag_name, task, kind):
        return {
            name: _origin(spec, parents, dag_name, src, kind)
            for name, src in (task.get("inputs", {}).get(kind, {}) or {}).items()
        }

    out = []
    for dag_name, dag in dags.items():
        for task_name, task in dag["dag"].get("tasks", {}).items():
            if not task.get("cachingOptions", {}).get("enableCache") or importer(task):
                continue
            where = f"{dag_name}/{task_name}"
            params = origins(dag_name, task, "parameters")
            for name, origin in params.items():
                if origin[0] == "constant" and _PER_RUN.search(origin[1]):
                    out.append(f"{where}: input {name!r} changes every run ({origin[1]}), so the cache never hits")
            for name, origin in origins(dag_name, task, "artifacts").items():
                if origin[0] != "task" or not importer(task_of(origin)):
                    continue
                # pinned by a root: an uncached task read the same artifact and handed its value on,
                # or the importer's metadata and this task take the same pipeline parameter
                source = task_of(origin)
                pinned = {
                    o[1]
                    for n, o in origins(origin[1], source, "parameters").items()
                    if n == "metadata" and o[0] == "pipeline"
                } & {o[1] for o in params.values() if o[0] == "pipeline"}
                for o in params.values():
                    if o[0] == "task":
                        reader = task_of(o)
                        if (
                            not reader.get("cachingOptions", {}).get("enableCache")
                            and origin in origins(o[1], reader, "artifacts").values()
                        ):
                            pinned.add(o[2])
                if not pinned:
                    out.append(
                        f"{where}: input {name!r} is imported ({source['taskInfo']['name']}): its artifact "
                        "name stays the same when the bytes at its URI change, so the cached result would "
                        "be reused; give the task the artifact's root"
                    )
    return out
