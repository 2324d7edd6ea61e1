"""chute.pipelines.producers._dali."""
