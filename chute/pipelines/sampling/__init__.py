"""chute.pipelines.sampling."""
