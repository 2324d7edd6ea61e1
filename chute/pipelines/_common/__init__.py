"""What every folder of pipelines/ uses and nothing of theirs: batch requests, option checks and
slot sizes, stage timers, rank/world and device detection (docs/design.md, "Layers inside
pipelines/"). It imports no other folder of pipelines/, so none of them import in a circle."""
