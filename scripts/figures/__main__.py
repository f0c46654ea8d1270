import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # scripts/, so that `figures` imports as a package
from figures import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
