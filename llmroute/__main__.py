import sys

from llmroute.cli import main

sys.exit(main())
