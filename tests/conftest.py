import sys
from pathlib import Path

# Test helpers (scripted_server, sample repositories) are imported by name from this folder.
sys.path.insert(0, str(Path(__file__).parent))
pytest_plugins = ["llama_fixtures", "install_fixtures"]
