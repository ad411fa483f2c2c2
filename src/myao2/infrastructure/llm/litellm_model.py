"""strands' `LiteLLMModel` (the `litellm` provider), sending what UTF-8 cannot hold as the lean client does.

A model may escape half an emoji in its tool arguments ("\\ud83c", which JSON decodes to a
lone surrogate); echoed back in the next request, it cannot be encoded. The lean chat
client sends such a request again cleaned; litellm reports the encoder's error as a
server's (InternalServerError, after its own retries), which no resend can tell apart,
so here a request UTF-8 cannot hold is cleaned the same way before it is sent.
"""

from __future__ import annotations

import json
from typing import Any

from strands.models.litellm import LiteLLMModel

from myao2.infrastructure.llm.chat_client import cleaned


class EncodableLiteLLMModel(LiteLLMModel):
    """`LiteLLMModel` whose requests (answers and structured answers alike) always encode as UTF-8."""

    def format_request(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        request: dict[str, Any] = super().format_request(*args, **kwargs)
        try:
            json.dumps(request, ensure_ascii=False, default=str).encode()
        except UnicodeEncodeError:
            return dict(cleaned(request))
        return request
