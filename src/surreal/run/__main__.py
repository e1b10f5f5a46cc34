"""`python -m surreal.run RUN_DIR --lock-fd FD`: the launcher of a folder another process prepared (run/start.py)."""

import sys

from surreal.run.start import main

sys.exit(main())
