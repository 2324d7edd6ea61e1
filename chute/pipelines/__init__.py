"""pipelines: the Pipeline (order, DDP partition, exact resume, prefetch and staging) around
field producers (image decoders, video clips, audio, array gathers, columns, metadata), with
per-field typed options and one batching contract."""

from chute.pipelines._common._distributed import default_threads, physical_cores
from chute.pipelines._common._options import image_size_of
from chute.pipelines._common._request import BatchRequest, ParamSource
from chute.pipelines._fields import default_fields
from chute.pipelines._mix import MixedDataset, MixRef, MixSampler, mix
from chute.pipelines._pipeline import Pipeline, PipelineStats
from chute.pipelines._torch_data import PipelineDataset
from chute.pipelines.producers._candidates import dali_import_error
from chute.pipelines.producers._contract import (
    EpochReader,
    ImageSpec,
    Output,
    Producer,
    ProducerSpec,
    SequentialEpoch,
)
from chute.pipelines.producers._registry import FAMILIES, PRODUCERS, create_producer, family_of
from chute.pipelines.producers.audio._options import AudioOptions, FbankOptions
from chute.pipelines.producers.image._auto import tune_dataset
from chute.pipelines.producers.image._crops import CropConfig, CropParams, crop_boxes
from chute.pipelines.producers.image._options import ImageOptions
from chute.pipelines.producers.image._views import View, view_seed
from chute.pipelines.producers.image._warmup import warm_cpu_decoder
from chute.pipelines.producers.stored._options import ArrayOptions, Lookup
from chute.pipelines.producers.video._auto import tune_video
from chute.pipelines.producers.video._batching import Buckets
from chute.pipelines.producers.video._clips import spread_clips
from chute.pipelines.producers.video._cpu import VideoProducer
from chute.pipelines.producers.video._nvdec import nvdec_import_error
from chute.pipelines.producers.video._options import VideoOptions
from chute.pipelines.producers.video._output import to_output as clip_to_output
from chute.pipelines.sampling._batching import Batching, FixedBatches, MaxDuration
from chute.pipelines.sampling._order import EpochOrder
from chute.pipelines.sampling._partition import Partition
from chute.pipelines.sampling._plan import BatchPlan
from chute.pipelines.sampling._windows import ShardWindows

__all__ = [
    "default_threads",
    "physical_cores",
    "ArrayOptions",
    "AudioOptions",
    "FbankOptions",
    "BatchPlan",
    "BatchRequest",
    "Batching",
    "Buckets",
    "CropConfig",
    "CropParams",
    "dali_import_error",
    "nvdec_import_error",
    "EpochOrder",
    "EpochReader",
    "FAMILIES",
    "FixedBatches",
    "ImageOptions",
    "ImageSpec",
    "Lookup",
    "MaxDuration",
    "MixSampler",
    "MixedDataset",
    "MixRef",
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
    "ShardWindows",
    "VideoOptions",
    "VideoProducer",
    "View",
    "clip_to_output",
    "create_producer",
    "crop_boxes",
    "default_fields",
    "family_of",
    "image_size_of",
    "mix",
    "spread_clips",
    "tune_dataset",
    "tune_video",
    "view_seed",
    "warm_cpu_decoder",
]
