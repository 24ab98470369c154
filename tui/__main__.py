import sys

from tui.entry import main

sys.exit(main())
