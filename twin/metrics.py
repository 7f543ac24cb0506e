"""The twin's Prometheus series, named as vLLM names them, in a registry owned by one app."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80)


class TwinMetrics:
    """vLLM's ``vllm:*`` families with the ``model_name`` label."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = ["model_name"]
        r = self.registry
        self.prompt_tokens = Counter(
            "vllm:prompt_tokens", "Prefill tokens processed.", labels, registry=r
        ).labels(model_name)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Generation tokens processed.", labels, registry=r
        ).labels(model_name)
        self.prefix_cache_queries = Counter(
            "vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels,
            registry=r,
        ).labels(model_name)  # fmt: skip
        self.prefix_cache_hits = Counter(
            "vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache.", labels,
            registry=r,
        ).labels(model_name)  # fmt: skip
        self.request_success = Counter(
            "vllm:request_success", "Finished requests.", [*labels, "finished_reason"], registry=r
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Requests in the decode batch.", labels, registry=r
        ).labels(model_name)
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Requests waiting for a batch slot.", labels, registry=r
        ).labels(model_name)
        self.e2e_latency = Histogram(
            "vllm:e2e_request_latency_seconds", "End-to-end request latency.", labels,
            buckets=_LATENCY_BUCKETS, registry=r,
        ).labels(model_name)  # fmt: skip
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "Time to first token.", labels,
            buckets=_LATENCY_BUCKETS, registry=r,
        ).labels(model_name)  # fmt: skip
        # vLLM's CacheConfig as an info gauge (always 1): `doctor` reads prefix caching from it.
        Gauge(
            "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
            ["block_size", "enable_prefix_caching", "engine"], registry=r,
        ).labels("16", "True", "0").set(1)  # fmt: skip
        self.model_name = model_name

    def finished(self, reason: str) -> None:
        self.request_success.labels(self.model_name, reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
