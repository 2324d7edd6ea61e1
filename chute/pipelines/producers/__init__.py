"""chute.pipelines.producers."""
