from kerncap_tui.app import main

raise SystemExit(main())
