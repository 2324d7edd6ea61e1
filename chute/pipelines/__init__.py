"""pipelines: order, DDP partition, exact resume, prefetch and staging around decoders."""

from chute.pipelines._backend import BackendSpec, create_backend
from chute.pipelines._crops import CropConfig, crop_boxes
from chute.pipelines._order import EpochOrder
from chute.pipelines._partition import Partition
from chute.pipelines._pipeline import Pipeline, PipelineStats
from chute.pipelines._plan import BatchPlan

__all__ = [
    "BatchPlan",
    "BackendSpec",
    "CropConfig",
    "EpochOrder",
    "Partition",
    "Pipeline",
    "PipelineStats",
    "create_backend",
    "crop_boxes",
]
