from solrl_core.doctor.cli import main

raise SystemExit(main())
