"""``python -m gateway.cli``: the ``cloudybot`` command."""

import sys

from gateway.cli.main import main

sys.exit(main())
