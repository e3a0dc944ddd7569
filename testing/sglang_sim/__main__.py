"""`python -m sglang_sim <sglang.launch_server flags>`."""

from . import main

raise SystemExit(main())
