"""Test doubles that speak Slack's and OpenAI's real wire protocols on 127.0.0.1."""

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")
"""slack_sdk's Socket Mode client honours these and ignores NO_PROXY: clients of the fakes must not see them."""
