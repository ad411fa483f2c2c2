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
    nodes,
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
        # Whether each template reads the persona alone (`reads_persona_alone`), and what those rendered, for
        # the shipped templates only: the user's own may change while the bot runs.
        self._persona_alone: dict[str, bool] | None = {} if template_dir is None else None
        self._rendered: dict[tuple[str, Any], str] = {}

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
        name = f"{self._language}/{kind}_{part}.j2"
        if extra or self._persona_alone is None:
            return self._render(name, context, extra)
        if name not in self._persona_alone:
            self._persona_alone[name] = reads_persona_alone(self._env, name)
        if not self._persona_alone[name]:
            return self._render(name, context, extra)
        # The same for every conversation, rendered once: a system prompt, mostly.
        key = (name, getattr(context, "persona", None))
        if key not in self._rendered:
            self._rendered[key] = self._render(name, context, extra)
        return self._rendered[key]

    def _render(self, name: str, context: Any, extra: Mapping[str, Any]) -> str:
        return self._env.get_template(name).render(context=context, **extra).strip()


def reads_persona_alone(env: Environment, name: str) -> bool:
    """Whether template `name`, with those it extends, shows nothing but what `context.persona` holds: it reads
    no other variable (not even through a filter given the template's variables), calls nothing, includes and
    imports nothing. Its text is then the same for every context with that persona."""
    read: set[str] = set()
    while name not in read:
        read.add(name)
        tree = env.parse(env.loader.get_source(env, name)[0])  # type: ignore[union-attr]
        persona = {
            id(node.node)
            for node in tree.find_all(nodes.Getattr)
            if isinstance(node.node, nodes.Name) and node.node.name == "context" and node.attr == "persona"
        }
        if any(id(node) not in persona for node in tree.find_all(nodes.Name)):
            return False
        if any(tree.find_all((nodes.Call, nodes.Include, nodes.Import, nodes.FromImport, nodes.ContextReference))):
            return False
        given = (*tree.find_all(nodes.Filter), *tree.find_all(nodes.Test))
        if any(_pass_arg(env, node) == "context" for node in given):
            return False
        parent = next(tree.find_all(nodes.Extends), None)
        if parent is None:
            return True
        if not isinstance(parent.template, nodes.Const):
            return False
        name = parent.template.value
    return False  # a template that extends itself


def _pass_arg(env: Environment, node: nodes.Filter | nodes.Test) -> str | None:
    """What Jinja hands a filter or test besides its arguments ("context" for the template's variables)."""
    function = (env.filters if isinstance(node, nodes.Filter) else env.tests).get(node.name)
    return "context" if function is None else getattr(getattr(function, "jinja_pass_arg", None), "name", None)


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
