"""``python -m torchhw`` and the ``torchhw`` command: the course tooling's command line.

It lives in :mod:`torchhw.course.cli` (it needs the ``course`` extra); this file only hands over.
"""

import sys

from torchhw.course.cli import main

if __name__ == "__main__":
    sys.exit(main())
