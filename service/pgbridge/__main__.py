from __future__ import annotations

import sys

from pgbridge.cli import main

sys.exit(main())
