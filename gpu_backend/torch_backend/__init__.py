"""The torch backend: transformers causal LMs behind ``decoding.backend.Backend`` (``backend``), their
KV caches (``kv``) and the two cache layouts of the draft tree (``layouts``).  The engine's default."""
