import sys

from mixcse.cli import main

sys.exit(main())
