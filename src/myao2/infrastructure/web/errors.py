"""Why a web fetch or search failed, as a kind the tools word for the model."""

from __future__ import annotations

from typing import Any


class WebError(Exception):
    """A fetch or search that did not succeed.

    `kind` names the reason (e.g. "timeout", "refused_address"); `params` fill in
    the sentence the tool gives the model.
    """

    def __init__(self, kind: str, **params: Any) -> None:
        super().__init__(kind)
        self.kind = kind
        self.params = params
