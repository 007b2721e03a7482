"""One turn's prompt: token counting, the rendered sections, the budgeted builder."""
