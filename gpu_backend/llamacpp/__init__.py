"""The llama.cpp backend: GGUF models on llama.cpp's kernels behind ``decoding.backend.Backend``
(``backend``), the binding (``model``), the draft tree as llama.cpp sequences (``layout``), the
auto-configuration's measurements (``costs``) and loading a pair (``pair``)."""
