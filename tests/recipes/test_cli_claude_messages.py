"""What Claude Code 2.1.x sends that plain Anthropic clients do not, translated by the gateway: its environment as a
`system` message inside `messages` (kept in place as a chat system message)."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import BadRequest
from gateway.protocols.anthropic import ADAPTER

ENVIRONMENT = "# Environment\nYou have been invoked in the following environment:\n - Primary working directory: /w"


def to_chat(messages: list) -> dict:
    request = {"model": "claude-opus-5-5", "max_tokens": 64, "system": "You are Claude Code.", "messages": messages}
    return ADAPTER.to_chat(ADAPTER.parse(orjson.dumps(request)), [])


@pytest.mark.parametrize("content", [ENVIRONMENT, [{"type": "text", "text": ENVIRONMENT}]])
def test_a_system_message_inside_messages_stays_in_place(content):
    chat = to_chat([{"role": "user", "content": "fix it"}, {"role": "system", "content": content}])
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "system"]
    assert chat["messages"][2]["content"] == ENVIRONMENT


def test_a_system_message_with_an_image_is_refused_naming_it():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    with pytest.raises(BadRequest) as refused:
        to_chat([{"role": "user", "content": "x"}, {"role": "system", "content": [image]}])
    assert refused.value.param == "messages[1].content[0]"
