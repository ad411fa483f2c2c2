"""The reply agent's tools, registered once and shared by every reply.

A strands `Agent` registers its tools anew when it is made, and its registry
normalises and validates every tool's spec again each time it is asked for them:
four times per model call (the trace span's tool names, the token estimate, the
request, and the agent span). For a fixed set of tools that is the same work
every time; here it is done once.
"""

from __future__ import annotations

from typing import Any

from strands.tools.registry import ToolRegistry


class FixedToolRegistry(ToolRegistry):
    """A `ToolRegistry` whose tool specs are normalised once (again only if the registered tools change).

    The specs it returns are shared: callers must not change them (strands' event
    loop gives the model deep copies).
    """

    def __init__(self, tools: list[Any]) -> None:
        super().__init__()
        self.process_tools(tools)
        self._registered: tuple[tuple[str, int], ...] = ()
        self._config: dict[str, Any] = {}

    def get_all_tools_config(self) -> dict[str, Any]:
        registered = tuple((name, id(tool)) for name, tool in (*self.registry.items(), *self.dynamic_tools.items()))
        if registered != self._registered:
            self._config, self._registered = super().get_all_tools_config(), registered
        return dict(self._config)
