"""chute.pipelines.producers.stored."""
