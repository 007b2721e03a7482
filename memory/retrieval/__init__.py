"""Finding rows by meaning and by words: embeddings, fusion, time phrases.

``embeddings`` (the embedder protocol, MiniLM on torch, the batching cache) and
``onnx_minilm`` (the int8 ONNX backend) turn text into vectors; ``time_phrases``
turns "last week" into a time range. The tables and the toolbox rank with these.
"""
