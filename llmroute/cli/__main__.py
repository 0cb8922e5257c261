"""`python -m llmroute.cli`: the same as `python -m llmroute` and the `llmroute` command."""

import sys

from llmroute.cli import main

sys.exit(main())
