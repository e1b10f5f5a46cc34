"""`python -m surreal.run RUN_DIR --lock-fd FD`: the launcher of a run folder another process prepared and handed
over with its lock (run/start.py `main`)."""

import sys

from surreal.run.start import main

sys.exit(main())
