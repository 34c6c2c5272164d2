from kerncap.cli import main

raise SystemExit(main())
