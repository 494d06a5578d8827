"""``python -m operators.app`` runs the ``hdfs-region`` command."""

import sys

from operators.app.cli import main

sys.exit(main())
