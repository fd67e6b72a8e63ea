from bot.surfaces.cli import main

raise SystemExit(main())
