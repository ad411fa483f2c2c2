"""Reading YAML that people write (the config file, a memo file's front matter): PyYAML's safe loader, parsing in C
where PyYAML was built with libyaml, with collections nested absurdly deep refused before they are built."""

from __future__ import annotations

from typing import Any

import yaml

LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""`yaml.safe_load`'s loader, in C where it can be: the pure-Python parser took ~10x longer over a 110-line config
file, on the way to every start. The same safe constructor; libyaml words some errors at other lines, and refuses
some escapes the Python parser takes (a lone surrogate, "\\ud800")."""
MAX_DEPTH = 100
"""How deep collections may nest (a config file: 4 or 5), their aliases expanded. Deeper is refused before it is
built: libyaml's composer recurses in C (some 30,000 levels crashed the process), PyYAML's in Python
(RecursionError from ~500), and so does whatever walks the values (towers of aliases, each within the depth)."""


MAX_VALUES = 100_000
"""How many values (scalars and collections) a text may hold once its aliases are expanded (a config file: a few
hundred). More is refused before it is built: aliases of aliases reach billions in a few hundred bytes ("a billion
laughs"), which whatever walks the values (the config's ${VAR} substitution, a memo field's check) goes through."""
MAX_CHARACTERS = 10_000_000
"""How many characters its scalars may hold once its aliases are expanded: a long text named a thousand times is
few values, but the ${VAR} substitution writes each anew (a 40 KB file took 3 GB)."""


def load_yaml(text: str, loader: type[Any] = LOADER) -> Any:
    """The value `text` holds, as `yaml.safe_load` reads it (with `loader`, a safe one); a `yaml.YAMLError` (with its
    line and column) for text that is not YAML, whose collections nest deeper than `MAX_DEPTH` or that holds more
    than `MAX_VALUES` values or `MAX_CHARACTERS` characters once its aliases are expanded, that holds a collection
    that holds itself (whatever walks it recurses without end), or with a value that is not what its form or tag
    says (`_marked`). Depth, size and cycles are read from the parser's events (it keeps a stack of its own, no
    recursion): ~0.24 ms for a 110-line file in C."""
    starts: list[tuple[str | None, int, int]] = []  # the open collections: anchor, values and characters before it
    deepest: list[int] = []  # how deep the collections inside each open collection nest
    sizes: dict[str, tuple[int, int, int]] = {}  # the values, characters and depth each anchor stands for
    values = characters = 0
    too_deep = f"collections nested deeper than {MAX_DEPTH}"
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(starts) >= MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=too_deep, problem_mark=event.start_mark)
            starts.append((event.anchor, values, characters))
            deepest.append(0)
            values += 1
        elif isinstance(event, yaml.CollectionEndEvent):
            anchor, values_before, characters_before = starts.pop()
            depth = deepest.pop() + 1
            if deepest:
                deepest[-1] = max(deepest[-1], depth)
            if anchor is not None:
                sizes[anchor] = (values - values_before, characters - characters_before, depth)
        elif isinstance(event, yaml.ScalarEvent):
            values += 1
            characters += len(event.value)
            if event.anchor is not None:
                sizes[event.anchor] = (1, len(event.value), 0)
        elif isinstance(event, yaml.AliasEvent):
            if any(anchor == event.anchor for anchor, _, _ in starts):
                cycle = "an alias inside the collection it names (a value that holds itself)"
                raise yaml.MarkedYAMLError(problem=cycle, problem_mark=event.start_mark)
            more_values, more_characters, depth = sizes.get(event.anchor, (1, 0, 0))
            if len(starts) + depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(problem=too_deep, problem_mark=event.start_mark)
            if deepest:
                deepest[-1] = max(deepest[-1], depth)
            values += more_values
            characters += more_characters
        if values > MAX_VALUES:
            too_many = f"more than {MAX_VALUES} values once its aliases are expanded"
            raise yaml.MarkedYAMLError(problem=too_many, problem_mark=event.start_mark)
        if characters > MAX_CHARACTERS:
            too_long = f"more than {MAX_CHARACTERS} characters once its aliases are expanded"
            raise yaml.MarkedYAMLError(problem=too_long, problem_mark=event.start_mark)
    return yaml.load(text, Loader=_marked(loader))


_MARKED: dict[type[Any], type[Any]] = {}


def _marked(loader: type[Any]) -> type[Any]:
    """`loader` whose constructors' own failures (a date that is no date, an ``!!int`` that is no number or a sign
    alone, an ``!!bool`` that is neither: PyYAML raises ValueError, IndexError, KeyError and the like) are a
    `yaml.YAMLError` at the value's line, naming its type, not the value (which may be a secret)."""
    marked = _MARKED.get(loader)
    if marked is None:

        def construct_object(self: Any, node: yaml.Node, deep: bool = False) -> Any:
            try:
                return loader.construct_object(self, node, deep)
            except (ValueError, TypeError, AttributeError, OverflowError, LookupError):
                kind = str(node.tag).rsplit(":", 1)[-1]
                problem = f"not a valid {kind}"
                raise yaml.constructor.ConstructorError(problem=problem, problem_mark=node.start_mark) from None

        marked = _MARKED[loader] = type(f"Marked{loader.__name__}", (loader,), {"construct_object": construct_object})
    return marked
