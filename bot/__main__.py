"""`python -m bot` is the `scalebot` command."""

from bot.cli.main import main

raise SystemExit(main())
