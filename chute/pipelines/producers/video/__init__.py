"""chute.pipelines.producers.video."""
