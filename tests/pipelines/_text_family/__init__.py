"""A test-only modality, "text" (UTF-8 bytes delivered as padded code units), written the way a
new modality is added: one folder with its options, family, producers, sample unit (words) and
auto hook, plus one FAMILIES entry (registered by the test, tests/pipelines/test_new_modality.py).
Its producers are listed by the family itself, so no other registry entry is needed."""
