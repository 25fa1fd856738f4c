"""The deploy stage's one config model: repository layout, canary steps, SLA bounds,
analysis, load, drills and the target. Defaults suit the bundled demo model on CPU."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kfp_llmops.components.common.config import StageConfig


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class VllmSettings(_Section):
    """vLLM's engine for `engine: vllm` (its engine arguments of the same names)."""

    dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights and activations; float32 is what evaluation judged on CPU."
    )
    max_num_seqs: int = Field(16, ge=1, description="Requests generated together (the running batch's bound).")
    kv_cache_gib: float = Field(1.0, gt=0, description="Memory for the paged KV cache.")
    prefix_caching: bool = Field(True, description="Reuse the KV cache of a prompt prefix seen before.")
    compile: bool = Field(
        False, description="torch.compile the model (slower start, faster steps); false: eager (enforce_eager)."
    )
    cpu_cores: str = Field(
        "",
        pattern=r"^([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?$",
        description="CPU engine: the cores its threads are bound to (e.g. 0-3); empty: every core this process "
        "may use.",
    )


class Serving(_Section):
    engine: Literal["auto", "vllm", "transformers"] = Field(
        "auto",
        description="vllm: vLLM's async engine inside Triton (continuous batching, paged KV cache); transformers: "
        "the project's generation routine, a batch at a time; auto: vllm where it is installed and runs the "
        "model (vLLM's CPU attention takes a few head sizes), else transformers. Recorded resolved in serving.json.",
    )
    vllm: VllmSettings = Field(default_factory=VllmSettings)
    model_name: str = Field("llm", pattern=r"^[A-Za-z0-9_.-]+$")
    instance_kind: Literal["KIND_CPU", "KIND_GPU"] = "KIND_CPU"
    instance_count: int = Field(1, ge=1)
    max_batch_size: int = Field(8, ge=1)
    max_queue_delay_us: int = Field(2000, ge=0, description="Dynamic batching window.")
    max_new_tokens: int = Field(
        256,
        ge=1,
        description="The most new tokens a request may ask for. A request "
        "that does not say gets the blessed decoding's bound (serving.json); every "
        "answer ends at the model's EOS or a stop string.",
    )
    max_waiting: int = Field(
        64,
        ge=0,
        description="Requests the OpenAI front end admits beyond vllm.max_num_seqs running ones; more get "
        "a 429 with Retry-After.",
    )
    key_file: str = Field(
        "/var/run/secrets/kfp-llmops/watermark/key",
        description="Where model.py reads the watermark key (a mounted Secret).",
    )


class FrontDoor(_Section):
    """What one client may send and hold open at the serving front door (nginx, the
    OpenAI front end and the served model): bounds checked before a prompt is tokenized,
    so no single request or client can stall the server for the others."""

    max_body_bytes: int = Field(262144, ge=1024, description="A request body above this is a 413 at nginx.")
    body_timeout_s: int = Field(10, ge=1, description="A client that sends its headers or body slower is cut off.")
    connections_per_client: int = Field(
        32,
        ge=1,
        description="Open requests per client (its address at nginx; its API key too where keys are asked, and "
        "alone at the cluster's front door, where every client comes from the gateway); more get a 429.",
    )
    requests_per_s_per_client: int = Field(
        0,
        ge=0,
        description="Sustained request rate per client address; 0: none (an evaluation harness asks one question "
        "after another as fast as they are answered; connections_per_client bounds what a client holds).",
    )
    burst: int = Field(40, ge=0, description="Requests above that rate taken at once before the 429s start.")
    max_turns: int = Field(64, ge=1, description="Turns of a chat; more is a 400 before the template runs.")
    max_prompt_chars: int = Field(
        32768, ge=1, description="Characters of a prompt (all turns of a chat); more is a 400 before tokenizing."
    )
    api_keys_file: str = Field(
        "",
        description="Local target: the API keys clients must send (Authorization: Bearer), one per line. Empty: "
        "none asked where local.host is loopback; elsewhere a key is made in <state_dir>/api-keys.",
    )

    @property
    def prompt_limits(self) -> dict:
        """What the served model and the front end check a prompt against (serving.json)."""
        return {"max_turns": self.max_turns, "max_prompt_chars": self.max_prompt_chars}


