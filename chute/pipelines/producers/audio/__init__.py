"""chute.pipelines.producers.audio."""
