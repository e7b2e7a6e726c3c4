import sys
from rocketidx.cli import main
sys.exit(main())