class Watermark(_Section):
    """Serve with the watermark on. Its parameters are not set here: they are the ones
    verify_watermark verified (its `watermarked` output's metadata), so serving and
    verification cannot disagree."""

    enabled: bool = True


class Drill(_Section):
    """Rehearse a bad rollout: the version being deployed fails this fraction of requests,
    sleeps this long per batch before generating, before each batch's first token (a slow
    prefill) or before every token (slow decoding). Written into that version's serving.json."""

    failure_rate: float = Field(0.0, ge=0, le=1)
    added_latency_ms: float = Field(0.0, ge=0)
    first_token_latency_ms: float = Field(0.0, ge=0)
    token_latency_ms: float = Field(0.0, ge=0)
    seed: int = 0


class Gate(_Section):
    """Every bound a canary interval is judged by, and how many failed intervals roll back."""

    max_error_rate: float = Field(
        0.01,
        ge=0,
        le=1,
        description="The canary's failed share of an interval's requests.",
        json_schema_extra={"gate": "<="},
    )
    max_p99_ms: float = Field(
        5000.0, gt=0, description="The canary's client-side p99 request latency.", json_schema_extra={"gate": "<="}
    )
    error_rate_tolerance: float = Field(
        0.01,
        ge=0,
        le=1,
        description="Canary may exceed stable's error rate by this much.",
        json_schema_extra={"gate": "<="},
    )
    latency_tolerance: float = Field(
        0.5,
        ge=0,
        description="canary p99 <= stable p99 * (1 + tolerance); p95 under 100 requests per role, p50 under 20.",
        json_schema_extra={"gate": "<="},
    )
    min_requests: int = Field(
        20,
        ge=1,
        description="Canary requests an interval waits for (up to "
        "max_interval_s); none at all by then is a failed check.",
    )
    max_ttft_ms: float = Field(
        5000.0,
        gt=0,
        description="Time to first token (the server's histogram; p99, p95 under 100 observations, p50 under 20).",
        json_schema_extra={"gate": "<="},
    )
    max_itl_ms: float = Field(
        1000.0, gt=0, description="Inter-token latency, the same quantile rule.", json_schema_extra={"gate": "<="}
    )
    token_latency_slack_ms: float = Field(
        10.0,
        ge=0,
        description="A canary's TTFT or ITL within this much of "
        "stable's is never a regression (timer and scheduling noise).",
    )
    threshold: int = Field(
        2, ge=1, description="Failed checks before rollback (Flagger's threshold).", json_schema_extra={"gate": "<"}
    )


class Sequential(_Section):
    """Two one-sided SPRTs on single canary requests: one on errors, one on being slower
    than stable's p95 by more than the latency tolerance. Each rolls back as soon as its
    evidence is strong enough; together they falsely roll back at most `alpha` of
    healthy canaries (alpha/2 each)."""

    enabled: bool = True
    error_p0: float = Field(0.01, gt=0, lt=1, description="Error rate of a healthy canary (H0).")
    error_p1: float = Field(0.05, gt=0, lt=1, description="Error rate that must be caught (H1).")
    slow_p0: float = Field(0.05, gt=0, lt=1, description="Share of slow requests of a healthy canary.")
    slow_p1: float = Field(0.25, gt=0, lt=1, description="Share of slow requests that must be caught.")
    alpha: float = Field(0.01, gt=0, lt=0.5, description="False-rollback bound for the pair.")


class Traffic(_Section):
    concurrency: int = Field(4, ge=1, description="Fewest parallel clients.")
    max_concurrency: int = Field(
        16,
        ge=1,
        description="Most parallel clients when sizing the load so that the "
        "smallest step's canary share reaches gate.min_requests in interval_s.",
    )
    max_new_tokens: int = Field(8, ge=1, description="Short generations keep load requests cheap.")
    prompts: list[str] = Field(
        default_factory=lambda: [
            "Summarize the release notes.",
            "What is a canary rollout?",
            "Explain gradient accumulation.",
            "Write a haiku about GPUs.",
        ]
    )
    timeout_s: float = Field(30.0, gt=0)


