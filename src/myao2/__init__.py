"""myao2: a Slack bot that lives in a workspace like a friend."""
