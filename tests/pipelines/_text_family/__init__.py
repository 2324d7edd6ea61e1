"""A test-only modality, "text" (UTF-8 bytes delivered as padded code units), written the way a
new modality is added: one folder with its options, family and producer, plus one FAMILIES and
one PRODUCERS entry (registered by the test, tests/pipelines/test_new_modality.py)."""