class Smoke(_Section):
    """Real requests to the canary; the watermark is looked for in their answers, which
    are asked for as verify_watermark's detection texts are: an open-ended prompt, sampled,
    at least `max_new_tokens` long (the request's `min_new_tokens`)."""

    prompt: str = "Explain why checkpoints are hashed."
    max_new_tokens: int = Field(48, ge=1, description="Long enough for the watermark z-test.")
    temperature: float = Field(1.0, gt=0)
    requests: int = Field(3, ge=1, description="Watermark is judged on their concatenated tokens.")


# prometheus-operator's service in the monitoring namespace (kube-prometheus's layout).
CLUSTER_PROMETHEUS = "http://prometheus-operated.monitoring.svc:9090"


class MetricsSource(_Section):
    """Where each interval's Triton counters come from. The cluster targets always query
    Prometheus; the local target scrapes its servers directly unless told otherwise."""

    source: Literal["direct", "prometheus"] = Field(
        "direct", description="direct: scrape each local Triton server; prometheus: PromQL against prometheus_url."
    )
    prometheus_url: str = Field(
        "",
        description="Empty: the local target starts a Prometheus beside its servers; "
        "the cluster targets use " + CLUSTER_PROMETHEUS + ".",
    )
    stable_selector: str = Field(
        "",
        description='PromQL label matchers for stable\'s series; empty: job="stable" '
        '(local) or the stable revision\'s pods (cluster; "{revision}" is filled in).',
    )
    canary_selector: str = Field("", description="The same for the canary.")
    scrape_interval_s: float = Field(1.0, gt=0, description="Scrape interval of the local Prometheus.")
    freshness_timeout_s: float = Field(
        10.0,
        gt=0,
        description="How long to wait for a scrape newer than the interval's end before its counters are read.",
    )


class Lock(_Section):
    """One rollout per served model at a time: the local target holds an exclusive lock
    on the serving state, the cluster targets a coordination.k8s.io Lease named after the
    InferenceService, from before anything is read until the rollout ends."""

    on_busy: Literal["wait", "refuse"] = Field(
        "wait",
        description="wait: for the running rollout, then roll out "
        "against what it left as stable; refuse: give up at once.",
    )
    wait_s: float = Field(1800.0, ge=0, description="How long to wait for a running rollout before giving up.")
    lease_duration_s: int = Field(
        60,
        ge=5,
        description="Cluster: a Lease not renewed for this long is taken over "
        "(its holder died); the holder renews it every third of this.",
    )


class Local(_Section):
    state_dir: str = Field("", description="Where the promoted repositories live; default next to the outputs.")
    startup_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Per server, to load the model and bind its ports (started again on new ports if one was taken "
        "meanwhile); past it the error names where the model's threads were.",
    )
    host: str = Field(
        "127.0.0.1",
        description="The address nginx listens on; Triton, its OpenAI front ends and Prometheus listen on loopback "
        "only, whatever this says.",
    )


