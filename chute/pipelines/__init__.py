"""pipelines: order, DDP partition, exact resume, prefetch and staging around field producers
(image decoders, array gathers, columns, metadata)."""

from chute.pipelines._pipeline import Pipeline, PipelineStats
from chute.pipelines._request import BatchRequest, CropParams, ParamSource
from chute.pipelines._torch_data import PipelineDataset
from chute.pipelines.producers._contract import (
    EpochReader,
    ImageSpec,
    Output,
    Producer,
    ProducerSpec,
    SequentialEpoch,
)
from chute.pipelines.producers._registry import PRODUCERS, create_producer
from chute.pipelines.producers.image._crops import CropConfig, crop_boxes
from chute.pipelines.sampling._order import EpochOrder
from chute.pipelines.sampling._partition import Partition
from chute.pipelines.sampling._plan import BatchPlan

__all__ = [
    "BatchPlan",
    "BatchRequest",
    "CropConfig",
    "CropParams",
    "EpochOrder",
    "EpochReader",
    "ImageSpec",
    "Output",
    "PRODUCERS",
    "ParamSource",
    "Partition",
    "Pipeline",
    "PipelineDataset",
    "PipelineStats",
    "Producer",
    "ProducerSpec",
    "SequentialEpoch",
    "create_producer",
    "crop_boxes",
]
