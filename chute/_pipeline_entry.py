"""`chute.Pipeline`: the Pipeline, with backend="auto" decided by chute's autotuner.

chute.pipelines does not import the autotuner (see chute/pipelines/_resolve.py); loading the
public name through this module registers it first, so `chute.Pipeline(..., backend="auto")`
measures on a GPU machine.
"""

from __future__ import annotations

from chute import _auto_backend, _auto_video  # noqa: F401  (register the "auto" resolvers)
from chute.pipelines import Pipeline

__all__ = ["Pipeline"]
