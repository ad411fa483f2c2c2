"""The playground: a local web chat with the persona, a second chat platform beside Slack."""
