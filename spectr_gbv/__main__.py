"""``python -m spectr_gbv``: the ``spectr-gbv`` command."""

import sys

from spectr_gbv.cli.main import main

sys.exit(main())
