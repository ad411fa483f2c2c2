"""The configured web tools' machinery, built once from `tools` in the config."""

from __future__ import annotations

from dataclasses import dataclass

from myao2.config import ToolsConfig
from myao2.infrastructure.web.addresses import any_address, is_public
from myao2.infrastructure.web.fetch import WebFetcher
from myao2.infrastructure.web.search import SearchProvider, TavilySearch

DEFAULT_LANGUAGE = "ja"


@dataclass(frozen=True)
class WebToolbox:
    """A fetcher and a search provider (None: that tool is off), and how the tools answer."""

    fetcher: WebFetcher | None
    search: SearchProvider | None
    max_content_length: int
    """Characters of page text the model gets."""
    language: str = DEFAULT_LANGUAGE
    """The language of the tools' sentences: 'ja' or 'en'."""


def build_web_toolbox(config: ToolsConfig, language: str) -> WebToolbox:
    """The toolbox `config` describes: web_fetch when enabled, web_search when it has an API key."""
    fetch = config.web_fetch
    fetcher = None
    if fetch.enabled:
        allowed = any_address if fetch.allow_private_networks else is_public
        fetcher = WebFetcher(fetch.timeout_seconds, fetch.max_response_bytes, allowed)
    search_config = config.web_search
    search: SearchProvider | None = None
    if search_config.api_key.strip():
        search = TavilySearch(
            api_key=search_config.api_key.strip(),
            base_url=search_config.base_url,
            search_depth=search_config.search_depth,
            max_results=search_config.max_results,
            max_content_length=search_config.max_content_length,
            timeout_seconds=search_config.timeout_seconds,
        )
    return WebToolbox(fetcher, search, fetch.max_content_length, language)
