"""infer: replicated, batched, pipelined inference (docs/design.md, "Inference pipelines").

A pipeline is a list of stages (a video loader, a model, any callable); each stage runs in its
own spawned processes with dynamic batching, bounded queues between stages, and tensors moving
through shared memory. Clients offer Poisson or bulk load and a report summarises latency,
throughput and where the time went.
"""

from chute._lazy import lazy_attributes

# public name -> module that defines it
_LAZY = {
    "StageConfig": "chute.infer._config",
    "InferConfig": "chute.infer._config",
    "load_config": "chute.infer._config",
    "InferServer": "chute.infer._server",
    "StartupError": "chute.infer._replica_handle",
    "InferRequest": "chute.infer._request",
    "StageTimes": "chute.infer._request",
    "VideoClipLoader": "chute.infer._video_loader",
    "ModuleRunner": "chute.infer._module_runner",
    "run_poisson": "chute.infer._clients",
    "run_bulk": "chute.infer._clients",
    "RunResult": "chute.infer._clients",
    "summarize": "chute.infer._report",
    "format_report": "chute.infer._report",
    "search": "chute.infer._search",
    "format_trials": "chute.infer._search",
}

__all__ = list(_LAZY)

__getattr__, __dir__ = lazy_attributes(__name__, _LAZY, globals(), __all__)
