"""`python -m surreal ...` is the `surreal` console script."""

from surreal.cli import main

raise SystemExit(main())
