"""`python -m bot` is the `scalebot` command."""

from bot.cli import main

raise SystemExit(main())
