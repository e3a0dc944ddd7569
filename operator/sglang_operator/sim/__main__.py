"""`python -m sglang_operator.sim <sglang.launch_server flags>`."""

from . import main

raise SystemExit(main())
