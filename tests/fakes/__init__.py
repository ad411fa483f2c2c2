"""Test doubles that speak Slack's and OpenAI's real wire protocols on 127.0.0.1."""

PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy")
"""slack_sdk's Socket Mode client honours these and ignores NO_PROXY: clients of the fakes must not see them."""

WAIT_SECONDS = 120.0
"""How long the fakes' `wait_*` methods wait by default for what a test expects the bot to do (an answer, a
request, a connection): waiting longer costs nothing when it comes, and on a busy machine (a load of 13-20 on
2 cores) a start and a first answer took over 30 s."""
