"""From a full window to a summary: the monitor, the summarisers, the write-back.

``monitor`` says how full the window is; ``summarizer`` (with a model) and
``extractive`` (without one) write the four-section summary whose shape
``summary_shape`` defines and ``summary_fit`` trims; ``writeback`` stores it and
marks its source rows, and expands it again.
"""
