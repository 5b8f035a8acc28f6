"""What the HTTP layer shares: the model holder, the generation scheduler and the served name."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from engines.serving.model_holder import ModelHolder
from engines.serving.protocol import RequestError
from engines.serving.scheduler import GenerationScheduler


@dataclass
class EngineState:
    """The running engine as seen by the routes."""

    holder: ModelHolder
    """Model, tokenizer, weights path and policy version."""
    scheduler: GenerationScheduler
    """The generation thread."""
    served_model_name: str
    """Name clients pass as `model`."""
    tool_call_parse_failures: int = 0
    """Tool-call blocks the engine could not parse (answered as text) since it started; on /health."""
    _token_texts: dict[int, str] = field(default_factory=dict)

    def count_tool_call_parse_failures(self, count: int) -> None:
        """Adds unparseable tool-call blocks of one answer to the engine's counter."""
        self.tool_call_parse_failures += count

    def token_text(self, token_id: int) -> str:
        """The text of one token as vLLM reports it in logprobs (special tokens included)."""
        text = self._token_texts.get(token_id)
        if text is None:
            text = self.holder.tokenizer.decode([token_id], skip_special_tokens=False)
            self._token_texts[token_id] = text
        return text

    def check_model_name(self, requested: str | None) -> None:
        """Refuses requests for another model with 404, as vLLM does."""
        if requested not in (None, self.served_model_name):
            raise RequestError(f"The model `{requested}` does not exist; this engine serves "
                               f"`{self.served_model_name}`.", param="model", status_code=404,
                               error_type="NotFoundError")


def engine_state(request: Request) -> EngineState:
    """FastAPI dependency: the engine state stored on the app."""
    return request.app.state.engine
