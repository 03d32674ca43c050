import sys
from pathlib import Path

# Let tests import their shared helpers (fixture_support) by module name.
sys.path.insert(0, str(Path(__file__).resolve().parent))
