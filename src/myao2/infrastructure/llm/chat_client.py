"""The openai client as strands' `OpenAIModel` uses it, without the SDK's per-call work that changes nothing.

`chat.completions.create` of the SDK walks the whole request (every message of the
prompt) against its TypedDicts before sending it, and builds a pydantic model of
every streamed chunk: together most of the CPU an answer spends in the SDK, paid on
the event loop, per token. Strands builds the request as plain JSON and reads chunks
by attribute, so here the request goes out as given and a chunk is a plain view of
its JSON. The sending itself is the SDK's (`AsyncOpenAI.request`, as `post` calls it):
the same retries, timeouts, errors and stream handling. It is handed the whole URL and
its options, made once per client where `post` made them at every call (given a path,
the SDK merges it with its base URL: two URL parses and a copy per call).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from myao2.domain.conversation import clean_text

if TYPE_CHECKING:
    import openai
    from openai._types import RequestOptions

_OPTIONS = {"extra_headers": "headers", "extra_query": "params", "extra_body": "extra_json", "timeout": "timeout"}
"""The SDK's per-call options among `create`'s arguments, and their names in `RequestOptions`."""


class LeanChatClient:
    """An `AsyncOpenAI` whose `chat.completions.create` sends the request as given and streams `Fields` chunks;
    everything else is the wrapped client's."""

    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self._client = client
        self.chat = _Chat(client)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


class _Chat:
    def __init__(self, client: openai.AsyncOpenAI) -> None:
        self.completions = _Completions(client)


class _Completions:
    def __init__(self, client: openai.AsyncOpenAI) -> None:
        from openai._models import FinalRequestOptions
        from openai.types.chat import ChatCompletion

        from myao2.infrastructure.llm.fields_stream import FieldsStream

        self._client = client
        base = client.base_url  # with the trailing slash the SDK ensures
        url = str(base.copy_with(raw_path=base.raw_path + b"chat/completions"))
        self._options = FinalRequestOptions.construct(method="post", url=url, json_data=None, content=None, files=None)
        """The options `AsyncOpenAI.post` makes at every call (deep-copying their defaults), made once and copied."""
        self._completion = ChatCompletion
        self._stream = FieldsStream

    async def create(self, **request: Any) -> Any:
        """The completion of `request` (the SDK's keyword arguments), a stream of `Fields` chunks when it streams."""
        options: RequestOptions = {}
        for argument, option in _OPTIONS.items():
            if request.get(argument) is not None:
                options[option] = request[argument]  # type: ignore[literal-required]
            request.pop(argument, None)
        try:
            return await self._post(request, options)
        except UnicodeEncodeError:
            # Raised before anything is sent: text UTF-8 cannot hold, a lone surrogate from a model that escaped
            # half an emoji in its tool arguments (JSON decodes "\ud83c" to one), echoed back in the call or its
            # result. The request goes out with it replaced, as text from Slack is where it enters.
            return await self._post(cleaned(request), options)

    async def _post(self, request: dict[str, Any], options: RequestOptions) -> Any:
        """What `AsyncOpenAI.post` does: the SDK's request, with options of its own (their mutable defaults too)."""
        own = {"json_data": request, "params": {}, "security": dict(self._options.security), **options}
        sent = self._options.model_copy(update=own)
        if not request.get("stream"):
            return await self._client.request(self._completion, sent)
        return await self._client.request(object, sent, stream=True, stream_cls=self._stream)


class Fields:
    """A JSON object read by attribute, as the SDK's models are: nested objects are `Fields` too, and a
    field the object lacks reads as None.

    Its fields are made attributes, once, as it arrives: strands reads a chunk's choice and delta several times
    each, and a view made at every read cost about twice as much. The object given (JSON parsed for it alone) is
    taken as the attributes themselves, its objects replaced by their views: no copy, and no call per field.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        for key, value in data.items():
            kind = type(value)
            if kind is dict:
                data[key] = Fields(value)
            elif kind is list:
                data[key] = [as_fields(item) for item in value]
        self.__dict__ = data

    def __getattr__(self, name: str) -> Any:
        """A field the object lacks (the fields it has are attributes)."""
        if name.startswith("__"):
            raise AttributeError(name)
        return None

    def __repr__(self) -> str:
        return f"Fields({self.__dict__!r})"


def cleaned(value: Any) -> Any:
    """`value` (JSON) with its strings cleaned as text from Slack is (`clean_text`)."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {cleaned(key): cleaned(item) for key, item in value.items()}
    if isinstance(value, list):
        return [cleaned(item) for item in value]
    return value


def as_fields(value: Any) -> Any:
    """`value` (JSON) with its objects made `Fields` (in place)."""
    kind = type(value)
    if kind is dict:
        return Fields(value)
    if kind is list:
        return [as_fields(item) for item in value]
    return value
