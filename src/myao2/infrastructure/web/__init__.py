"""The web as the response agent's tools see it: fetching pages and searching."""
