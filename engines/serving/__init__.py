"""The embedded engine's OpenAI-compatible server (vLLM response shapes) over transformers on CPU."""
