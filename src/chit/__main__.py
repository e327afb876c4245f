from chit.cli.main import main

raise SystemExit(main())