class Cluster(_Section):
    namespace: str = Field("", description="Empty: the namespace this pod runs in (common/k8s.py).")
    service_name: str = "llm"
    storage_uri: str = Field(
        "pvc://llmops-release/models",
        description="Where the repository is uploaded (under its root) and KServe reads it: pvc://, s3://, gs://.",
    )
    gateway_name: str = "llm-gateway"
    hostname: str = "llm.example.com"
    stable_service: str = "llm-stable"
    canary_service: str = "llm-canary"
    port: int = 8000
    mode: Literal["Serverless", "RawDeployment"] = Field(
        "Serverless", description="RawDeployment ignores canaryTrafficPercent: use target gateway there."
    )
    url: str = Field(
        "",
        description="Where the load generator and smoke tests reach the model; empty: the "
        "InferenceService's in-cluster address.",
    )
    pvc_mounts: dict[str, str] = Field(
        default_factory=lambda: {"llmops-release": "/mnt/release"},
        description="Where this pod mounts the claims a pvc:// storage_uri names.",
    )
    ready_timeout_s: float = Field(900.0, gt=0, description="How long to wait for the InferenceService to be Ready.")
    key_secret: str = Field("llmops-watermark-key", description="Secret holding the watermark key (never its value).")
    service_account: str = Field(
        "llmops-serving",
        description="The served model's ServiceAccount: its own, with no Role and no token mounted (manifests/rbac).",
    )
    cpu: str = "2"
    memory: str = "8Gi"
    gpus: int = Field(0, ge=0)
    front_door: bool = Field(
        True,
        description="The project's front end as the only door: the OpenAI API and Triton's answer endpoints, API "
        "keys from api_keys_secret. kserve: the InferenceService's transformer; gateway: a door Deployment per "
        "side (manifests/serving/gateway), the HTTPRoute's backends. The controller's smoke tests and load then "
        "go through the doors in the OpenAI API, with the first key of api_keys_file; without: Triton's generate "
        "extension.",
    )
    api_keys_secret: str = Field(
        "llmops-api-keys",
        description="Secret whose `keys` file holds the API keys clients send (Authorization: Bearer), one per line.",
    )
    api_keys_file: str = Field(
        "",
        description="With front doors: the key file whose first key the controller's own requests through the "
        "doors carry; empty: api_keys_secret's file where the compiled pipelines mount it.",
    )


class DeployConfig(StageConfig):
    @property
    def frontend_limits(self) -> tuple[int, int]:
        """(running, waiting) requests the OpenAI front end admits."""
        return self.serving.vllm.max_num_seqs, self.serving.max_waiting

    MOVED: ClassVar[dict[str, str]] = {
        **{f"sla.{key}": f"gate.{key}" for key in Gate.model_fields if key != "threshold"},
        "threshold": "gate.threshold",
    }

    target: Literal["local", "kserve", "gateway"] = "local"
    version: int = Field(0, ge=0, description="Model version; 0 means stable's + 1.")
    steps: list[int] = Field(default_factory=lambda: [5, 25, 50, 100])
    interval_s: float = Field(10.0, gt=0)
    max_interval_s: float = Field(
        60.0, gt=0, description="An interval with fewer than gate.min_requests canary requests extends up to this long."
    )
    allow_breaking_change: bool = False
    on_stale_baseline: Literal["refuse", "allow"] = Field(
        "refuse",
        description="The blessing records which "
        "production model it was judged against; refuse: deploy "
        "only while that model still serves (another release "
        "promoted since is named in the error); allow: deploy "
        "anyway, noted in the record.",
    )
    fail_on_rollback: bool = True
    serving: Serving = Field(default_factory=Serving)
    front_door: FrontDoor = Field(default_factory=FrontDoor)
    watermark: Watermark = Field(default_factory=Watermark)
    drill: Drill = Field(default_factory=Drill)
    gate: Gate = Field(default_factory=Gate)
    sequential: Sequential = Field(default_factory=Sequential)
    traffic: Traffic = Field(default_factory=Traffic)
    smoke: Smoke = Field(default_factory=Smoke)
    local: Local = Field(default_factory=Local)
    cluster: Cluster = Field(default_factory=Cluster)
    metrics: MetricsSource = Field(default_factory=MetricsSource)
    lock: Lock = Field(default_factory=Lock)

    @model_validator(mode="after")
    def _interval(self) -> DeployConfig:
        if self.max_interval_s < self.interval_s:
            raise ValueError("max_interval_s must be at least interval_s")
        return self

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: list[int]) -> list[int]:
        if not steps or any(not 0 < s <= 100 for s in steps) or steps != sorted(set(steps)):
            raise ValueError("steps must be increasing percentages in 1..100")
        if steps[-1] != 100:
            raise ValueError("the last step must be 100")
        return steps
