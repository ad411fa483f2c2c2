"""The reply agent's tools, registered once and shared by every reply.

A strands `Agent` registers its tools anew when it is made, and its registry
normalises and validates every tool's spec again each time it is asked for them:
four times per model call (the trace span's tool names, the token estimate, the
request, and the agent span). For a fixed set of tools that is the same work
every time; here it is done once.

Strands also deep-copies the specs before every model call, so that nothing the
call does changes them. Specs that cannot be changed need no copy: given
`read_only_specs`, they are read-only mappings whose deep copy is themselves (the
copy was about a third of the Python calls of a reply), in a list copied without
visiting each. Only for a model whose client sends the specs as given, as the
openai provider's does; another client
(litellm) may adjust them in place. That model (`SpecCountingModel`) estimates
each read-only spec's tokens once, where strands serialised every spec again
before every model call for its input token estimate.
"""

from __future__ import annotations

from typing import Any

from strands.models.openai import OpenAIModel
from strands.tools.registry import ToolRegistry
from strands.types.content import Messages, SystemContentBlock
from strands.types.tools import ToolSpec


class FixedToolRegistry(ToolRegistry):
    """A `ToolRegistry` whose tool specs are normalised once (again only if the registered tools change).

    The specs it returns are shared: callers must not change them (strands' event
    loop gives the model deep copies); with `read_only_specs` they cannot.
    """

    def __init__(self, tools: list[Any], *, read_only_specs: bool = False) -> None:
        super().__init__()
        self.process_tools(tools)
        self._read_only = read_only_specs
        self._registered: tuple[Any, ...] = ()
        self._config: dict[str, Any] = {}

    def get_all_tools_config(self) -> dict[str, Any]:
        registered = (*self.registry.values(), *self.dynamic_tools.values())
        if registered != self._registered:  # tools compared by identity
            config = super().get_all_tools_config()
            self._config = {name: read_only(spec) for name, spec in config.items()} if self._read_only else config
            self._registered = registered
        return dict(self._config)

    def get_all_tool_specs(self) -> list[ToolSpec]:
        specs = super().get_all_tool_specs()
        return ReadOnlySpecs(specs) if self._read_only else specs


class ReadOnlyJson(dict):  # type: ignore[type-arg]
    """A JSON object nothing can change (a `dict` still, for whoever serialises it); a deep copy of it is itself."""

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlyJson:
        return self

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("a tool spec is read-only")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]


class ReadOnlySpecs(list):  # type: ignore[type-arg]
    """A list of read-only tool specs: its deep copy is a new list of the same specs (they cannot change)."""

    def __deepcopy__(self, memo: dict[int, Any]) -> ReadOnlySpecs:
        return ReadOnlySpecs(self)


def read_only(value: Any) -> Any:
    """`value` (JSON) with its objects made `ReadOnlyJson` and its arrays tuples."""
    if isinstance(value, dict):
        return ReadOnlyJson({key: read_only(item) for key, item in value.items()})
    if isinstance(value, list):
        return tuple(read_only(item) for item in value)
    return value


class SpecCountingModel(OpenAIModel):
    """Strands' `OpenAIModel` that estimates each read-only tool spec's tokens once (`read_only`: it cannot change).

    Strands estimates a model call's input tokens before it (for hooks and context managers), serialising each
    tool spec to JSON again. The estimate is the same: strands' own of the messages, plus its own of each spec.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._spec_tokens: dict[int, tuple[ReadOnlyJson, int]] = {}

    async def count_tokens(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        system_prompt_content: list[SystemContentBlock] | None = None,
    ) -> int:
        counted = await super().count_tokens(messages, None, system_prompt, system_prompt_content)
        for spec in tool_specs or ():
            counted += await self._spec_count(spec)
        return counted

    async def _spec_count(self, spec: ToolSpec) -> int:
        if not isinstance(spec, ReadOnlyJson):
            return await super().count_tokens([], [spec])
        known = self._spec_tokens.get(id(spec))
        if known is None or known[0] is not spec:
            known = self._spec_tokens[id(spec)] = (spec, await super().count_tokens([], [spec]))
        return known[1]
