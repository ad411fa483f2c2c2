"""Entry point for ``python -m myao2``."""

from myao2.cli import main

raise SystemExit(main())
