"""The LLM layer: chat models from settings (``chat``) and a scripted offline model (``scripted``)."""
