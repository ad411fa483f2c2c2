"""Prompt rendering: Jinja templates per language, optionally overridden by the user's own."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from jinja2 import (
    BaseLoader,
    ChoiceLoader,
    Environment,
    FileSystemBytecodeCache,
    FileSystemLoader,
    PackageLoader,
    StrictUndefined,
    pass_context,
)
from jinja2.bccache import Bucket
from jinja2.runtime import Context

from myao2.application.agents import DigestPrompt, MemoryBatch, MemoryPrompt, ProfilePrompt
from myao2.application.context import PromptContext, one_line

Kind = Literal["judgment", "response", "memory", "memories", "digest", "profile"]
Part = Literal["system", "query"]


class PromptRenderer:
    """Renders `templates/<language>/<kind>_<part>.j2` with a `PromptContext`.

    Templates in `template_dir` (same relative names, e.g. `ja/response_system.j2`)
    take precedence over the shipped ones. A system prompt given in
    `system_overrides` for a kind replaces that kind's rendered system prompt.
    """

    def __init__(
        self,
        language: Literal["ja", "en"],
        template_dir: Path | None = None,
        system_overrides: Mapping[str, str | None] | None = None,
    ) -> None:
        loaders: list[BaseLoader] = [PackageLoader("myao2.infrastructure.llm", "templates")]
        if template_dir is not None:
            loaders.insert(0, FileSystemLoader(template_dir))
        self._env = _Environment(
            loader=ChoiceLoader(loaders),
            undefined=StrictUndefined,
            autoescape=False,
            trim_blocks=True,
            lstrip_blocks=True,
            bytecode_cache=_bytecode_cache(),
            # The shipped templates change only with the package: no need to check their files at every
            # render (each include too). The user's own are checked, so edits show without a restart.
            auto_reload=template_dir is not None,
        )
        self._env.filters["one_line"] = one_line  # text that must not start lines of its own
        self._env.filters["local_time"] = _local_time
        self._language = language
        self._overrides = dict(system_overrides or {})

    def warm(self) -> None:
        """Compile every template of the language now, not on the event loop at its first use (about 80 ms of CPU;
        ~5 ms when the previous start left them compiled)."""
        for name in self._env.list_templates(filter_func=lambda name: name.startswith(f"{self._language}/")):
            self._env.get_template(name)

    def render(
        self,
        kind: Kind,
        part: Part,
        context: PromptContext | MemoryPrompt | MemoryBatch | DigestPrompt | ProfilePrompt,
        **extra: Any,
    ) -> str:
        """The prompt text; `extra` adds variables a template needs (e.g. `elapsed` for judgment).

        The memory templates get a `MemoryPrompt` (the memories ones a `MemoryBatch`), the digest ones a
        `DigestPrompt`, the profile ones a `ProfilePrompt`, the others a `PromptContext`.
        """
        override = self._overrides.get(kind) if part == "system" else None
        if override:
            return override
        template = self._env.get_template(f"{self._language}/{kind}_{part}.j2")
        return template.render(context=context, **extra).strip()


@pass_context
def _local_time(variables: Context, moment: datetime) -> str:
    """The `local_time` filter: `moment` as the prompt shows times (its context's `local_time`). A filter, not a
    call of the method: Jinja calls a filter directly, a function through its own call, which costs as much as a
    dozen lines of a prompt."""
    return str(variables["context"].local_time(moment))


class _Environment(Environment):
    """An `Environment` whose templates keep their globals in a dict of their own, not in a `ChainMap` over its:
    Jinja copies a template's globals at each render (and each include), and read through a `ChainMap`, each one
    cost a `KeyError` raised and caught: a third of the CPU of rendering a short prompt. (Its globals are set once,
    before any template is loaded.)"""

    def make_globals(self, d: MutableMapping[str, Any] | None) -> MutableMapping[str, Any]:
        return {**self.globals, **(d or {})}


class _BytecodeCache(FileSystemBytecodeCache):
    """Templates compiled by an earlier start, as Python keeps its modules compiled (a template whose source
    changed is compiled again). Only a speed-up: a cache that cannot be written is left as it is."""

    def dump_bytecode(self, bucket: Bucket) -> None:
        with suppress(OSError):
            super().dump_bytecode(bucket)


def _bytecode_cache() -> _BytecodeCache | None:
    """The compiled templates' cache in a folder of this user's own under the temporary folder; None where none
    can be made safely."""
    try:
        return _BytecodeCache()
    except (RuntimeError, OSError):
        return None
