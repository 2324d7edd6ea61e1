"""chute.pipelines.producers.image."""
